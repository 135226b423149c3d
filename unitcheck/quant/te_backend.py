"""Transformer Engine backend (real NVFP4 kernels on Blackwell), imported lazily.

Used when ``transformer_engine`` imports and reports NVFP4 support; otherwise the emulation in
``gemm.py`` runs and the substitution report says why. On Hopper, TE's FP8 current-scaling recipe
is offered as ``fp8``. TE's recipe has no switch for per-tensor scaling, so the ``ngpt`` and
``matched`` recipes map to ``disable_rht=True`` with per-tensor scaling left on (reported); the
fixed, declared-norm scales exist only in the emulation.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["availability", "to_te_linear", "autocast", "fp8_availability"]


def _te() -> Any:
    import transformer_engine.pytorch as te  # noqa: F401  (optional extra)

    return te


def availability() -> tuple[bool, str]:
    """(usable, reason) for real NVFP4 through Transformer Engine."""
    try:
        te = _te()
    except Exception as err:  # ImportError, or a CUDA/driver error raised at import
        return False, f"transformer_engine is not importable ({type(err).__name__}); using the emulation"
    if not torch.cuda.is_available():
        return False, "no CUDA device; using the emulation"
    check = getattr(te, "is_nvfp4_available", None)
    if check is None:
        return False, "this transformer_engine has no NVFP4 support; using the emulation"
    try:
        res = check(return_reason=True)
    except TypeError:
        res = check()
    ok, why = (res if isinstance(res, tuple) else (bool(res), ""))
    return (True, "transformer_engine NVFP4 kernels") if ok else (False, f"transformer_engine: {why or 'NVFP4 not supported on this GPU'}; using the emulation")


def fp8_availability() -> tuple[bool, str]:
    try:
        te = _te()
    except Exception as err:
        return False, f"transformer_engine is not importable ({type(err).__name__})"
    check = getattr(te, "is_fp8_available", None)
    if check is None or not torch.cuda.is_available():
        return False, "no FP8-capable GPU"
    res = check()
    ok = res[0] if isinstance(res, tuple) else bool(res)
    return ok, "transformer_engine FP8 (current scaling)" if ok else "FP8 not supported on this GPU"


def to_te_linear(lin: nn.Linear) -> nn.Module:
    """A ``te.Linear`` with the same weights (and so the same state-dict keys)."""
    te = _te()
    new = te.Linear(lin.in_features, lin.out_features, bias=lin.bias is not None,
                    params_dtype=lin.weight.dtype, device=lin.weight.device)
    with torch.no_grad():
        new.weight.copy_(lin.weight)
        if lin.bias is not None:
            new.bias.copy_(lin.bias)
    return new  # type: ignore[no-any-return]


def autocast(recipe: str) -> Any:
    """The TE autocast context for ``te`` / ``ngpt`` (NVFP4) or ``fp8``."""
    te = _te()
    from transformer_engine.common import recipe as te_recipe

    if recipe == "fp8":
        rec = te_recipe.Float8CurrentScaling()
    else:
        rec = te_recipe.NVFP4BlockScaling(disable_rht=(recipe in ("ngpt", "matched")))
    ctx = getattr(te, "autocast", None)
    if ctx is not None:
        return ctx(enabled=True, recipe=rec)
    return te.fp8_autocast(enabled=True, fp8_recipe=rec)  # older TE
