"""Embedding lookups: a product with a one-hot matrix, so the lookup pins the table."""

from __future__ import annotations

import torch

from unitcheck.registry import rule
from unitcheck.rulectx import RuleContext
from unitcheck.units import DIMENSIONLESS, Unit
from unitcheck.values import UnitValue

from ._util import funcs, ops, per_output

F = torch.nn.functional


@rule(ops("embedding", "_embedding_bag", "embedding_bag", "_embedding_bag_forward_only"),
      funcs(F.embedding, F.embedding_bag))
def embedding(ctx: RuleContext) -> UnitValue:
    """
    What it does: ``embedding(W, ids)`` has u(W) and pins W to its own generator.
    Why it matters: each table is a scale degree of freedom, so a token table plus a learned
    position table is a mismatch (UC101).
    Example: ``self.wte(idx) + self.wpe(pos)``.
    Fix: canonicalise each table's output before the sum, or use rotary positions.
    """
    functional = ctx.node.target in (F.embedding, F.embedding_bag)
    table = ctx.arg(1, "weight") if functional else ctx.args[0]
    u = ctx.pin(ctx.u(table))
    out = u if isinstance(u, Unit) else DIMENSIONLESS
    return per_output(ctx, out)
