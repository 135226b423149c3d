"""Scale-invariant normalisers: layer/rms/group/batch norm, F.normalize (output dimensionless).

The normalised core is dimensionless for any input unit; the affine gain is a multiplicative use
(it pins the gain to its own generator) and the bias takes the gain's unit. ``eps`` carries the
unit of the mean square it is added to: it is recorded as a floor so the oracle rescales it.
"""

from __future__ import annotations

from typing import Any

import torch

from unitcheck.registry import rule
from unitcheck.rulectx import RuleContext
from unitcheck.units import DIMENSIONLESS, Unit
from unitcheck.values import UnitValue, Var

from ._util import funcs, ops, with_bias

F = torch.nn.functional


def _affine(ctx: RuleContext, weight: Any, bias: Any, what: str) -> UnitValue:
    out: UnitValue = DIMENSIONLESS
    if weight is not None:
        w = ctx.pin(ctx.u(weight))
        out = w if isinstance(w, Unit) else DIMENSIONLESS
    return with_bias(ctx, out, bias, what)


def _eps_floor(ctx: RuleContext, x: Any, eps_index: int | str, power: int) -> None:
    """eps guards mean(x^power): it has u(x)^power in the oracle's rescaled runs."""
    ctx.floor(eps_index, x, power, note=False)


@rule(ops("layer_norm", "native_layer_norm"), funcs(F.layer_norm))
def layer_norm(ctx: RuleContext) -> UnitValue:
    """
    What it does: LayerNorm's core is dimensionless for any input unit; the output has the
    gain's unit, which the bias takes.
    Why it matters: normalisers are where units are reset; their gains are scale degrees of
    freedom that downstream ops must cancel.
    Example: ``self.ln_1(x)`` has p:ln_1.weight.
    Fix: none (the canonicaliser C is LayerNorm without the centring and the gain).
    """
    x = ctx.args[0]
    _eps_floor(ctx, x, 4, 2)
    out = _affine(ctx, ctx.arg(2, "weight"), ctx.arg(3, "bias"), "layer_norm")
    if ctx.op == "native_layer_norm":
        u = ctx.u(x)
        inv = u**-1 if isinstance(u, Unit) else DIMENSIONLESS
        return (out, u if isinstance(u, (Unit, Var)) else DIMENSIONLESS, inv)
    return out


@rule(ops("rms_norm", "_fused_rms_norm"), funcs(getattr(F, "rms_norm", None)))
def rms_norm(ctx: RuleContext) -> UnitValue:
    """
    What it does: RMSNorm's core is dimensionless; the output has the gain's unit.
    Why it matters: as for LayerNorm.
    Example: ``F.rms_norm(x, (C,), self.weight, 1e-6)``.
    Fix: none.
    """
    _eps_floor(ctx, ctx.args[0], 3, 2)
    out = _affine(ctx, ctx.arg(2, "weight"), None, "rms_norm")
    if ctx.op == "_fused_rms_norm":
        u = ctx.u(ctx.args[0])
        return (out, u**-1 if isinstance(u, Unit) else DIMENSIONLESS)
    return out


@rule(ops("group_norm", "native_group_norm"), funcs(F.group_norm))
def group_norm(ctx: RuleContext) -> UnitValue:
    """
    What it does: GroupNorm's core is dimensionless; gain and bias as for LayerNorm.
    Why it matters: as for LayerNorm.
    Example: ``nn.GroupNorm(8, 64)(x)``.
    Fix: none.
    """
    native = ctx.op == "native_group_norm"
    if native:
        _eps_floor(ctx, ctx.args[0], 7, 2)
        out = _affine(ctx, ctx.args[1], ctx.args[2], "group_norm")
        u = ctx.u(ctx.args[0])
        return (out, u, u**-1 if isinstance(u, Unit) else DIMENSIONLESS)
    _eps_floor(ctx, ctx.args[0], 4, 2)
    return _affine(ctx, ctx.arg(2, "weight"), ctx.arg(3, "bias"), "group_norm")


@rule(ops("_native_batch_norm_legit_no_training", "_native_batch_norm_legit",
          "_native_batch_norm_legit_functional", "native_batch_norm", "batch_norm",
          "instance_norm", "_batch_norm_with_update", "_batch_norm_no_update"),
      funcs(F.batch_norm, F.instance_norm))
def batch_norm(ctx: RuleContext) -> UnitValue:
    """
    What it does: BatchNorm's core is dimensionless; the running mean takes the input's unit and
    the running variance its square (a buffer bound by a same-unit combine, SPEC 2).
    Why it matters: in eval mode BatchNorm is ``(x - running_mean) / sqrt(running_var + eps)``.
    Example: ``self.bn1(self.conv1(x))`` has p:bn1.weight.
    Fix: none.
    """
    fx_style = ctx.node.target in (F.batch_norm, F.instance_norm)
    x = ctx.args[0]
    if fx_style:
        rm, rv = ctx.arg(1, "running_mean"), ctx.arg(2, "running_var")
        weight, bias = ctx.arg(3, "weight"), ctx.arg(4, "bias")
        eps_index: int | str = 7
    else:
        weight, bias = ctx.arg(1, "weight"), ctx.arg(2, "bias")
        rm, rv = ctx.arg(3, "running_mean"), ctx.arg(4, "running_var")
        eps_index = "eps"  # positional or keyword: the oracle finds it by the op's schema
    u = ctx.u(x)
    if rm is not None and isinstance(u, Unit):
        _bind_stat(ctx, rm, u)
    if rv is not None and isinstance(u, Unit):
        _bind_stat(ctx, rv, u**2)
    _eps_floor(ctx, x, eps_index, 2)
    out = _affine(ctx, weight, bias, "batch_norm")
    val = ctx.val()
    if isinstance(val, (list, tuple)):
        extra: list[UnitValue] = [u, u**-1 if isinstance(u, Unit) else DIMENSIONLESS]
        extra += [u, u**2 if isinstance(u, Unit) else DIMENSIONLESS]
        return (out, *extra[: len(val) - 1])
    return out


def _bind_stat(ctx: RuleContext, stat: Any, unit: Unit) -> None:
    v = ctx.u(stat)
    if isinstance(v, Var):
        root = v.find()
        if root.bound is None:
            ctx.bind(root, unit)


@rule(funcs(F.normalize))
def normalize(ctx: RuleContext) -> UnitValue:
    """
    What it does: ``F.normalize(x)`` is dimensionless for any unit of x; its eps clamps the norm
    (unit u(x)).
    Why it matters: nGPT's hypersphere normalisation.
    Example: ``F.normalize(h, dim=-1)``.
    Fix: none.
    """
    _eps_floor(ctx, ctx.args[0], 3, 1)
    return DIMENSIONLESS


@rule(ops("_weight_norm", "_weight_norm_interface"), funcs(torch._weight_norm))
def weight_norm(ctx: RuleContext) -> UnitValue:
    """
    What it does: weight normalisation ``g * v / ||v||`` has the unit of its gain g whatever
    v's unit (v's direction is dimensionless); the fused kernel also returns the norms (u(v)).
    Why it matters: it is the weight's own canonical form: rescaling v changes nothing.
    Example: ``nn.utils.parametrizations.weight_norm(nn.Conv1d(...))`` (wav2vec2's positions).
    Fix: none.
    """
    gain = ctx.u(ctx.arg(1, "g"))
    return (gain, ctx.u(ctx.args[0])) if ctx.op == "_weight_norm_interface" else gain
