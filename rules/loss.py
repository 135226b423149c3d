"""Losses: likelihood losses need dimensionless logits; regression losses have a power of the
target's unit (SPEC 3); the loss must end dimensionless (checked at the model output)."""

from __future__ import annotations

import torch

from unitcheck.registry import rule
from unitcheck.rulectx import RuleContext
from unitcheck.units import DIMENSIONLESS, Unit
from unitcheck.values import Index, Poly, UnitValue

from ._util import funcs, ops, per_output

F = torch.nn.functional


def _logits(ctx: RuleContext, what: str) -> UnitValue:
    x = ctx.args[0]
    u = ctx.u(x)
    if isinstance(u, (Index, Poly)) or ctx.to_dimensionless(u):
        return DIMENSIONLESS
    return ctx.violation("UC301", f"the loss's logits carry the unit {u} ({what})", {"logits": u})


@rule(ops("nll_loss_forward", "nll_loss", "nll_loss2d_forward", "nll_loss_nd", "nll_loss2d"),
      funcs(F.nll_loss))
def nll(ctx: RuleContext) -> UnitValue:
    """
    What it does: NLL picks and averages log-probabilities: homogeneous of degree 1, so it keeps
    the unit of its input (the log-softmax before it is where UC301 is reported).
    Why it matters: the interface is reported once, at the softmax.
    Example: ``F.nll_loss(F.log_softmax(logits, -1), y)``.
    Fix: none here; see UC301.
    """
    u = ctx.u(ctx.args[0])
    out = u if isinstance(u, Unit) else DIMENSIONLESS
    return per_output(ctx, out, rest=DIMENSIONLESS)


@rule(ops("cross_entropy_loss", "binary_cross_entropy_with_logits", "binary_cross_entropy",
          "kl_div", "multilabel_margin_loss_forward", "multi_margin_loss", "soft_margin_loss",
          "poisson_nll_loss", "ctc_loss", "_ctc_loss"),
      funcs(F.cross_entropy, F.binary_cross_entropy_with_logits,
            F.binary_cross_entropy, F.kl_div, F.poisson_nll_loss, F.soft_margin_loss,
            F.multi_margin_loss, F.ctc_loss))
def likelihood(ctx: RuleContext) -> UnitValue:
    """
    What it does: cross-entropy, NLL, BCE and KL need dimensionless logits or log-probabilities
    (UC301); the loss is dimensionless.
    Why it matters: the loss's temperature is otherwise set by the output head's norm.
    Example: ``F.cross_entropy(self.lm_head(x), y)``.
    Fix: dimensionless logits from C(h_L) with a learnable logit gain.
    """
    out = _logits(ctx, ctx.op)
    return per_output(ctx, out, rest=DIMENSIONLESS)


@rule(ops("mse_loss", "l1_loss"), funcs(F.mse_loss, F.l1_loss))
def regression(ctx: RuleContext) -> UnitValue:
    """
    What it does: MSE of a pair needs one unit and has twice that unit; L1 has that unit.
    Why it matters: the loss is dimensionless only if the regression target is.
    Example: ``F.mse_loss(pred, y)`` has in:y^2 (then UC302 at the loss).
    Fix: divide by a scale S with u(S) = u(L): lambda = alpha / S.
    """
    u = ctx.same_unit([ctx.args[0], ctx.args[1]], "regression loss")
    if isinstance(u, Unit) and "mse" in ctx.op and u != ctx.opaque():
        return u**2
    return u


@rule(ops("smooth_l1_loss", "huber_loss", "hinge_embedding_loss", "margin_ranking_loss"),
      funcs(F.smooth_l1_loss, F.huber_loss, F.margin_ranking_loss, F.hinge_embedding_loss))
def thresholded(ctx: RuleContext) -> UnitValue:
    """
    What it does: losses with a built-in threshold (Huber's delta, a margin) need
    dimensionless residuals (UC302).
    Why it matters: the threshold is a literal of fixed scale.
    Example: ``F.smooth_l1_loss(pred, y)``.
    Fix: normalise the residual by a scale with the target's unit.
    """
    u = ctx.same_unit([ctx.args[0], ctx.args[1]], "loss")
    if isinstance(u, Unit) and not u.is_dimensionless and not u.is_opaque:
        return ctx.violation("UC302", f"thresholded loss on residuals of unit {u}", {"residual": u})
    return DIMENSIONLESS if isinstance(u, Unit) and not u.is_opaque else u


