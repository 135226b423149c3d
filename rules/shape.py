"""Shape and data movement: the unit passes through (SPEC 3)."""

from __future__ import annotations

import builtins
import operator

import torch

from unitcheck.fxutil import integer_cast, row_of_index_write
from unitcheck.registry import method, rule
from unitcheck.rulectx import RuleContext
from unitcheck.units import DIMENSIONLESS
from unitcheck.values import INDEX, Index, UnitValue

from ._util import first, funcs, nonlinear, ops

_MOVE_OPS = ops(
    "view", "_unsafe_view", "reshape", "permute", "transpose", "t", "expand", "slice", "select",
    "index", "gather", "index_select", "clone", "contiguous", "alias", "detach", "lift_fresh_copy",
    "lift_fresh", "unsqueeze", "squeeze", "flatten", "unflatten", "repeat", "flip", "roll",
    "narrow", "unfold", "as_strided", "movedim", "diagonal", "tril", "triu", "pixel_shuffle",
    "pixel_unshuffle", "channel_shuffle", "view_as", "reshape_as", "expand_as", "squeeze_copy",
    "unsqueeze_copy", "view_copy", "permute_copy", "expand_copy", "t_copy", "transpose_copy",
    "select_copy", "slice_copy", "alias_copy", "repeat_interleave.self_Tensor", "repeat_interleave.self_int",
    "take_along_dim",
    "masked_select", "_reshape_alias", "im2col", "col2im", "diag", "resolve_conj", "resolve_neg",
    "real", "imag", "view_as_real", "view_as_complex", "swapaxes", "swapdims", "moveaxis", "tile", "broadcast_to", "atleast_1d",
    "atleast_2d", "atleast_3d", "nan_to_num", "_conj", "flatten_dense_tensors", "numpy_T", "mT", "mH",
    "matrix_H", "adjoint",
)
_MOVE_FUNCS = funcs(
    torch.reshape, torch.permute, torch.transpose, torch.flatten, torch.unsqueeze, torch.squeeze,
    torch.flip, torch.roll, torch.narrow, torch.gather, torch.index_select, torch.clone,
    torch.tril, torch.triu, torch.movedim, torch.diagonal, torch.t, torch.repeat_interleave,
    torch.take_along_dim, torch.masked_select, torch.swapaxes, torch.broadcast_to, torch.tile,
    torch.view_as_real, torch.view_as_complex, torch.real, torch.imag,
    torch.nn.functional.pixel_shuffle, torch.nn.functional.pixel_unshuffle,
    torch.nn.functional.dropout, torch.nn.functional.dropout1d, torch.nn.functional.dropout2d,
    torch.nn.functional.dropout3d, torch.nn.functional.alpha_dropout, torch.sym_float, torch.sym_int,
)
_MOVE_METHODS = method(
    "view", "reshape", "permute", "transpose", "t", "expand", "expand_as", "contiguous", "clone",
    "detach", "unsqueeze", "squeeze", "flatten", "unflatten", "repeat", "flip", "roll", "narrow",
    "unfold", "view_as", "reshape_as", "gather", "index_select", "tril", "triu", "movedim",
    "diagonal", "repeat_interleave", "requires_grad_", "cpu", "cuda", "to", "type", "type_as",
    "float", "double", "half", "bfloat16", "swapaxes", "masked_select", "take_along_dim",
    "broadcast_to", "tile", "__getitem__",
)


@rule(_MOVE_OPS, _MOVE_FUNCS, _MOVE_METHODS)
def data_movement(ctx: RuleContext) -> UnitValue:
    """
    What it does: passes the unit of the moved tensor through views, slices, gathers and copies;
    a row read back from an index write (``y[k] = x`` lowers to ``where(arange == k, x, y)``) has
    the unit of the operand that row comes from whole.
    Why it matters: rearranging elements commutes with a uniform rescaling.
    Example: ``q.view(B, T, nh, hs).transpose(1, 2)`` keeps u(q).
    Fix: none; these ops cannot violate.
    """
    written = row_of_index_write(ctx.node) if ctx.op == "select" else None
    v = first(ctx) if written is None else ctx.u(written)
    if isinstance(v, Index):
        # a float result from integer data (e.g. .float() on positions) is a dimensionless number
        return DIMENSIONLESS if _float_out(ctx) else INDEX
    return v



@rule(ops("_to_copy", "to", "_to_dtype", "type_as", "_autocast_to_reduced_precision",
          "_autocast_to_full_precision", "convert_element_type"))
def cast(ctx: RuleContext) -> UnitValue:
    """
    What it does: a dtype/device cast keeps the unit; an index tensor cast to float becomes a
    dimensionless number (positions fed to rotary embeddings). A float cast to an integer dtype
    truncates, as ``trunc`` does, so it needs a dimensionless input (UC204) and gives an index.
    Why it matters: casts are unit-transparent; integers carry no unit, and truncating a value
    with a unit gives other integers when the unit's scale changes.
    Example: ``position_ids.float()`` is dimensionless; ``flattened_patches[..., 0].long()``
    (Pix2Struct's row ids, stored in its float input) reads ids from a tensor with a unit.
    Fix: keep ids in an integer tensor, or declare the float input dimensionless.
    """
    v = first(ctx)
    if isinstance(v, Index):
        return DIMENSIONLESS if _float_out(ctx) else INDEX
    if integer_cast(ctx.node):
        bad = nonlinear(ctx, [ctx.args[0]], "UC204", "a cast to integers")
        return INDEX if bad == DIMENSIONLESS else bad
    return v


