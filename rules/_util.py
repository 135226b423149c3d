"""Helpers shared by the rule modules: resolving operator targets and the rule bodies several
families use (a product of units, a bias, a function that needs a dimensionless input)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import torch
import torch.fx as fx

from unitcheck.rulectx import RuleContext
from unitcheck.units import DIMENSIONLESS, Unit
from unitcheck.values import INDEX, POLY, Index, Literal, Poly, UnitValue, Var

aten = torch.ops.aten


def ops(*names: str) -> tuple[Any, ...]:
    """ATen targets by name: ``"add"`` is the overload packet, ``"add.Tensor"`` one overload.

    Names missing from this torch build are skipped, so one rule table serves several versions.
    """
    out: list[Any] = []
    for name in names:
        packet_name, _, overload = name.partition(".")
        packet = getattr(aten, packet_name, None)
        if packet is None:
            continue
        target = getattr(packet, overload, None) if overload else packet
        if target is not None:
            out.append(target)
    return tuple(out)


def funcs(*objs: Any) -> tuple[Any, ...]:
    """Python callables that exist in this torch build (``None`` entries are dropped)."""
    return tuple(o for o in objs if o is not None)


def first(ctx: RuleContext) -> UnitValue:
    """Unit of the first argument, passed through unchanged (variables stay unbound)."""
    return ctx.u(ctx.arg(0, "input", ctx.kwargs.get("self")))


def product(ctx: RuleContext, factors: list[Any], powers: list[int] | None = None) -> UnitValue:
    """u = prod u(f_i)^p_i. A literal factor is dimensionless and leaves a weight variable
    unbound; a tensor factor pins every variable among the factors (SPEC 2)."""
    powers = powers or [1] * len(factors)
    values = [ctx.u(f) for f in factors]
    if any(isinstance(v, Poly) for v in values):
        return POLY
    tensors = [f for f, v in zip(factors, values) if isinstance(f, fx.Node) and v is not None]
    if all(isinstance(v, Index) or v is None for v in values) and tensors:
        return INDEX
    if len(tensors) == 1:
        (only,) = [v for f, v in zip(factors, values) if isinstance(f, fx.Node)]
        p = powers[[i for i, f in enumerate(factors) if isinstance(f, fx.Node)][0]]
        if isinstance(only, Var) and p == 1:
            return only  # multiplication by a literal is unit-transparent
    out = DIMENSIONLESS
    for v, p in zip(values, powers):
        if isinstance(v, (Literal, Index)) or v is None:
            continue
        unit = ctx.pin(v)
        if isinstance(unit, Unit):
            out = out * unit ** p
    return out


def with_bias(ctx: RuleContext, out: UnitValue, bias: Any, what: str) -> UnitValue:
    if bias is None:
        return out
    b = ctx.u(bias)
    if isinstance(out, Poly):
        return b if b is not None else out  # 0 @ W + b is b
    if isinstance(b, Var):
        root = b.find()
        if root.bound is None:
            if isinstance(out, Unit):
                return ctx.bind(root, out)
            if isinstance(out, Var):
                return ctx.unify([out, root])
        b = root.bound
    if isinstance(b, (Poly, Index)) or b is None:
        return out
    if isinstance(out, Var):
        root = out.find()
        if root.bound is None and isinstance(b, Unit):
            return ctx.bind(root, b)
    if isinstance(b, Unit) and isinstance(out, Unit) and b != out:
        return ctx.violation(
            "UC101", f"{what} adds a bias of unit {b} to a product of unit {out}",
            {"product": out, "bias": b},
        )
    return out


def per_output(ctx: RuleContext, *units: UnitValue, rest: UnitValue = INDEX) -> UnitValue:
    """``units`` for the outputs the op has, ``rest`` for each output after them (an op's index
    outputs, pivots and infos; a loss's or an attention's auxiliary values); one unit for a
    single output."""
    val = ctx.val()
    if not isinstance(val, (list, tuple)):
        return units[0]
    return tuple(units[i] if i < len(units) else rest for i in range(len(val)))


def raised(ctx: RuleContext, x: object, c: Fraction) -> UnitValue:
    """u(x)^c (a variable pinned first); a polymorphic value stays polymorphic, index data is
    dimensionless."""
    v = ctx.u(x)
    if isinstance(v, Poly):
        return POLY
    if isinstance(v, Index):
        return DIMENSIONLESS
    unit = ctx.pin(v)
    return unit ** c if isinstance(unit, Unit) else DIMENSIONLESS


def nonlinear(ctx: RuleContext, operands: list[Any], code: str, what: str) -> UnitValue:
    """Every tensor operand must be dimensionless; otherwise report ``code`` at this node."""
    bad: dict[str, UnitValue] = {}
    for i, a in enumerate(operands):
        v = ctx.u(a)
        if not ctx.to_dimensionless(v):
            bad["input" if i == 0 else f"input{i}"] = v
    if bad:
        shown = ", ".join(str(u) for u in bad.values())
        return ctx.violation(code, f"{what} of a unitful input ({shown})", bad)
    return DIMENSIONLESS
