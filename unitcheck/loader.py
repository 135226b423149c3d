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
import math
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .errors import UnitcheckError
from .resources import ResourceError, check_fits, is_out_of_memory, module_bytes
from .validate import MAX_SIZE, check_example_inputs, check_override

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


def _input_shape(text: str, m: re.Match[str]) -> tuple[int, ...]:
    try:
        shape = tuple(int(s) for s in m["shape"].split(",") if s)
    except ValueError:
        raise ModelSpecError(f"malformed --input shape in {text!r}") from None
    if any(d < 1 for d in shape):
        raise ModelSpecError(f"--input {text!r}: every dimension must be at least 1")
    if math.prod(shape) >= 2**62:
        raise ModelSpecError(f"--input {text!r}: {math.prod(shape):.3g} elements is beyond any tensor: "
                             "give the sizes of one example batch")
    return shape


def parse_input_spec(text: str, seed: int = 0, device: str = "cpu") -> torch.Tensor:
    """``int64[2,64]<50257`` (integers below a bound), ``float32[8,3,32,32]`` (standard normal).

    On ``meta`` nothing is allocated (any size traces); elsewhere the size is checked against the
    memory budget before the tensor is drawn."""
    m = _INPUT.match(text.strip().replace(" ", ""))
    if m is None or m["dtype"] not in _DTYPES:
        raise ModelSpecError(
            f"malformed --input {text!r}: expected DTYPE[d0,d1,...] with an optional <BOUND for "
            "integers, e.g. int64[2,64]<50257 or float32[8,3,32,32]"
        )
    dtype = _DTYPES[m["dtype"]]
    shape = _input_shape(text, m)
    if m["bound"] is not None:
        if dtype.is_floating_point or dtype == torch.bool:
            raise ModelSpecError(f"--input {text!r}: a bound applies to integer inputs only")
        limit = torch.iinfo(dtype).max + 1
        if not 1 <= int(m["bound"]) <= limit:
            raise ModelSpecError(f"--input {text!r}: the bound must lie in [1, {limit}] for {m['dtype']}")
    if device == "meta":
        return torch.empty(shape, dtype=dtype, device="meta")
    itemsize = torch.empty((), dtype=dtype).element_size()
    check_fits(math.prod(shape) * max(itemsize, 4), f"--input {text!r}",
               "give a smaller shape, or lint on --device meta")
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype).to(device)
    if dtype == torch.bool:
        return (torch.rand(shape, generator=g) > 0.5).to(device)
    bound = int(m["bound"]) if m["bound"] else 2
    return torch.randint(0, bound, shape, generator=g, dtype=dtype).to(device)


def _parse_inputs(specs: Sequence[str], device: str) -> tuple[torch.Tensor, ...]:
    return tuple(parse_input_spec(s, seed=i, device=device) for i, s in enumerate(specs))


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


def _move(inputs: Any, device: str, where: str) -> Any:
    from torch.utils import _pytree as pytree

    if device == "meta":  # the tracer keeps integer values aside (a branch on a grid size needs them)
        from .tracer import to_meta

        return to_meta(inputs)

    def to(t: Any) -> Any:
        if not isinstance(t, torch.Tensor) or t.device.type == device:
            return t
        if t.device.type == "meta":
            raise ModelSpecError(f"{where}: the example inputs are on the meta device (no values) but "
                                 f"the model is on {device}: build the inputs on the CPU")
        return t.to(device)

    return pytree.tree_map(to, inputs)


def _tensor_device(model: nn.Module) -> str | None:
    """Where the model's weights live; None for a module with no parameters or buffers."""
    for t in [*model.parameters(), *model.buffers()]:
        return t.device.type
    return None


def _describe(spec: str, sets: Mapping[str, Any]) -> str:
    return spec + (" with " + " ".join(f"--set {k}={v}" for k, v in sets.items()) if sets else "")


def _check_weights_fit(spec: str, sets: Mapping[str, Any], build_on_meta: Callable[[], nn.Module]) -> None:
    """Build on ``meta`` (nothing allocated), count the bytes of the weights, and refuse a model
    the memory cannot hold before a real build asks the OS for it. A meta build that fails says
    nothing: the real build reports the reason."""
    try:
        model = build_on_meta()
    except UnitcheckError:
        raise
    except Exception:
        return
    check_fits(module_bytes(model), f"{_describe(spec, sets)} (its weights)",
               "reduce the sizes with --set, or lint it on --device meta")


