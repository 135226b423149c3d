"""Draws from numpy's global generator, made visible to code generation's captures.

wav2vec2 and its relatives draw their SpecAugment masks and their LayerDrop decisions from
``np.random``, which export cannot see: the graph holds a draw as a constant, and a generated
module would apply one mask at every step. While :func:`routed` is active, such draws go through
ops of their own, which draw from numpy when they run:

- a scalar uniform draw (``np.random.random()``, ``rand()``, ``uniform(0, 1)``) is
  ``unitcheck::numpy_rand``, a 0-dim float64 tensor: a branch on it is a branch on a draw, which
  LayerDrop's capture keeps (:mod:`unitcheck.draws`);
- a module-level function of the model's library that draws (``_compute_mask_indices``) is
  ``unitcheck::host_call``, which calls that function when the generated module runs, with the
  sizes of the call's inputs.

The generated module then draws what the model draws, in the same order, from the same state.
A call whose arguments cannot be written down (an object, a tensor without values) is left as it
was, and :mod:`unitcheck.rewrite.variants` refuses the graph that holds its draw, as before."""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

__all__ = ["numpy_rand", "host_call", "routed", "OPS", "Call", "Unwritable", "decode"]

# the numpy functions whose call without arguments is one uniform draw in [0, 1)
_SCALAR_UNIFORM = ("random", "random_sample", "rand", "uniform")
_originals: dict[str, Callable[..., Any]] = {}  # qualified name -> the function a wrapper replaced
_running_host = 0  # > 0 while a host function runs: its own numpy calls stay numpy's


@torch.library.custom_op("unitcheck::numpy_rand", mutates_args=())
def numpy_rand() -> torch.Tensor:
    """One draw of ``np.random.random()`` (from the generator itself: the name may be routed here)."""
    import numpy as np

    return torch.tensor(float(np.random.mtrand._rand.random_sample()), dtype=torch.float64)


@numpy_rand.register_fake
def _numpy_rand_fake() -> torch.Tensor:
    return torch.empty((), dtype=torch.float64)


def _resolve(function: str) -> Callable[..., Any]:
    """The function a qualified name names (the model's own, not a capture's wrapper)."""
    if function in _originals:
        return _originals[function]
    parts = function.split(".")
    for cut in range(len(parts) - 1, 0, -1):  # the longest importable prefix, then attributes (a class's method)
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            found = getattr(found, name)
        return found  # type: ignore[no-any-return]
    raise ImportError(f"cannot find {function}")


def _decode(template: Any, ints: list[Any], tensors: list[Any]) -> Any:
    if isinstance(template, dict):
        if "int" in template:
            return ints[template["int"]]
        if "tensor" in template:
            return tensors[template["tensor"]]
        if "mode" in template:
            return Mode(template["mode"])
        if "torch" in template:
            name = template["torch"]
            return getattr(torch, name.removeprefix("torch.")) if name.startswith("torch.") else torch.device(name)
        items = [_decode(v, ints, tensors) for v in template["items"]]
        return tuple(items) if template["kind"] == "tuple" else items
    return template


def decode(spec: dict[str, Any], ints: list[Any], tensors: list[Any]) -> tuple[list[Any], dict[str, Any]]:
    """The arguments a :class:`Call`'s template writes down, with ``ints`` and ``tensors`` (values,
    or graph nodes in code generation) in their places."""
    return _decode(spec["args"], ints, tensors), {k: _decode(v, ints, tensors) for k, v in spec["kwargs"].items()}


def _invoke(fn: Callable[..., Any], template: str, ints: list[int], tensors: list[torch.Tensor | None]) -> torch.Tensor:
    """``fn`` called with the arguments ``template`` writes down, as a tensor; its own numpy
    draws stay numpy's."""
    import numpy as np

    global _running_host
    args, kwargs = decode(json.loads(template), [int(i) for i in ints], tensors)
    _running_host += 1
    try:
        out = fn(*args, **kwargs)
    finally:
        _running_host -= 1
    return torch.as_tensor(np.asarray(out))


