"""Tensors made inside the model: literals, fills, ranges and random draws (SPEC 1)."""

from __future__ import annotations

import torch

from unitcheck.registry import method, rule
from unitcheck.rulectx import RuleContext
from unitcheck.units import DIMENSIONLESS
from unitcheck.values import INDEX, POLY, UnitValue, is_poly_number

from ._util import funcs, ops


@rule(ops("full", "full_like", "new_full", "scalar_tensor", "fill.Scalar"),
      funcs(torch.full, torch.full_like, torch.scalar_tensor), method("new_full"))
def full(ctx: RuleContext) -> UnitValue:
    """
    What it does: a fill with 0, +-inf or the dtype's extreme finite value is scale-polymorphic
    (it can stand beside any unit, like an additive attention mask); any other fill value is a
    dimensionless constant.
    Why it matters: masking code writes ``torch.full(..., torch.finfo(dtype).min)``; treating it as
    dimensionless would flag every masked attention.
    Example: ``torch.full((T, T), float("-inf")).triu(1)``.
    Fix: none.
    """
    name = ctx.op
    if name == "scalar_tensor":
        value = ctx.arg(0, "s")
    elif name == "fill":
        value = ctx.arg(1, "value")
    else:  # full, full_like, new_full: the value follows the size or the tensor
        value = ctx.arg(1, "fill_value")
    if isinstance(value, (int, float)) and is_poly_number(float(value)):
        return POLY
    return DIMENSIONLESS


@rule(ops("zeros", "zeros_like", "new_zeros", "empty", "empty_like", "new_empty",
          "empty_strided", "empty_permuted", "new_empty_strided"),
      funcs(torch.zeros, torch.zeros_like, torch.empty, torch.empty_like),
      method("new_zeros", "new_empty", "zero_"))
def zeros(ctx: RuleContext) -> UnitValue:
    """
    What it does: zeros (and uninitialised buffers, which the model overwrites) are polymorphic.
    Why it matters: ``torch.zeros_like(x)`` must combine with x of any unit.
    Example: ``acc = x.new_zeros(shape)``.
    Fix: none.
    """
    return POLY


@rule(ops("ones", "ones_like", "new_ones", "arange", "linspace", "logspace", "eye", "randn",
          "rand", "randn_like", "rand_like", "normal", "uniform", "bernoulli", "randperm",
          "randint", "randint_like", "tensor",
          "_sample_dirichlet", "multinomial", "poisson", "exponential", "geometric", "cauchy",
          "log_normal", "hann_window", "hamming_window", "blackman_window", "kaiser_window",
          "bartlett_window", "tril_indices", "triu_indices"), "unitcheck::numpy_rand", "unitcheck::host_call",
      funcs(torch.ones, torch.ones_like, torch.arange, torch.linspace, torch.logspace, torch.eye,
            torch.randn, torch.rand, torch.randn_like, torch.rand_like, torch.randint,
            torch.randperm, torch.tensor, torch.as_tensor, torch.normal, torch.bernoulli),
      method("new_ones", "new_tensor", "normal_", "uniform_", "bernoulli_"))
def constant(ctx: RuleContext) -> UnitValue:
    """
    What it does: ones, ranges, identities and random draws are dimensionless constants (integer
    ones are indices).
    Why it matters: a fixed table is not a scale degree of freedom; adding one to a unitful tensor
    is a mismatch (UC101).
    Example: ``torch.arange(T, dtype=torch.float32)`` for rotary frequencies.
    Fix: none.
    """
    val = ctx.val()
    if isinstance(val, torch.Tensor) and not val.is_floating_point():
        return INDEX
    return DIMENSIONLESS
