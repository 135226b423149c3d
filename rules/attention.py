"""Attention and softmax: logits must be dimensionless (UC201, UC203, UC301)."""

from __future__ import annotations

from typing import Any

import torch

from unitcheck import flex
from unitcheck.fxutil import base_name
from unitcheck.graphs import users_through_views
from unitcheck.registry import method, rule
from unitcheck.rulectx import RuleContext
from unitcheck.units import DIMENSIONLESS, Unit
from unitcheck.values import Index, Poly, UnitValue

from ._util import funcs, ops, per_output

F = torch.nn.functional

_SDPA = ops("scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu",
            "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention",
            "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention")


@rule(_SDPA, funcs(F.scaled_dot_product_attention))
def sdpa(ctx: RuleContext) -> UnitValue:
    """
    What it does: fused attention needs dimensionless logits u(q) + u(k) (UC201) and a
    dimensionless (or polymorphic, or boolean) additive mask; its output has u(v) (times the
    opaque unit of the broken weights on a violation, as explicit attention's ``softmax @ v``).
    Over a single key its weights are identically 1, whatever the logits.
    Why it matters: otherwise the softmax temperature depends on raw weight norms.
    Example: ``F.scaled_dot_product_attention(q, k, v, is_causal=True)`` after unnormalised q, k.
    Fix: canonicalise q and k per head; calibrated temperature tau = sqrt(d_h) s_Q s_K.
    """
    mask = ctx.arg(3, "attn_mask") if ctx.op == "scaled_dot_product_attention" else ctx.kwargs.get("attn_mask")
    return _fused_attention(ctx, [] if mask is None else [mask])


@rule(flex.OP)
def flex_attention(ctx: RuleContext) -> UnitValue:
    """
    What it does: ``flex_attention`` needs dimensionless logits u(q) + u(k) (UC201), and every
    tensor its score function reads besides the score (a learned bias table, a per-head scale)
    dimensionless, since the score function adds it to the logits or scales them with it; its
    output has u(v), its log-sum-exp is dimensionless.
    Why it matters: otherwise the softmax temperature depends on raw weight norms.
    Example: ``flex_attention(q, k, v, score_mod=lambda s, b, h, i, j: s + bias[h, i - j])`` after
    unnormalised q, k.
    Fix: canonicalise q and k per head; a bias table in logit units (dimensionless).
    """
    buffers = ctx.arg(flex.SCORE_BUFFERS, "score_mod_other_buffers") or ()
    return _fused_attention(ctx, [b for b in buffers if isinstance(b, torch.fx.Node)])


def _fused_attention(ctx: RuleContext, biases: list[Any]) -> UnitValue:
    """Fused attention of q, k, v (the first three arguments) with tensors added to its logits."""
    q, k, v = ctx.args[0], ctx.args[1], ctx.args[2]
    uq, uk, uv = (ctx.pin(ctx.u(t)) for t in (q, k, v))
    logits = (uq if isinstance(uq, Unit) else DIMENSIONLESS) * (uk if isinstance(uk, Unit) else DIMENSIONLESS)
    problems: dict[str, UnitValue] = {}
    keys = ctx.shape(k)
    if keys is not None and len(keys) >= 2 and isinstance(keys[-2], int) and keys[-2] == 1:
        biases = []  # over one key the weights are identically 1 (the softmax rule's size-1 axis)
    elif not logits.is_dimensionless:
        problems["logits"] = logits
    for bias in biases:
        um = ctx.u(bias)
        if not isinstance(um, (Index, Poly)) and not ctx.to_dimensionless(um):
            problems["mask"] = um
            break
    values = uv if isinstance(uv, Unit) else DIMENSIONLESS
    out: UnitValue = values
    if problems:
        what = []
        if "logits" in problems:
            what.append(f"attention logits carry the unit {problems['logits']}")
        if "mask" in problems:
            what.append(f"the additive attention bias carries the unit {problems['mask']}")
        # attention is linear in v: only the weights break, so the output keeps u(v) beside them
        out = ctx.violation("UC201", "; ".join(what), problems, consumed=[uq, uk],
                            sources={"logits": (q, k), "mask": biases[0] if biases else None}) * values
    return per_output(ctx, out, rest=DIMENSIONLESS)


_SOFTMAX = ops("_softmax", "softmax", "_log_softmax", "log_softmax", "_safe_softmax",
               "special_softmax", "special_log_softmax")
_MATMULS = {"matmul", "bmm", "mm", "einsum", "baddbmm", "__matmul__"}
_NLL = {"nll_loss_forward", "nll_loss", "nll_loss2d_forward", "nll_loss_nd", "nll_loss2d"}


@rule(_SOFTMAX, funcs(F.softmax, F.log_softmax, torch.softmax, torch.log_softmax),
      method("softmax", "log_softmax"))
def softmax(ctx: RuleContext) -> UnitValue:
    """
    What it does: softmax and log-softmax need a dimensionless input. The code says where: UC201
    when the probabilities weight values (explicit attention), UC301 when log-probabilities feed
    a likelihood loss, UC203 otherwise. Over an axis of size 1 it is the constant 1.
    Why it matters: softmax is shift-invariant, not scale-invariant.
    Example: ``(q @ k.transpose(-2, -1) / math.sqrt(d)).softmax(-1) @ v``.
    Fix: canonicalise the input and apply a dimensionless temperature.
    """
    x = ctx.args[0]
    u = ctx.u(x)
    if ctx.to_dimensionless(u) or isinstance(u, (Index, Poly)):
        return DIMENSIONLESS
    shape, dim = ctx.shape(x), ctx.arg(1, "dim")
    if shape is not None and isinstance(dim, int) and -len(shape) <= dim < len(shape) and shape[dim] == 1:
        return DIMENSIONLESS  # over one element: identically 1 (log: 0), whatever the input's scale
    consumers = {base_name(n) for n in users_through_views(ctx.node)}
    if consumers & _MATMULS:
        return ctx.violation("UC201", f"attention logits carry the unit {u}", {"logits": u})
    if consumers & _NLL:
        return ctx.violation("UC301", f"the loss's logits carry the unit {u}", {"logits": u})
    return ctx.violation("UC203", f"softmax of an input of unit {u}", {"input": u})