@torch.library.custom_op("unitcheck::host_call", mutates_args=())
def host_call(function: str, template: str, ints: list[int], tensors: list[torch.Tensor | None],
              shape: list[int], dtype: torch.dtype) -> torch.Tensor:
    """``function(*args, **kwargs)`` as a tensor of ``shape`` and ``dtype``, the arguments
    rebuilt from ``template`` (JSON) with ``ints`` and ``tensors`` in their places."""
    result = _invoke(_resolve(function), template, ints, tensors)
    if list(result.shape) != [int(s) for s in shape]:
        raise RuntimeError(f"{function} returned sizes {tuple(result.shape)} where the capture found "
                           f"{tuple(int(s) for s in shape)}")
    return result.to(dtype).clone()


@host_call.register_fake
def _host_call_fake(function: str, template: str, ints: list[int], tensors: list[torch.Tensor | None],
                    shape: list[int], dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype)


OPS = (torch.ops.unitcheck.numpy_rand.default, torch.ops.unitcheck.host_call.default)


class Mode:
    """What a method of the model that draws is given for ``self``: its module's mode, the one
    thing of the module a call can write down (a method that reads more stays the model's)."""

    def __init__(self, training: bool) -> None:
        self.training = training


class Unwritable(Exception):
    """An argument generated code could not write down."""


def _hint(value: Any) -> Any:
    """A size's example value without a guard on it (``int(s)`` would fix the size)."""
    if isinstance(value, torch.SymInt):
        hint = value.node.hint
        if hint is None:
            raise Unwritable("a size without an example value")
        return int(hint)
    return value


def _real(t: torch.Tensor) -> torch.Tensor:
    """A tensor's values: its own, or those real-value propagation carries beside a fake one."""
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(t, FakeTensor):
        real = getattr(t, "real_tensor", None)
        if real is None:
            raise Unwritable("a tensor without values")
        return real
    return t


