"""Index-kind ops: logical and bitwise algebra, argmax-like queries, integer arithmetic."""

from __future__ import annotations

import operator

import torch

from unitcheck.registry import method, rule
from unitcheck.rulectx import RuleContext
from unitcheck.values import INDEX, UnitValue

from ._util import funcs, ops


@rule(ops("logical_and", "logical_or", "logical_not", "logical_xor", "bitwise_and", "bitwise_or",
          "bitwise_not", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift", "argmax",
          "argmin", "argsort", "any", "all", "isnan", "isinf", "isfinite", "isneginf", "isposinf",
          "nonzero", "nonzero_static", "count_nonzero", "bucketize", "searchsorted", "signbit",
          "histc", "bincount", "unique", "_unique2", "unique_consecutive",
          "one_hot", "__and__", "__or__", "__xor__", "__lshift__", "__rshift__"),
      funcs(operator.and_, operator.or_, operator.xor, operator.invert, operator.not_,
            operator.floordiv, torch.logical_and, torch.logical_or, torch.logical_not,
            torch.argmax, torch.argmin, torch.argsort, torch.any, torch.all, torch.isnan,
            torch.isinf, torch.isfinite, torch.nonzero, torch.bucketize, torch.searchsorted,
            torch.nn.functional.one_hot, torch.sym_not),
      method("logical_and", "logical_or", "logical_not", "argmax", "argmin", "argsort", "any",
             "all", "isnan", "isinf", "nonzero", "bool", "long", "int", "__and__", "__or__",
             "__invert__", "byte", "short"))
def index_ops(ctx: RuleContext) -> UnitValue:
    """
    What it does: boolean algebra, argmax-like queries and integer casts produce index data.
    Why it matters: indices and masks are not rescaled; under a positive rescaling, argmax and
    sign tests of zero are invariant.
    Example: ``mask = causal & padding``.
    Fix: none.
    """
    return INDEX
