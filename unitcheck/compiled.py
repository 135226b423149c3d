"""Optional ``torch.compile`` for the library's elementwise kernels (the NVFP4 quantiser, GCT's
canonicaliser): one fused kernel instead of a pass over memory per operation.

On by default; ``UNITCHECK_COMPILE=0`` runs every kernel eagerly, and so does a platform without a
compiler or a backend that fails once (the eager function computes the same values, so a failure
costs speed, never results).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["call_compiled", "compile_enabled"]

_COMPILED: dict[Callable[..., Any], Callable[..., Any]] = {}


# every kernel keeps a parallel loop, left to OpenMP at run time: with symbolic sizes inductor
# judges a kernel's work from size hints, and a backward kernel reading what a compiled forward
# returned was judged too small and compiled serial (C's backward ran on one of two threads)
_OPTIONS: dict[str, str | int | bool | Callable[..., Any]] = {"cpp.dynamic_threads": True}


def compile_enabled() -> bool:
    return os.environ.get("UNITCHECK_COMPILE", "1") != "0"


def _compiled(fn: Callable[..., Any]) -> Callable[..., Any]:
    if fn not in _COMPILED:
        _COMPILED[fn] = fn
        if compile_enabled():
            with contextlib.suppress(Exception):  # no compiler on this platform: stay eager
                _COMPILED[fn] = torch.compile(fn, dynamic=True, options=_OPTIONS)
    return _COMPILED[fn]


def call_compiled(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` through its compiled kernel; eager from now on if the backend fails."""
    try:
        return _compiled(fn)(*args)
    except Exception:
        _COMPILED[fn] = fn
        return fn(*args)
