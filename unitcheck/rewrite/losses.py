"""The ``regression_losses`` rule: a regression loss measured in its target's unit.

A denoising diffusion model is trained with ``mse_loss(eps_pred, noise)``; a super-resolution
net with ``l1_loss(out, hr)``. Once the rewrite has put the network on canonical coordinates, the
prediction carries the target's unit through its last weight (``parameter_gains`` declares it),
and the loss has the target's unit squared (MSE) or the unit itself (L1): UC302, a loss must be
dimensionless. Seed 000's fix is a scale with the loss's unit, ``L / S``. The rule divides the
loss by a constant buffer ``S = 1`` declared with that unit: the values, gradients and training
are unchanged, and the unit of the loss says what it is measured in (rescale the targets and S
must follow, which the oracle checks)::

    mse_loss(pred, y)  ->  mse_loss(pred, y) / mse_loss_scale     (a buffer of 1, unit in:y^2)

Where the prediction is itself canonical (a super-resolution net whose output is the residual
stream, ``out = up(x); out = out + block(out)``, ends on C), no weight is left to carry the
target's unit: the prediction is multiplied by a learned gain declared in it (initialised to 1)
before the loss, the one unit that makes the comparison consistent (the oracle checks it)::

    l1_loss(C(h), y)  ->  l1_loss(C(h) * l1_loss_gain, y) / l1_loss_scale   (gain in:y, scale in:y)
"""

from __future__ import annotations

import torch
import torch.fx as fx

from ..canonical import canonical, residual_update
from ..fxutil import base_name, module_path
from ..graphs import leaf_through_moves
from ..record import record
from ..units import Unit
from .patterns import RewriteContext, describe, holds_input

__all__ = ["regression_losses"]

aten = torch.ops.aten
_POWER = {"mse_loss": 2, "l1_loss": 1}


def _input_unit(ctx: RewriteContext, node: object, memo: dict[fx.Node, bool]) -> Unit | None:
    """The unit of a target computed from the inputs alone: a product of input generators."""
    if not isinstance(node, fx.Node) or not holds_input(ctx, node, memo):
        return None
    unit = record(node).unit
    if not isinstance(unit, Unit) or unit.is_dimensionless or not all(g.startswith("in:") for g in unit.generators()):
        return None
    return unit


def _dimensionless(node: fx.Node) -> bool:
    """A prediction the rewrite left on canonical coordinates (C or the residual update, through
    views), or one inference found dimensionless."""
    made = leaf_through_moves(node)
    if made.op == "call_function" and made.target in (canonical, residual_update):
        return True
    unit = record(node).unit
    return isinstance(unit, Unit) and unit.is_dimensionless


def _fresh(n: fx.Node, what: str, taken: set[str]) -> str:
    mod = module_path(n)
    name, i = f"{mod + '.' if mod else ''}{base_name(n)}_{what}", 1
    while name in taken:
        name, i = f"{mod + '.' if mod else ''}{base_name(n)}_{what}_{i}", i + 1
    taken.add(name)
    return name


def regression_losses(ctx: RewriteContext) -> None:
    """loss(pred, y) -> loss(pred, y) / S, with S a constant 1 in the unit of the loss of y, for a
    mean or summed MSE or L1 loss that compares a prediction with inputs' values; a dimensionless
    prediction is first scaled by a learned gain in y's unit."""
    memo: dict[fx.Node, bool] = {}
    taken: set[str] = set()
    for n in list(ctx.graph.nodes):
        power = _POWER.get(base_name(n))
        if power is None or record(n).violation not in ("UC101", "UC302") or len(n.args) < 2:
            continue
        for side in (1, 0):
            target = _input_unit(ctx, n.args[side], memo)
            if target is not None:
                break
        if target is None:
            continue
        pred = n.args[1 - side]
        if isinstance(pred, fx.Node) and _dimensionless(pred):
            gain_name = _fresh(n, "gain", taken)
            gain = ctx.param(gain_name, torch.tensor(1.0), f"the prediction in the target's unit ({target})",
                             unit=str(target))
            scaled = ctx.call(aten.mul.Tensor, (pred, gain), after=pred, like=pred)
            n.replace_input_with(pred, scaled)
            ctx.note("regression_losses", f"{describe(pred)} (dimensionless)",
                     f"{describe(pred)} * {gain_name} (learned, initialised to 1, unit {target})")
        unit = target**power
        name = _fresh(n, "scale", taken)
        scale = ctx.constant(name, torch.tensor(1.0), str(unit), f"the loss's unit ({unit}), a constant 1")
        users = list(n.users)
        new = ctx.call(aten.div.Tensor, (n, scale), after=n, like=n)
        for u in users:
            u.replace_input_with(n, new)
        ctx.note("regression_losses", describe(n), f"{base_name(n)}(...) / {name} (a constant 1 in {unit})")