class Call:
    """One call written down: a JSON template with the sizes and tensors it takes."""

    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.ints: list[Any] = []
        self.tensors: list[torch.Tensor | None] = []
        self.template = json.dumps({"args": self._encode(list(args)),
                                    "kwargs": {k: self._encode(v) for k, v in kwargs.items()}})

    def _encode(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            self.tensors.append(value)
            return {"tensor": len(self.tensors) - 1}
        if isinstance(value, torch.SymInt) or (isinstance(value, int) and not isinstance(value, bool)):
            self.ints.append(value)
            return {"int": len(self.ints) - 1}
        if isinstance(value, (tuple, list)):
            return {"kind": "tuple" if isinstance(value, tuple) else "list",
                    "items": [self._encode(v) for v in value]}
        if value is None or isinstance(value, (bool, float, str)):
            return value
        if isinstance(value, (torch.device, torch.dtype)):
            return {"torch": str(value)}  # "cpu", "torch.float32"
        if isinstance(value, Mode):
            return {"mode": value.training}
        raise Unwritable(f"an argument of type {type(value).__name__}")

    def example(self) -> tuple[list[int], list[torch.Tensor | None]]:
        """The example's values of the sizes and tensors."""
        return [_hint(i) for i in self.ints], [None if t is None else _real(t) for t in self.tensors]

    def sizes(self, shape: tuple[int, ...], example: list[int]) -> list[Any]:
        """Each of the result's sizes as the call's size it equals (in order of the arguments),
        so that it follows that size; a size equal to none is the example's."""
        free = list(range(len(self.ints)))
        out: list[Any] = []
        for d in shape:
            match = next((i for i in free if example[i] == d and isinstance(self.ints[i], torch.SymInt)), None)
            if match is None:
                out.append(int(d))
            else:
                free.remove(match)
                out.append(self.ints[match])
        return out


def _routed_call(function: str, original: Callable[..., Any], method: bool = False) -> Callable[..., Any]:
    """``original`` as a host call while captured; a ``method`` is given its module's :class:`Mode`
    for ``self``."""
    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        import numpy as np

        if _running_host or (method and not (args and isinstance(args[0], nn.Module))):
            return original(*args, **kwargs)
        try:
            spec = Call((Mode(args[0].training), *args[1:]) if method else args, kwargs)
            ints, tensors = spec.example()
        except Unwritable:
            return original(*args, **kwargs)
        if any(t is not None and (t.is_floating_point() or t.is_complex()) for t in spec.tensors):
            # it computes on float values (BigBird's block-sparse attention draws its random
            # blocks): as a host call their gradients would stop there, so it stays the model's
            return original(*args, **kwargs)
        from torch.utils._python_dispatch import _disable_current_modes

        state = np.random.get_state()
        try:  # once on the example's values, for the result's sizes and dtype (outside the capture,
            # which would hold the result as a constant); numpy's state put back
            with _disable_current_modes():
                sample = _invoke(original, spec.template, ints, tensors)
        except AttributeError:  # a method that reads more of its module than its mode
            return original(*args, **kwargs)
        finally:
            np.random.set_state(state)
        return torch.ops.unitcheck.host_call(function, spec.template, spec.ints, spec.tensors,
                                             spec.sizes(tuple(sample.shape), ints), sample.dtype)

    return call


def _draws_from_numpy(fn: types.FunctionType, numpy: types.ModuleType) -> bool:
    """Whether ``fn``'s code reads ``<numpy>.random``: a name bound to numpy in its globals (or
    numpy imported in its body) and the attribute ``random``, in its body or a function nested
    in it."""
    aliases = {name for name, v in fn.__globals__.items() if v is numpy} | {"numpy"}
    todo = [fn.__code__]
    while todo:
        code = todo.pop()
        if "random" in code.co_names and aliases & set(code.co_names):
            return True
        todo += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return False


def _host_draws(model: nn.Module, numpy: types.ModuleType) -> list[tuple[Any, str, str, bool]]:
    """What draws from numpy in the model's own modules (those defining its layers' classes, not
    torch's): their module-level functions (wav2vec2's ``_compute_mask_indices``) and their
    classes' methods other than ``forward`` (Phi-4-multimodal's ``_streaming_mask``), each as
    (owner, attribute, qualified name, whether a method)."""
    own = sorted({n for m in model.modules() if not (n := type(m).__module__).startswith("torch.")})
    found: list[tuple[Any, str, str, bool]] = []
    for name in own:
        module = sys.modules.get(name)
        for attr, fn in vars(module).items() if module is not None else ():
            if isinstance(fn, types.FunctionType) and fn.__module__ == name and _draws_from_numpy(fn, numpy):
                found.append((module, attr, f"{name}.{attr}", False))
    classes = sorted({k for m in model.modules() for k in type(m).__mro__ if k.__module__ in own},
                     key=lambda k: (k.__module__, k.__qualname__))
    for k in classes:
        for attr, fn in vars(k).items():
            if attr != "forward" and isinstance(fn, types.FunctionType) and _draws_from_numpy(fn, numpy):
                found.append((k, attr, f"{k.__module__}.{k.__qualname__}.{attr}", True))
    return found


def _scalar_uniform(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def draw(*args: Any, **kwargs: Any) -> Any:
        unit_range = not args or (len(args) == 2 and all(type(a) in (int, float) for a in args) and args == (0, 1))
        if _running_host or kwargs or not unit_range:  # (arrays compared with == have no truth value)
            return original(*args, **kwargs)
        return torch.ops.unitcheck.numpy_rand()

    return draw


@contextlib.contextmanager
def routed(model: nn.Module) -> Iterator[None]:
    """Numpy draws of ``model``'s forward go through the ops above while captured."""
    import numpy as np

    saved: list[tuple[Any, str, Any]] = []
    routed_functions: list[str] = []
    for name in _SCALAR_UNIFORM:
        saved.append((np.random, name, getattr(np.random, name)))
        setattr(np.random, name, _scalar_uniform(getattr(np.random, name)))
    for owner, attr, qualified, method in _host_draws(model, np):
        fn = vars(owner)[attr]
        _originals[qualified] = fn
        routed_functions.append(qualified)
        saved.append((owner, attr, fn))
        setattr(owner, attr, _routed_call(qualified, fn, method))
    try:
        yield
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)
        for qualified in routed_functions:
            _originals.pop(qualified, None)