def _check_extras(spec: str, extras: Mapping[str, Any]) -> None:
    """``batch``, ``seq`` and ``seed``: sizes of the example batch and its seed."""
    for key, value in extras.items():
        if value is None and key == "seq":
            continue
        low, high = (0, 2**63 - 1) if key == "seed" else (1, MAX_SIZE)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ModelSpecError(f"--set {key}={value}: {spec}'s {key} must be an integer in [{low}, {high}]")


def _check_batch_fits(spec: str, extras: Mapping[str, Any], seq_default: int) -> None:
    batch = int(extras.get("batch", 2))
    seq = int(extras.get("seq") or seq_default)
    check_fits(batch * (seq + 1) * 8 * 2, f"{spec}'s example batch ({batch} x {seq} tokens)",
               "give smaller --set batch= and --set seq=")


def bundled_fields(spec: str) -> set[str] | None:
    """The config fields of a bundled model; None when ``spec`` names no bundled model."""
    from .models import MODELS, config_class

    if spec not in MODELS:
        return None
    return {f.name for f in dataclasses.fields(config_class(spec))}


def _check_bundled_sets(name: str, sets: Mapping[str, Any]) -> dict[str, Any]:
    """Each ``--set`` against the bundled config field's type and range (its default)."""
    from .models import config_class

    fields = {f.name: f for f in dataclasses.fields(config_class(name))}
    extra = {"batch", "seq", "seed"}
    out: dict[str, Any] = {}
    for key, value in sets.items():
        if key in extra:
            out[key] = value
            continue
        f = fields.get(key)
        if f is None:
            raise ModelSpecError(
                f"bundled model {name!r} has no config field {key!r} (fields: {', '.join(sorted(fields))})"
            )
        out[key] = check_override(name, key, value, f.default, f.type)
    _check_extras(name, {k: v for k, v in out.items() if k in extra})
    return out


def _bundled(name: str, sets: Mapping[str, Any], device: str = "cpu") -> LoadedModel:
    from .models import config_class
    from .models import module as model_module

    sets = _check_bundled_sets(name, sets)
    block = sets.get("block_size", getattr(config_class(name), "block_size", 32))
    _check_batch_fits(name, sets, min(32, block if isinstance(block, int) else 32))
    if device != "meta":
        def on_meta() -> nn.Module:
            with _on("meta"):
                return model_module(name).build(**sets)[0]  # type: ignore[no-any-return]

        _check_weights_fit(name, sets, on_meta)
    try:
        with _on(device):
            model, inputs = model_module(name).build(**sets)
    except UnitcheckError:
        raise
    except Exception as err:
        if is_out_of_memory(err):
            raise ResourceError(f"{_describe(name, sets)}: out of memory (or beyond any tensor's size) "
                                "while building it; reduce the sizes with --set") from None
        raise ModelSpecError(f"cannot build {name!r} with {dict(sets)}: {err}") from None
    return LoadedModel(name, model, _move(inputs, device, name), "bundled")


def _exit_text(err: SystemExit) -> str:
    return f"sys.exit({err.code!r})" if err.code is not None else "sys.exit()"


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
        except SystemExit as err:
            raise ModelSpecError(f"importing {target} called {_exit_text(err)}: a factory module must "
                                 "not exit (guard scripts with if __name__ == '__main__')") from None
        except Exception as err:
            raise ModelSpecError(f"importing {target} failed: {type(err).__name__}: {err}") from None
        finally:
            sys.path.remove(os.path.dirname(path))
    else:
        try:
            module = importlib.import_module(target)
        except SystemExit as err:
            raise ModelSpecError(f"importing {target} called {_exit_text(err)}: a factory module must "
                                 "not exit") from None
        except Exception as err:
            raise ModelSpecError(f"cannot import module {target!r}: {type(err).__name__}: {err}") from None
    if not hasattr(module, attr):
        raise ModelSpecError(f"{target} has no attribute {attr!r}")
    return getattr(module, attr)


def _call_factory(spec: str, factory: Any, sets: Mapping[str, Any], device: str) -> Any:
    if not callable(factory) or isinstance(factory, nn.Module):
        return factory
    if device == "cpu":
        return factory(**sets)
    try:
        with _on(device):
            return factory(**sets)
    except (TypeError, ValueError, SystemExit):
        raise
    except Exception:  # the factory needs real tensors (a checkpoint, data): build on CPU
        return factory(**sets)


