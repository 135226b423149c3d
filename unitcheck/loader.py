"""MODEL specs (SPEC 10) -> (module, example inputs).

- a bundled name (``gpt``, ``gct``, ...; ``--set`` overrides config fields);
- ``hf:<model_type>``: any architecture in transformers' config mapping, random weights;
- ``path/to/file.py:factory`` or ``package.module:factory``: the factory returns a module or a
  ``(module, example_inputs)`` pair (``--input`` supplies inputs when it returns a module only);
- a directory written by ``unitcheck rewrite``.

Every failure raises :class:`ModelSpecError` with a one-line reason (the CLI exits 2).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .errors import UnitcheckError

__all__ = ["ModelSpecError", "LoadedModel", "load_model", "parse_input_spec", "parse_sets", "bundled_fields"]


class ModelSpecError(UnitcheckError, ValueError):
    """The model spec, a ``--set`` or an ``--input`` cannot be used."""


@dataclass
class LoadedModel:
    name: str
    model: nn.Module
    inputs: Any
    kind: str  # "bundled", "hf", "factory", "rewrite"


_INPUT = re.compile(r"^(?P<dtype>[a-z]+\d*)\[(?P<shape>[\d,\s]*)\](?:<(?P<bound>\d+))?$")
_DTYPES = {
    "float32": torch.float32, "float": torch.float32, "float64": torch.float64,
    "double": torch.float64, "float16": torch.float16, "half": torch.float16,
    "bfloat16": torch.bfloat16, "int64": torch.int64, "long": torch.int64, "int32": torch.int32,
    "int": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool,
}


def parse_input_spec(text: str, seed: int = 0, device: str = "cpu") -> torch.Tensor:
    """``int64[2,64]<50257`` (integers below a bound), ``float32[8,3,32,32]`` (standard normal)."""
    m = _INPUT.match(text.strip().replace(" ", ""))
    if m is None or m["dtype"] not in _DTYPES:
        raise ModelSpecError(
            f"malformed --input {text!r}: expected DTYPE[d0,d1,...] with an optional <BOUND for "
            "integers, e.g. int64[2,64]<50257 or float32[8,3,32,32]"
        )
    dtype = _DTYPES[m["dtype"]]
    try:
        shape = tuple(int(s) for s in m["shape"].split(",") if s)
    except ValueError:
        raise ModelSpecError(f"malformed --input shape in {text!r}") from None
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        if m["bound"]:
            raise ModelSpecError(f"--input {text!r}: a bound applies to integer inputs only")
        return torch.randn(shape, generator=g).to(dtype).to(device)
    if dtype == torch.bool:
        return (torch.rand(shape, generator=g) > 0.5).to(device)
    bound = int(m["bound"]) if m["bound"] else 2
    return torch.randint(0, bound, shape, generator=g, dtype=dtype).to(device)


def parse_sets(items: Sequence[str] | None) -> dict[str, Any]:
    from .hf import parse_value

    out: dict[str, Any] = {}
    for item in items or ():
        if "=" not in item:
            raise ModelSpecError(f"malformed --set {item!r}: expected key=value")
        k, v = item.split("=", 1)
        if not k.strip():
            raise ModelSpecError(f"malformed --set {item!r}: empty key")
        out[k.strip()] = parse_value(v.strip())
    return out


def _on(device: str) -> Any:
    """Build under a default device: ``meta`` allocates no weights (static linting)."""
    import contextlib

    return torch.device(device) if device != "cpu" else contextlib.nullcontext()


def _move(inputs: Any, device: str) -> Any:
    from torch.utils import _pytree as pytree

    return pytree.tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, inputs)


def bundled_fields(spec: str) -> set[str] | None:
    """The config fields of a bundled model; None when ``spec`` names no bundled model."""
    from .models import MODELS, config_class

    if spec not in MODELS:
        return None
    return {f.name for f in dataclasses.fields(config_class(spec))}


def _bundled(name: str, sets: Mapping[str, Any], device: str = "cpu") -> LoadedModel:
    from .models import module as model_module

    fields = bundled_fields(name) or set()
    extra = {"batch", "seq", "seed"}
    for key in sets:
        if key not in fields and key not in extra:
            raise ModelSpecError(
                f"bundled model {name!r} has no config field {key!r} (fields: {', '.join(sorted(fields))})"
            )
    try:
        with _on(device):
            model, inputs = model_module(name).build(**sets)
    except (TypeError, ValueError, AssertionError, RuntimeError) as err:
        raise ModelSpecError(f"cannot build {name!r} with {dict(sets)}: {err}") from None
    return LoadedModel(name, model, _move(inputs, device), "bundled")


def _import_factory(spec: str) -> Any:
    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise ModelSpecError(f"malformed factory spec {spec!r}: expected path/to/file.py:factory or pkg.module:factory")
    if target.endswith(".py") or os.sep in target or "/" in target:
        path = os.path.abspath(target)
        if not os.path.isfile(path):
            raise ModelSpecError(f"factory file not found: {target}")
        mod_name = "_unitcheck_user_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
        spec_obj = importlib.util.spec_from_file_location(mod_name, path)
        if spec_obj is None or spec_obj.loader is None:
            raise ModelSpecError(f"cannot import {target}")
        module = importlib.util.module_from_spec(spec_obj)
        sys.modules[mod_name] = module
        sys.path.insert(0, os.path.dirname(path))
        try:
            spec_obj.loader.exec_module(module)
        except Exception as err:
            raise ModelSpecError(f"importing {target} failed: {type(err).__name__}: {err}") from None
        finally:
            sys.path.remove(os.path.dirname(path))
    else:
        try:
            module = importlib.import_module(target)
        except Exception as err:
            raise ModelSpecError(f"cannot import module {target!r}: {type(err).__name__}: {err}") from None
    if not hasattr(module, attr):
        raise ModelSpecError(f"{target} has no attribute {attr!r}")
    return getattr(module, attr)


def _from_factory(spec: str, sets: Mapping[str, Any], inputs: Sequence[str] | None, device: str = "cpu") -> LoadedModel:
    factory = _import_factory(spec)
    try:
        if not callable(factory) or isinstance(factory, nn.Module):
            made = factory
        elif device == "cpu":
            made = factory(**sets)
        else:
            try:
                with _on(device):
                    made = factory(**sets)
            except (TypeError, ValueError):
                raise
            except Exception:  # the factory needs real tensors (a checkpoint, data): build on CPU
                made = factory(**sets)
    except TypeError as err:
        raise ModelSpecError(f"factory {spec} rejected the arguments {dict(sets)}: {err}") from None
    except Exception as err:
        raise ModelSpecError(f"factory {spec} raised {type(err).__name__}: {err}") from None
    example: Any = None
    if isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], nn.Module):
        made, example = made
    if not isinstance(made, nn.Module):
        raise ModelSpecError(f"factory {spec} returned {type(made).__name__}, not an nn.Module or (module, inputs)")
    if inputs:
        example = tuple(parse_input_spec(s, seed=i) for i, s in enumerate(inputs))
    if example is None:
        raise ModelSpecError(f"factory {spec} gave no example inputs: pass --input, e.g. --input float32[8,16]")
    on_meta = any(t.device.type == "meta" for t in made.parameters())
    return LoadedModel(spec, made, _move(example, "meta" if on_meta else "cpu"), "factory")


def load_model(
    spec: str,
    sets: Mapping[str, Any] | None = None,
    inputs: Sequence[str] | None = None,
    device: str = "cpu",
) -> LoadedModel:
    """Resolve a MODEL spec; raises ModelSpecError with a one-line reason.

    ``device="meta"`` builds without allocating weights: enough for static linting of a model of
    any size; the oracle and training need ``"cpu"`` (or a GPU).
    """
    sets = dict(sets or {})
    if spec.startswith("hf:"):
        from .hf import HFError, build

        extra = {k: sets.pop(k) for k in ("batch", "seq", "seed") if k in sets}
        example: Any
        try:
            model, example = build(spec[3:], sets, device=device, **extra)
        except HFError as err:
            raise ModelSpecError(str(err)) from None
        if inputs:
            example = tuple(parse_input_spec(s, seed=i) for i, s in enumerate(inputs))
        return LoadedModel(spec, model, _move(example, device), "hf")
    if os.path.isdir(spec) and os.path.isfile(os.path.join(spec, "unitcheck.json")):
        from .rewrite.save import load_rewritten

        model, example = load_rewritten(spec)
        return LoadedModel(spec, model, example, "rewrite")
    if ":" in spec:
        return _from_factory(spec, sets, inputs, device)
    from .models import MODELS

    if spec in MODELS:
        loaded = _bundled(spec, sets, device)
        if inputs:
            loaded.inputs = _move(tuple(parse_input_spec(s, seed=i) for i, s in enumerate(inputs)), device)
        return loaded
    if os.path.exists(spec):
        raise ModelSpecError(f"{spec} is not a model spec: use path/to/file.py:factory or a rewrite directory")
    raise ModelSpecError(f"unknown model {spec!r}: use a bundled name ({', '.join(MODELS)}), hf:<type>, or file.py:factory")
