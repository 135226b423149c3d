"""Optional ``torch.compile`` for the library's elementwise kernels (the NVFP4 quantiser, GCT's
canonicaliser): one fused kernel instead of a pass over memory per operation.

Each call signature (shapes, strides, dtypes, the constants) gets a kernel of its own, compiled
ahead of time on its first call and called directly, without Dynamo
(``torch._inductor.standalone_compile``): Dynamo's frame evaluation and guards cost about as much
as a small kernel itself (GCT makes 48 such calls a training step: 5 ms of a 12 ms step at a tiny
size). Only the signature is checked, which the kernel is valid for by construction. One kernel
per signature, from the first call, also keeps results a function of the inputs alone: a kernel
compiled for symbolic sizes rounds otherwise in the last bits, so a second call must not switch
kernels (the null rewrite is checked bit for bit against the original). Calls a static kernel
cannot serve (autograd recording them, tensor subclasses, a graph the AOT path refuses) go
through one kernel compiled for any shape (``torch.compile(dynamic=True)``).

On by default; ``UNITCHECK_COMPILE=dynamic`` sends every call through the dynamic kernel (the
comparison in docs/benchmarks.md), ``UNITCHECK_COMPILE=0`` runs every kernel eagerly, and so does
a platform without a compiler or a backend that fails once (the eager function computes the same
values, so a failure costs speed, never results).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Hashable
from typing import Any

import torch

__all__ = ["call_compiled", "compile_enabled", "reset"]

_COMPILED: dict[Callable[..., Any], Callable[..., Any]] = {}
"""Each function's dynamic kernel (the function itself once it runs eagerly)."""

_STATIC: dict[tuple[Callable[..., Any], Hashable], Callable[..., Any] | None] = {}
"""Kernels compiled for one signature; None where the dynamic kernel serves the signature."""

_LIMIT = 1024
"""Static kernels kept at most, the oldest dropped first: one dropped and needed again is
compiled again from inductor's cache, the same code, so results do not depend on the order."""


# every kernel keeps a parallel loop, left to OpenMP at run time: with symbolic sizes inductor
# judges a kernel's work from size hints, and a backward kernel reading what a compiled forward
# returned was judged too small and compiled serial (C's backward ran on one of two threads)
_OPTIONS: dict[str, str | int | bool | Callable[..., Any]] = {"cpp.dynamic_threads": True}


def compile_enabled() -> bool:
    return os.environ.get("UNITCHECK_COMPILE", "1") != "0"


def _static_enabled() -> bool:
    """Off with UNITCHECK_COMPILE=dynamic (and with 0, where nothing is compiled)."""
    return compile_enabled() and os.environ.get("UNITCHECK_COMPILE") != "dynamic"


def reset() -> None:
    """Forget every compiled kernel (tests; a changed compiler setting)."""
    _COMPILED.clear()
    _STATIC.clear()


def _compiled(fn: Callable[..., Any]) -> Callable[..., Any]:
    if fn not in _COMPILED:
        _COMPILED[fn] = fn
        if compile_enabled():
            with contextlib.suppress(Exception):  # no compiler on this platform: stay eager
                _COMPILED[fn] = torch.compile(fn, dynamic=True, options=_OPTIONS)
    return _COMPILED[fn]


def _signature(args: tuple[Any, ...]) -> Hashable | None:
    """What a static kernel is valid for: each plain tensor's shape, strides, dtype, device and
    alignment, every other argument's value; None where a static kernel must not serve (a
    tensor subclass, an unhashable or NaN argument, a call that autograd would record, autocast
    on: the trace would bake in its casts, which Dynamo's kernel guards on)."""
    if torch._C._is_any_autocast_enabled():
        return None
    out: list[Hashable] = []
    grad = torch.is_grad_enabled()
    for a in args:
        if isinstance(a, torch.Tensor):
            if (type(a) not in (torch.Tensor, torch.nn.Parameter) or (grad and a.requires_grad)
                    or torch._C._functorch.is_functorch_wrapped_tensor(a)):  # vmap's and grad's wrappers
                return None
            out.append((a.shape, a.stride(), a.dtype, a.device, a.storage_offset() % 16))
        else:
            try:
                hash(a)
            except TypeError:
                return None
            if a != a:  # NaN: never equal to itself, so a key with it would never be found
                return None
            out.append((type(a), a))
    return tuple(out)


def _static_kernel(fn: Callable[..., Any], args: tuple[Any, ...]) -> Callable[..., Any]:
    """``fn`` compiled for the shapes of ``args``, its tensors as the only inputs (the other
    arguments are constants of the kernel); it returns what ``fn`` returns."""
    from torch._inductor import standalone_compile
    from torch.fx.experimental.proxy_tensor import make_fx

    where = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    single = False

    def flat(*tensors: torch.Tensor) -> tuple[Any, ...]:  # always a tuple: the kernel returns a list
        nonlocal single
        full = list(args)
        for i, t in zip(where, tensors, strict=True):
            full[i] = t
        out = fn(*full)
        single = isinstance(out, torch.Tensor)
        return (out,) if single else tuple(out)

    inputs = [args[i] for i in where]
    with torch.no_grad():
        graph = make_fx(flat, tracing_mode="fake")(*inputs)
        kernel = standalone_compile(graph, inputs, dynamic_shapes="from_example_inputs",
                                    options={"config_patches": _OPTIONS})

    def run(*call_args: Any) -> Any:
        out = kernel(*[call_args[i] for i in where])
        return out[0] if single else tuple(out)

    return run


def _static(fn: Callable[..., Any], args: tuple[Any, ...]) -> Callable[..., Any] | None:
    """The kernel for this call's signature, compiled on its first call; None where the dynamic
    kernel serves it."""
    sig = _signature(args)
    if sig is None:
        return None
    key = (fn, sig)
    if key in _STATIC:
        return _STATIC[key]
    kernel = None
    if _static_enabled():  # read here, not on every call: a kernel once made stays
        with contextlib.suppress(Exception):  # a graph the AOT path refuses: Dynamo's kernel serves
            kernel = _static_kernel(fn, args)
    if len(_STATIC) >= _LIMIT:
        _STATIC.pop(next(iter(_STATIC)))
    _STATIC[key] = kernel
    return kernel


def call_compiled(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` through its compiled kernel; eager from now on if the backend fails."""
    try:
        kernel = _compiled(fn)
        if kernel is not fn:
            kernel = _static(fn, args) or kernel
        return kernel(*args)
    except Exception:
        _COMPILED[fn] = fn
        return fn(*args)
