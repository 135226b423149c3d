"""Same-unit combines: add, sub, where (and ``sym_ite`` on sizes), maximum, cat, stack, lerp, clamp, scatters,
comparisons, distances."""

from __future__ import annotations

import operator

import torch
import torch.fx as fx

from unitcheck.registry import method, rule
from unitcheck.rulectx import RuleContext
from unitcheck.units import DIMENSIONLESS
from unitcheck.values import INDEX, POLY, Literal, UnitValue

from ._util import funcs, ops

F = torch.nn.functional


@rule(ops("add", "sub", "rsub"), funcs(operator.add, operator.sub, operator.iadd, operator.isub,
      torch.add, torch.sub, torch.subtract, torch.rsub), method("add", "sub", "add_", "sub_", "__add__",
      "__sub__", "__radd__", "__rsub__", "subtract"))
def add(ctx: RuleContext) -> UnitValue:
    """
    What it does: requires both operands of ``+``/``-`` to have one unit (UC101); a residual add
    whose branch is computed from the stream is UC102; a non-floor literal is UC103; a tiny
    literal (``var + eps``) is a numerical floor (UC902).
    Why it matters: addition is equivariant only when both sides rescale alike.
    Example: ``x + self.attn(self.ln_1(x))``.
    Fix: canonicalise and orthogonalise the residual update (GCT).
    """
    name = "sub" if "sub" in ctx.op else "add"
    a, b = ctx.args[0], ctx.arg(1, "other")
    if name == "sub" and a is b and isinstance(a, fx.Node):
        return POLY  # x - x is identically zero: it stands beside any unit
    return ctx.same_unit([a, b], name)


@rule(ops("where", "maximum", "minimum", "fmax", "fmin", "remainder", "fmod",
          "masked_fill", "slice_scatter", "select_scatter", "diagonal_scatter",
          "as_strided_scatter", "index_put", "_unsafe_index_put", "index_copy", "index_fill",
          "scatter", "scatter_add", "scatter_reduce", "index_add", "index_reduce", "masked_scatter",
          "hypot", "nextafter", "heaviside"),
      funcs(torch.where, torch.maximum, torch.minimum, torch.fmax, torch.fmin, torch.remainder,
            torch.fmod, torch.masked_fill, torch.scatter, torch.scatter_add, torch.index_add,
            torch.hypot, operator.mod, torch.sym_ite, torch.sym_max, torch.sym_min),
      method("masked_fill", "masked_fill_", "where", "maximum", "minimum", "remainder", "fmod",
             "scatter", "scatter_add", "index_add", "index_put", "index_fill"))
def same_unit(ctx: RuleContext) -> UnitValue:
    """
    What it does: requires every data operand (not conditions, masks or indices) to have one
    unit; the result has it.
    Why it matters: selecting or merging values of different scales is not equivariant.
    Example: ``torch.where(mask, logits, torch.finfo(logits.dtype).min)`` is fine: the extreme
    value is scale-polymorphic.
    Fix: bring the operands to one unit (canonicalise) first.
    """
    name = ctx.op
    data = [a for i, a in enumerate(ctx.args) if i not in _SKIP.get(name, ())]
    data += [v for k, v in ctx.kwargs.items() if k in ("other", "value", "src", "source", "values", "self")]
    out = ctx.same_unit(data, name)
    return out


# argument positions that are conditions, dims or indices rather than data
_SKIP: dict[str, tuple[int, ...]] = {
    "where": (0,),
    "sym_ite": (0,),
    "masked_fill": (1,),
    "masked_fill_": (1,),
    "slice_scatter": (2, 3, 4, 5),
    "select_scatter": (2, 3),
    "diagonal_scatter": (2, 3, 4),
    "as_strided_scatter": (2, 3, 4),
    "index_put": (1, 3),
    "_unsafe_index_put": (1, 3),
    "index_copy": (1, 2),
    "index_fill": (1, 2),
    "index_add": (1, 2, 4),
    "index_reduce": (1, 2, 4, 5),
    "scatter": (1, 2, 4),
    "scatter_add": (1, 2),
    "scatter_reduce": (1, 2, 4, 5),
    "masked_scatter": (1,),
}


@rule(ops("copy", "fill.Tensor"), method("copy_", "fill_"))
def overwrite(ctx: RuleContext) -> UnitValue:
    """
    What it does: ``copy(self, src)`` and ``fill(self, value)`` have the unit of what is written:
    the old values of ``self`` are gone.
    Why it matters: slice assignment (``out[:, :d] = a``) lowers to a copy into a slice of the
    target; the mismatch, if any, is where the slice goes back (``slice_scatter``).
    Example: ``buf.copy_(x)`` has u(x).
    Fix: none.
    """
    src = ctx.arg(1, "src", ctx.kwargs.get("value"))
    v = ctx.u(src)
    return DIMENSIONLESS if isinstance(v, Literal) and not v.is_poly else (POLY if isinstance(v, Literal) else v)


@rule(ops("cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack", "column_stack"),
      funcs(torch.cat, torch.concat, torch.stack, torch.hstack, torch.vstack, torch.dstack))