def _float_out(ctx: RuleContext) -> bool:
    val = ctx.val()
    return isinstance(val, torch.Tensor) and val.is_floating_point()


@rule(ops("split", "split_with_sizes", "chunk", "unbind", "tensor_split", "unsafe_split",
          "unsafe_split_with_sizes", "unsafe_chunk", "split_copy", "unbind_copy"),
      funcs(torch.split, torch.chunk, torch.unbind, torch.tensor_split),
      method("split", "chunk", "unbind", "tensor_split"))
def split(ctx: RuleContext) -> UnitValue:
    """
    What it does: splits keep the unit on every piece.
    Why it matters: a fused qkv projection splits into q, k, v of one unit.
    Example: ``q, k, v = self.c_attn(x).split(C, dim=2)``.
    Fix: none.
    """
    v = first(ctx)
    val = ctx.val()
    n = len(val) if isinstance(val, (list, tuple)) else 1
    return tuple(v for _ in range(n))


@rule(ops("meshgrid"), funcs(torch.meshgrid))
def meshgrid(ctx: RuleContext) -> UnitValue:
    """
    What it does: each grid ``meshgrid`` returns is its input expanded: it keeps that input's unit.
    Why it matters: 2-D position tables (DINOv3's patch coordinates) are built this way.
    Example: ``ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")``.
    Fix: none.
    """
    tensors = ctx.args[0] if len(ctx.args) == 1 and isinstance(ctx.args[0], (list, tuple)) else ctx.args
    return tuple(ctx.u(t) for t in tensors)


@rule(operator.getitem)
def getitem(ctx: RuleContext) -> UnitValue:
    """
    What it does: selects one output of a multi-output op, or indexes a tensor (symbolic tracing).
    Why it matters: tuples carry one unit per element.
    Example: ``torch.ops.aten.max.dim(x, 1)[0]`` has u(x); ``[1]`` is an index.
    Fix: none.
    """
    container = ctx.u(ctx.args[0])
    idx = ctx.args[1]
    if isinstance(container, tuple) and isinstance(idx, int):
        return container[idx] if idx < len(container) else None
    if isinstance(container, Index):
        return DIMENSIONLESS if _float_out(ctx) else INDEX
    return container


@rule(ops("_assert_tensor_metadata", "_assert_async", "_assert_scalar", "sym_constrain_range",
          "sym_constrain_range_for_size", "_functional_assert_async", "sym_size", "sym_numel",
          "sym_stride", "sym_storage_offset", "_local_scalar_dense", "item", "is_nonzero",
          "_check_is_size", "_linalg_check_errors"),
      funcs(builtins.getattr, torch._assert, getattr(torch, "_check", None)),
      method("size", "dim", "numel", "stride", "item", "tolist", "nelement", "is_floating_point"))
def bookkeeping(ctx: RuleContext) -> UnitValue:
    """
    What it does: assertions, shape queries and scalar extraction carry no unit.
    Why it matters: they are not data paths of the model.
    Example: ``x.size(-1)``, ``_assert_tensor_metadata(x, dtype=...)``.
    Fix: none.
    """
    if ctx.node.target in (torch.ops.aten._local_scalar_dense.default, torch.ops.aten.item.default) or (
        ctx.node.op == "call_method" and ctx.node.target == "item"
    ):
        return first(ctx)
    if ctx.node.target is builtins.getattr and len(ctx.args) > 1 and ctx.args[1] in _TENSOR_VIEWS:
        return first(ctx)  # ``x.T`` in a symbolic trace: the tensor moved, not a size
    return INDEX


# attributes that are the tensor itself, moved or reinterpreted (the symbolic trace records them as
# getattr): they keep its unit
_TENSOR_VIEWS = frozenset({"T", "mT", "H", "mH", "real", "imag", "data"})


@rule(ops("constant_pad_nd", "pad", "reflection_pad1d", "reflection_pad2d", "reflection_pad3d",
          "replication_pad1d", "replication_pad2d", "replication_pad3d", "circular_pad1d",
          "circular_pad2d", "circular_pad3d"),
      funcs(torch.nn.functional.pad))
def pad(ctx: RuleContext) -> UnitValue:
    """
    What it does: zero, reflection and replication padding keep the unit; padding a unitful tensor
    with a non-zero constant is UC103.
    Why it matters: a constant pad value is a literal of fixed scale.
    Example: ``F.pad(x, (1, 1), value=-1.0)``.
    Fix: pad with zeros, or canonicalise before padding.
    """
    x = ctx.args[0]
    name = ctx.node.target
    value = ctx.arg(2, "value", 0.0)
    if name in ops("constant_pad_nd.default") or ctx.node.target is torch.nn.functional.pad:
        if ctx.node.target is torch.nn.functional.pad:
            value = ctx.arg(3, "value", 0.0)
            mode = ctx.arg(2, "mode", "constant")
            if mode != "constant":
                value = 0.0
        return ctx.same_unit([x, float(value or 0.0)], "pad")
    return ctx.u(x)