def _from_factory(spec: str, sets: Mapping[str, Any], inputs: Sequence[str] | None, device: str = "cpu") -> LoadedModel:
    factory = _import_factory(spec)
    try:
        made = _call_factory(spec, factory, sets, device)
    except SystemExit as err:
        raise ModelSpecError(f"factory {spec} called {_exit_text(err)} instead of returning a model") from None
    except TypeError as err:
        raise ModelSpecError(f"factory {spec} rejected the arguments {dict(sets)}: {err}") from None
    except Exception as err:
        if is_out_of_memory(err):
            raise ResourceError(f"factory {spec} ran out of memory: reduce its sizes") from None
        raise ModelSpecError(f"factory {spec} raised {type(err).__name__}: {err}") from None
    example: Any = None
    if isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], nn.Module):
        made, example = made
    if isinstance(made, tuple) and made and isinstance(made[0], nn.Module):
        raise ModelSpecError(f"factory {spec} returned a tuple of {len(made)} items; expected "
                             "(module, example_inputs) or a module")
    if not isinstance(made, nn.Module):
        raise ModelSpecError(f"factory {spec} returned {type(made).__name__}, not an nn.Module or (module, inputs)")
    from .tracer import uncompiled

    made = uncompiled(made)
    where = _tensor_device(made) or ("meta" if device == "meta" else "cpu")
    if inputs:
        example = _parse_inputs(inputs, where)
    if example is None:
        raise ModelSpecError(f"factory {spec} gave no example inputs: pass --input, e.g. --input float32[8,16]")
    example = check_example_inputs(example, f"factory {spec}")
    if _tensor_device(made) is None:  # no weights: the inputs stay where the factory built them
        return LoadedModel(spec, made, example, "factory")
    return LoadedModel(spec, made, _move(example, where, f"factory {spec}"), "factory")


def _from_hf(spec: str, sets: dict[str, Any], inputs: Sequence[str] | None, device: str) -> LoadedModel:
    from .hf import build

    extra: dict[str, Any] = {k: sets.pop(k) for k in ("batch", "seq", "seed") if k in sets}
    _check_extras(spec, extra)
    _check_batch_fits(spec, extra, 16)
    if device != "meta":
        _check_weights_fit(spec, sets, lambda: build(spec[3:], sets, device="meta", **extra)[0])
    example: Any
    try:
        model, example = build(spec[3:], sets, device=device, **extra)
    except UnitcheckError as err:
        raise ModelSpecError(str(err)) from None
    except Exception as err:
        if is_out_of_memory(err):
            raise ResourceError(f"{_describe(spec, sets)}: out of memory while building it; reduce "
                                "the sizes with --set or lint it on --device meta") from None
        first = (str(err).strip().splitlines() or [""])[0]
        raise ModelSpecError(f"cannot build {_describe(spec, sets)}: {type(err).__name__}: {first}") from None
    if inputs:
        example = _parse_inputs(inputs, device)
    return LoadedModel(spec, model, _move(example, device, spec), "hf")


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
        return _from_hf(spec, sets, inputs, device)
    if os.path.isdir(spec) and os.path.isfile(os.path.join(spec, "unitcheck.json")):
        from .rewrite.save import load_rewritten

        if sets:
            raise ModelSpecError(f"{spec} is a rewrite directory: its config is fixed, --set does not apply")
        model, example = load_rewritten(spec)
        if inputs:
            example = _parse_inputs(inputs, "cpu")
        return LoadedModel(spec, model, example, "rewrite")
    if ":" in spec:
        return _from_factory(spec, sets, inputs, device)
    from .models import MODELS

    if spec in MODELS:
        loaded = _bundled(spec, sets, device)
        if inputs:
            loaded.inputs = _parse_inputs(inputs, device)
        return loaded
    if os.path.isdir(spec) and os.path.isfile(os.path.join(spec, "ckpt.pt")):
        raise ModelSpecError(f"{spec} is a training run directory: `unitcheck diagnose {spec}` reads it; "
                             "other commands take the model (--model of the run) or a rewrite directory")
    if os.path.exists(spec):
        raise ModelSpecError(f"{spec} is not a model spec: use path/to/file.py:factory or a rewrite directory")
    raise ModelSpecError(f"unknown model {spec!r}: use a bundled name ({', '.join(MODELS)}), hf:<type>, or file.py:factory")
