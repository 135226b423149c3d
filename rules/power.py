"""Powers: ``pow(x, c)``, sqrt, rsqrt, reciprocal, square (exponents times c)."""

from __future__ import annotations

import operator
from fractions import Fraction

import torch
import torch.fx as fx

from unitcheck.registry import method, rule
from unitcheck.rulectx import RuleContext
from unitcheck.values import UnitValue

from ._util import funcs, nonlinear, ops, raised

_FIXED = {
    "sqrt": Fraction(1, 2),
    "rsqrt": Fraction(-1, 2),
    "reciprocal": Fraction(-1),
    "square": Fraction(2),
}


@rule(ops("sqrt", "rsqrt", "reciprocal", "square"),
      funcs(torch.sqrt, torch.rsqrt, torch.reciprocal, torch.square),
      method("sqrt", "rsqrt", "reciprocal", "square"))
def fixed_power(ctx: RuleContext) -> UnitValue:
    """
    What it does: sqrt halves exponents, rsqrt negates and halves, reciprocal negates, square
    doubles.
    Why it matters: ``x * rsqrt(mean(x^2) + eps)`` is dimensionless because the exponents cancel.
    Example: ``torch.rsqrt(var + 1e-6)`` has u(x)^-1.
    Fix: none.
    """
    return raised(ctx, ctx.args[0], _FIXED[ctx.op])


@rule(ops("pow", "float_power"), funcs(torch.pow, operator.pow, torch.float_power),
      method("pow", "__pow__", "__rpow__", "pow_"))
def pow_(ctx: RuleContext) -> UnitValue:
    """
    What it does: ``x ** c`` with a literal exponent has unit u(x)^c; a tensor exponent, or a
    literal base raised to a tensor, needs dimensionless operands (UC204).
    Why it matters: ``2 ** x`` is an exponential in disguise.
    Example: ``h.pow(2).mean(-1)`` has u(h)^2.
    Fix: make the exponent dimensionless.
    """
    base, expo = ctx.args[0], ctx.arg(1, "exponent")
    if ctx.node.op == "call_method" and ctx.node.target == "__rpow__":
        base, expo = expo, base
    if isinstance(expo, (int, float)) and isinstance(base, fx.Node):
        return raised(ctx, base, Fraction(expo).limit_denominator(1 << 12))
    return nonlinear(ctx, [base, expo], "UC204", "power with a tensor exponent")
