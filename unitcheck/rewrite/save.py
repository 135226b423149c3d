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

from ..fsutil import atomic_path, atomic_write_text

__all__ = ["save_rewritten", "load_rewritten", "load", "MANIFEST"]

MANIFEST = "unitcheck.json"


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


def _import_generated(path: str) -> Any:
    name = "_unitcheck_rewritten_" + str(abs(hash(os.path.abspath(path))))
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_rewritten(directory: str) -> tuple[nn.Module, Any]:
    """The rewritten model (weights loaded) and its example inputs."""
    with open(os.path.join(directory, MANIFEST)) as fh:
        manifest = json.load(fh)
    code = _import_generated(os.path.join(directory, "model.py"))
    model = getattr(code, manifest.get("class", "Rewritten"))()
    wpath = os.path.join(directory, manifest["weights"])
    if wpath.endswith(".safetensors"):
        from safetensors.torch import load_file

        state = load_file(wpath)
    else:
        state = torch.load(wpath, map_location="cpu", weights_only=True)
    model.load_state_dict(state)
    example = torch.load(os.path.join(directory, "example_inputs.pt"), map_location="cpu", weights_only=True)
    return model, example


def load(directory: str) -> nn.Module:
    """``unitcheck.load(DIR)``: the rewritten model in a directory written by ``unitcheck rewrite``."""
    return load_rewritten(directory)[0]