def cat(ctx: RuleContext) -> UnitValue:
    """
    What it does: every concatenated tensor must carry one unit.
    Why it matters: a concatenation of differently scaled parts has no unit at all.
    Example: ``torch.cat([-x2, x1], dim=-1)`` (rotate-half) keeps u(x).
    Fix: canonicalise each part first.
    """
    tensors = ctx.arg(0, "tensors")
    return ctx.same_unit(list(tensors), "cat")


@rule(ops("_cdist_forward", "cdist", "dist"), funcs(torch.cdist, torch.dist), method("dist"))
def distance(ctx: RuleContext) -> UnitValue:
    """
    What it does: ``cdist(x1, x2)`` and ``dist(a, b)`` need one unit in both operands; the
    distances have it.
    Why it matters: a distance is a norm of a difference: between values of different scales
    it is dominated by whichever is larger, and rescaling one side moves every distance.
    Example: ``-torch.cdist(encoder(query), prototypes)`` as logits, with ``prototypes`` a
    learned table of its own rather than the encoder's outputs.
    Fix: compute both sides with the same encoder, or canonicalise both before the distance.
    """
    return ctx.same_unit([ctx.args[0], ctx.args[1]], ctx.op)


@rule(ops("lerp"), funcs(torch.lerp), method("lerp"))
def lerp(ctx: RuleContext) -> UnitValue:
    """
    What it does: ``lerp(a, b, w)`` needs u(a) = u(b) and a dimensionless weight.
    Why it matters: nGPT's eigen learning-rate update is a lerp on the hypersphere.
    Example: ``torch.lerp(h, h_attn, alpha)``.
    Fix: canonicalise both endpoints.
    """
    out = ctx.same_unit([ctx.args[0], ctx.args[1]], "lerp")
    w = ctx.args[2] if len(ctx.args) > 2 else ctx.kwargs.get("weight")
    if not ctx.to_dimensionless(ctx.u(w)):
        return ctx.violation("UC101", f"lerp weight carries the unit {ctx.u(w)}",
                             {"weight": ctx.u(w), "endpoints": out})
    return out


@rule(ops("clamp", "clamp_min", "clamp_max", "clip", "hardtanh"), funcs(torch.clamp, torch.clip),
      method("clamp", "clamp_min", "clamp_max", "clip", "clamp_"))
def clamp(ctx: RuleContext) -> UnitValue:
    """
    What it does: clamp bounds must carry the clamped tensor's unit; a tiny literal lower bound
    (``norm.clamp_min(1e-12)``) is a numerical floor, zero is always fine, any other literal
    bound of a unitful tensor is UC103.
    Why it matters: ``clamp(x, -1, 1)`` saturates at a fixed scale, so rescaling x changes it.
    Example: ``x.clamp(min=1e-6)``.
    Fix: clamp canonical coordinates, or bounds that carry the unit.
    """
    operands = [ctx.args[0], ctx.arg(1, "min"), ctx.arg(2, "max")]
    return ctx.same_unit([o for o in operands if o is not None], "clamp")


@rule(ops("eq", "ne", "lt", "le", "gt", "ge", "isclose", "equal", "greater", "less",
          "greater_equal", "less_equal", "not_equal"),
      funcs(operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge,
            torch.eq, torch.ne, torch.lt, torch.le, torch.gt, torch.ge, torch.isclose),
      method("eq", "ne", "lt", "le", "gt", "ge", "__eq__", "__ne__", "__lt__", "__le__",
             "__gt__", "__ge__"))
def compare(ctx: RuleContext) -> UnitValue:
    """
    What it does: a comparison needs operands of one unit (a literal threshold other than zero
    against a unitful tensor is UC103); its result is an index (bool) tensor.
    Why it matters: ``x > 1.0`` flips when x is rescaled.
    Example: ``attn_mask > 0``.
    Fix: compare canonical coordinates.
    """
    res = ctx.combine([ctx.args[0], ctx.arg(1, "other")], floors=False)
    if res.mismatch:
        ctx.report_mismatch(res.mismatch, "comparison")
    elif res.bad_literal is not None:
        ctx.violation("UC103", f"comparison of a tensor of unit {res.unit} with the literal "
                      f"{res.bad_literal:g}", {"tensor": res.unit, "literal": DIMENSIONLESS})
    return INDEX


@rule(ops("complex"), funcs(torch.complex))
def complex_(ctx: RuleContext) -> UnitValue:
    """
    What it does: ``complex(re, im)`` needs one unit for both parts; the result has it.
    Why it matters: a complex number whose parts scale differently has no unit.
    Example: ``torch.complex(x[..., 0], x[..., 1])``.
    Fix: bring both parts to one unit.
    """
    return ctx.same_unit([ctx.args[0], ctx.args[1]], "complex")


@rule(ops("atan2", "arctan2"), funcs(torch.atan2))
def atan2(ctx: RuleContext) -> UnitValue:
    """
    What it does: ``atan2(y, x)`` needs u(y) = u(x) and is dimensionless.
    Why it matters: an angle from differently scaled coordinates is arbitrary.
    Example: ``torch.atan2(y, x)``.
    Fix: bring both to one unit.
    """
    out = ctx.same_unit([ctx.args[0], ctx.args[1]], "atan2")
    return out if out == ctx.opaque() else DIMENSIONLESS
