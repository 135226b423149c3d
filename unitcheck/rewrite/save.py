"""A rewrite directory: ``model.py`` (generated), weights, ``unitcheck.json`` (config and report),
``example_inputs.pt``. Every file is written atomically; weights load with ``weights_only=True``."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from typing import Any

import torch
from torch import nn

from ..errors import UnitcheckError
from ..fsutil import atomic_path, atomic_write_text
from ..validate import (
    InputError,
    check_example_inputs,
    load_error,
    read_json,
    read_torch_file,
    state_dict_mismatch,
)

__all__ = ["save_rewritten", "load_rewritten", "load", "MANIFEST", "RewriteDirError", "WEIGHT_FILES",
           "OUTPUT_FILES"]

MANIFEST = "unitcheck.json"
WEIGHT_FILES = ("model.safetensors", "model.pt")
OUTPUT_FILES = ("model.py", *WEIGHT_FILES, "example_inputs.pt", MANIFEST)


def save_rewritten(out_dir: str, source_code: str, module: nn.Module, example_inputs: Any,
                   manifest: dict[str, Any]) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in module.state_dict().items()}
    try:
        from safetensors.torch import save_file

        weights = "model.safetensors"
        with atomic_path(os.path.join(out_dir, weights)) as tmp:
            save_file(state, tmp)
    except ImportError:
        weights = "model.pt"
        with atomic_path(os.path.join(out_dir, weights)) as tmp:
            torch.save(state, tmp)
    with atomic_path(os.path.join(out_dir, "example_inputs.pt")) as tmp:
        torch.save(example_inputs, tmp)
    atomic_write_text(os.path.join(out_dir, "model.py"), source_code)
    manifest = {**manifest, "weights": weights, "class": "Rewritten", "format": 1}
    atomic_write_text(os.path.join(out_dir, MANIFEST), json.dumps(manifest, indent=2) + "\n")
    return ["model.py", weights, "example_inputs.pt", MANIFEST]


class RewriteDirError(UnitcheckError, ValueError):
    """A file of a rewrite directory that is missing, damaged or not what ``unitcheck rewrite``
    writes: exit 2, naming the file."""


_REGENERATE = "rerun `unitcheck rewrite` to regenerate the directory"


def _manifest(directory: str) -> dict[str, Any]:
    path = os.path.join(directory, MANIFEST)
    try:
        data = read_json(path, "the manifest unitcheck rewrite writes")
    except InputError as err:
        raise RewriteDirError(f"{err}; {_REGENERATE}") from None
    if not isinstance(data, dict):
        raise RewriteDirError(f"{path} holds a JSON {type(data).__name__}, not the manifest object; {_REGENERATE}")
    if data.get("weights") not in WEIGHT_FILES:
        raise RewriteDirError(f"{path}: 'weights' must name one of {', '.join(WEIGHT_FILES)}, "
                              f"got {data.get('weights')!r}; {_REGENERATE}")
    cls = data.get("class", "Rewritten")
    if not isinstance(cls, str) or not cls.isidentifier():
        raise RewriteDirError(f"{path}: 'class' must name the model class, got {cls!r}; {_REGENERATE}")
    return data


def _import_generated(path: str) -> Any:
    if not os.path.isfile(path):
        raise RewriteDirError(f"{path} is missing; {_REGENERATE}")
    name = "_unitcheck_rewritten_" + str(abs(hash(os.path.abspath(path))))
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RewriteDirError(f"cannot import {path}; {_REGENERATE}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SystemExit as err:
        sys.modules.pop(name, None)
        raise RewriteDirError(f"{path} called sys.exit({err.code!r}) on import; {_REGENERATE}") from None
    except Exception as err:
        sys.modules.pop(name, None)
        raise RewriteDirError(f"{path} cannot be imported ({load_error(err)}); {_REGENERATE}") from None
    return module


def _instantiate(code: Any, cls_name: str, path: str) -> nn.Module:
    cls = getattr(code, cls_name, None)
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise RewriteDirError(f"{path} defines no nn.Module class {cls_name!r}; {_REGENERATE}")
    try:
        return cls()
    except SystemExit as err:
        raise RewriteDirError(f"{path}: {cls_name}() called sys.exit({err.code!r}); {_REGENERATE}") from None
    except Exception as err:
        raise RewriteDirError(f"{path}: {cls_name}() failed ({load_error(err)}); {_REGENERATE}") from None


def _weights(path: str) -> dict[str, torch.Tensor]:
    if not os.path.isfile(path):
        raise RewriteDirError(f"{path} is missing; {_REGENERATE}")
    try:
        if path.endswith(".safetensors"):
            from safetensors.torch import load_file

            state = load_file(path)
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except ImportError:
        raise RewriteDirError(f"{path} needs safetensors: pip install safetensors") from None
    except Exception as err:
        raise RewriteDirError(f"{path} is not a readable weights file, truncated or damaged "
                              f"({load_error(err)}); {_REGENERATE}") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise RewriteDirError(f"{path} does not hold a state dict of tensors; {_REGENERATE}")
    return state


def load_rewritten(directory: str) -> tuple[nn.Module, Any]:
    """The rewritten model (weights loaded) and its example inputs. Each file is checked and a
    damaged one is named (RewriteDirError), never a traceback from deep inside torch."""
    manifest = _manifest(directory)
    code_path = os.path.join(directory, "model.py")
    code = _import_generated(code_path)
    model = _instantiate(code, manifest.get("class", "Rewritten"), code_path)
    wpath = os.path.join(directory, manifest["weights"])
    state = _weights(wpath)
    mismatch = state_dict_mismatch(model.state_dict(), state)
    if mismatch:
        raise RewriteDirError(f"{wpath} does not fit the model in {code_path}: {mismatch}; {_REGENERATE}")
    model.load_state_dict(state)
    ipath = os.path.join(directory, "example_inputs.pt")
    if not os.path.isfile(ipath):
        raise RewriteDirError(f"{ipath} is missing; {_REGENERATE}")
    try:
        example = read_torch_file(ipath, "tensor file")
        check_example_inputs(example, ipath)
    except InputError as err:
        raise RewriteDirError(f"{err}; {_REGENERATE}") from None
    return model, example


def load(directory: str) -> nn.Module:
    """``unitcheck.load(DIR)``: the rewritten model in a directory written by ``unitcheck rewrite``."""
    return load_rewritten(directory)[0]
