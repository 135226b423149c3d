"""Helpers shared by the rule modules: resolving operator targets and common rule bodies."""

from __future__ import annotations

from typing import Any

import torch

from unitcheck.infer import RuleContext
from unitcheck.units import DIMENSIONLESS
from unitcheck.values import INDEX, Index, Literal, Poly, UnitValue

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


def as_unit_or_index(v: UnitValue) -> UnitValue:
    if isinstance(v, Literal):
        return DIMENSIONLESS
    if isinstance(v, Poly):
        return v
    if v is None:
        return INDEX
    return v


def is_index(v: UnitValue) -> bool:
    return isinstance(v, Index)
