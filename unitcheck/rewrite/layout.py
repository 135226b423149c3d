"""Which axis of a value holds its features: the axis GCT's C and P_perp act over.

A token stream keeps its features last, a feature map its channels at axis 1; research code
moves them between the two (Mamba's mixer transposes to convolve over time, a ViT flattens its
patch grid and transposes). C over another axis is a unit-consistent function and lints clean,
but it normalises across positions: over time it leaks later tokens into earlier ones, over a
feature map's width it mixes pixels of a row. The axis is read forward from the ops that fix
it (a linear layer writes its features last, a convolution at 1) through the ops that move
axes, and left unknown where nothing fixes it (the caller then keeps the last axis).

:func:`annotate` walks a graph once and writes ``node.meta["feature_axes"]``; :func:`feature_axes`
answers for nodes a rewrite inserts later from their inputs. A feature axis split in several
(heads and head features; Zamba's ``view(B, -1, 2, T)`` of a gate and its value) is followed as
all of them until one is selected away; C acts over the innermost left.
"""

from __future__ import annotations

import re
from typing import Any

import sympy
import torch
import torch.fx as fx

from ..fxutil import LEAF_KEY, base_name
from ..graphs import leaf_through_moves
from .variants import named_args

__all__ = ["KEY", "Axes", "annotate", "feature_axes", "feature_axis", "over_features"]

KEY = "feature_axes"
Axes = tuple[int, ...]

_LAST = frozenset({
    "embedding", "linear", "addmm", "layer_norm", "native_layer_norm", "rms_norm", "_fused_rms_norm",
    "embedding_bag", "scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention", "flex_attention",
})
_CHANNELS = re.compile(r"^_*(\w*conv(\d|olution|_transpose)\w*|\w*(batch|group|instance)_norm\w*|\w*pool\d?d\w*"
                       r"|upsample\w*|pixel_(un)?shuffle)$")
_SPLITS = frozenset({"split", "split_with_sizes", "chunk", "tensor_split", "unsafe_split", "unsafe_chunk",
                     "unsafe_split_with_sizes"})
_RESHAPES = frozenset({"view", "_unsafe_view", "reshape", "flatten", "unflatten", "view_as", "reshape_as",
                       "_reshape_alias"})
_REDUCTIONS = frozenset({"sum", "mean", "amax", "amin", "max", "min", "var", "std", "logsumexp", "prod", "norm",
                         "linalg_vector_norm", "argmax", "argmin", "var_mean", "std_mean", "nansum", "nanmean",
                         "all", "any", "count_nonzero"})


def _val(n: Any) -> torch.Tensor | None:
    v = n.meta.get("val") if isinstance(n, fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _rank(n: Any) -> int | None:
    """The value's rank; for a node a rewrite inserted without one, its widest input's."""
    v = _val(n)
    if v is not None or not isinstance(n, fx.Node) or n.op != "call_function":
        return v.dim() if v is not None else None
    return max((r for a in n.all_input_nodes if (r := _rank(a)) is not None), default=None)


def _norm(d: int, rank: int) -> int:
    return d + rank if d < 0 else d


def _weight(n: Any) -> bool:
    """A parameter, buffer or new gain, through the views and casts taken of it (``W.t()``)."""
    if not isinstance(n, fx.Node):
        return False
    leaf = leaf_through_moves(n)
    return leaf.op == "get_attr" or leaf.op == "placeholder" and leaf.meta.get(LEAF_KEY) in ("param", "buffer", "constant")


def _sizes(v: torch.Tensor) -> list[Any]:
    return [s.node.expr if isinstance(s, torch.SymInt) else sympy.Integer(int(s)) for s in v.shape]


def _prefixes(sizes: list[Any]) -> list[Any]:
    out, p = [sympy.Integer(1)], sympy.Integer(1)
    for s in sizes:
        p = sympy.expand(p * s)
        out.append(p)
    return out


def _same(a: Any, b: Any) -> bool:
    return bool(sympy.expand(a - b) == 0)


def _reshaped(a: int, src: torch.Tensor, out: torch.Tensor) -> list[int] | None:
    """The output axes holding input axis ``a`` after a row-major reshape: the axis itself, the
    axes it is split into (heads and head features; a gate and its value), or the axis it is
    merged into with its neighbours; None where it is split across other axes' boundaries."""
    pin, pout = _prefixes(_sizes(src)), _prefixes(_sizes(out))
    start, end = pin[a], pin[a + 1]
    firsts = [j for j in range(out.dim()) if _same(pout[j], start)]
    if firsts:
        lasts = [k for k in range(firsts[0], out.dim()) if _same(pout[k + 1], end)]
        if lasts:
            return list(range(firsts[0], lasts[-1] + 1))
    for j in range(out.dim()):  # merged: axis j spans input axes i..m-1 around a
        if any(_same(pout[j], pin[i]) for i in range(a + 1)) and any(
                _same(pout[j + 1], pin[m]) for m in range(a + 1, src.dim() + 1)):
            return [j]
    return None


def _removed(axis: int, dims: list[int]) -> int | None:
    return None if axis in dims else axis - sum(d < axis for d in dims)


def _dims(value: Any, rank: int) -> list[int]:
    if value is None:
        return list(range(rank))
    return [_norm(int(d), rank) for d in (value if isinstance(value, (list, tuple)) else [value])]


def _of_matmul(a: Any, b: Any, rank: int) -> int | None:
    """``x @ W`` writes W's columns last, ``W @ x`` its rows second-last (Mamba's ``dt_proj``);
    of two data operands, b's features last (attention weights on values) or a's rows."""
    if _weight(b):
        return rank - 1
    if _weight(a):
        return rank - 2
    rb, ra = _rank(b), _rank(a)
    if rb is not None and rb - 1 in feature_axes(b):
        return rank - 1
    if ra is not None and ra >= 2 and ra - 2 in feature_axes(a):
        return rank - 2
    return None


def _of_einsum(node: fx.Node) -> int | None:
    eq = node.args[0]
    ops = node.args[1] if len(node.args) > 1 else []
    if not isinstance(eq, str) or "..." in eq or "->" not in eq or not isinstance(ops, (list, tuple)):
        return None
    ins, out = eq.replace(" ", "").split("->")
    subs = ins.split(",")
    if len(subs) != len(ops):
        return None
    data = [(s, o) for s, o in zip(subs, ops, strict=True) if not _weight(o)]
    for s, o in zip(subs, ops, strict=True):  # a weight's own letters in the output: its features
        if _weight(o):
            own = [c for c in s if c in out and not any(c in d for d, _ in data)]
            if own:
                return max(out.index(c) for c in own)
    for s, o in data:
        kept = [out.index(s[f]) for f in feature_axes(o) if f < len(s) and s[f] in out]
        if kept:
            return max(kept)
    return None


def _of_movement(node: fx.Node, name: str, src: fx.Node, a: int, args: dict[Any, Any]) -> list[int] | None | bool:
    """Axis ``a`` of ``src`` after a view, permutation or selection (the axes it became, None
    where it is gone); False when ``name`` is none of those."""
    rank, out = _rank(src) or 0, _val(node)
    if name == "permute":
        return [[_norm(d, rank) for d in args["dims"]].index(a)]
    if name in ("transpose", "swapaxes", "swapdims", "t"):
        d0, d1 = (0, 1) if name == "t" else (_norm(args.get("dim0", 0), rank), _norm(args.get("dim1", 1), rank))
        return [d1 if a == d0 else d0 if a == d1 else a]
    if name == "movedim":
        srcs, dsts = _dims(args["source"], rank), _dims(args["destination"], rank)
        placed: dict[int, int] = dict(zip(dsts, srcs, strict=True))  # output axis -> input axis
        rest = iter(i for i in range(rank) if i not in srcs)
        return [[placed[d] if d in placed else next(rest) for d in range(rank)].index(a)]
    if name == "unsqueeze" and out is not None:
        return [a + (_norm(args["dim"], out.dim()) <= a)]
    if name == "squeeze":
        v = _val(src)
        dims = args.get("dim", args.get("dims"))
        ones = [i for i in _dims(dims, rank) if v is not None and isinstance(v.shape[i], int) and v.shape[i] == 1]
        return _one(_removed(a, ones))
    if name == "select":
        return _one(_removed(a, [_norm(args["dim"], rank)]))
    if name in _RESHAPES:
        v = _val(src)
        return _reshaped(a, v, out) if v is not None and out is not None else None
    if name in ("expand", "expand_as") and out is not None:
        return [a + out.dim() - rank]
    return False


def _one(axis: int | None) -> list[int] | None:
    return None if axis is None else [axis]


def _of_reduction(node: fx.Node, a: int, rank: int, args: dict[Any, Any]) -> int | None:
    """Reduced over the features: none left (a kept axis of size 1 is not one); over others:
    the axis, shifted past those removed."""
    out = _val(node)
    if out is not None and out.dim() == rank and "dim" not in args:
        return a  # a reduction op with no dim argument that keeps the shape (cumulative ones)
    dims = _dims(args.get("dim"), rank)
    if a in dims:
        return None
    return a if args.get("keepdim", False) else _removed(a, dims)


def _getitem(node: fx.Node) -> Axes:
    """An element of a multi-output op: a split's pieces keep the axes, unbind removes one, a
    normaliser's or attention's output (element 0) has the op's own."""
    src = node.args[0]
    if not isinstance(src, fx.Node):
        return ()
    name = base_name(src)
    first = src.args[0] if src.args else None
    if name in _SPLITS and isinstance(first, fx.Node):
        return feature_axes(first)
    if name == "unbind" and isinstance(first, fx.Node):
        rank = _rank(first)
        if rank is None:
            return ()
        d = _norm(named_args(src).get("dim", 0), rank)
        return tuple(r for a in feature_axes(first) if (r := _removed(a, [d])) is not None)
    if node.args[1] != 0:
        return ()
    own = _own(src, name)
    if own is not False:
        return own  # type: ignore[return-value]
    out = _val(node)
    if isinstance(first, fx.Node) and out is not None and _rank(first) == out.dim():
        return feature_axes(first)  # topk, sort, max over a dimension kept
    return ()


def _own(node: fx.Node, name: str) -> Axes | bool:
    """The axis an op fixes itself, whatever its inputs': False when it fixes none."""
    v = _val(node)
    vals = node.meta.get("val")
    rank = v.dim() if v is not None else (vals[0].dim() if isinstance(vals, (list, tuple)) and vals
                                           and isinstance(vals[0], torch.Tensor) else None)
    if rank is None:
        return False
    if name in _LAST:
        return (rank - 1,)
    if _CHANNELS.search(name):
        return (1,) if rank >= 3 else ()
    return False


def _moved_axes(node: fx.Node, name: str, src: fx.Node, axes: Axes) -> Axes | bool:
    """``src``'s feature axes after a movement or a reduction; False when ``node`` is neither."""
    args = named_args(node)
    rank = _rank(src)
    out: list[int] = []
    for a in axes:
        moved = _of_movement(node, name, src, a, args)
        if moved is False:
            if name not in _REDUCTIONS or rank is None:
                return False
            moved = _one(_of_reduction(node, a, rank, args))
        out += moved if isinstance(moved, list) else []
    return tuple(sorted(set(out)))


def _axes_of(node: fx.Node) -> Axes:
    if node.op != "call_function":
        return ()
    name = base_name(node)
    if name == "getitem":
        return _getitem(node)
    own = _own(node, name)
    if own is not False:
        return own  # type: ignore[return-value]
    out = _val(node)
    if name in ("matmul", "mm", "bmm", "baddbmm") and out is not None:
        a, b = node.args[-2:] if name == "baddbmm" else node.args[:2]
        return tuple(_one(_of_matmul(a, b, out.dim())) or ())
    if name == "einsum":
        return tuple(_one(_of_einsum(node)) or ())
    tensors = [a for a in node.all_input_nodes if _val(a) is not None or (out is None and a.meta.get(KEY))]
    if name in ("cat", "concat", "concatenate"):
        return next((f for t in tensors if (f := feature_axes(t))), ())
    if name == "stack" and out is not None:
        f = next((f for t in tensors if (f := feature_axes(t))), ())
        d = _norm(named_args(node).get("dim", 0), out.dim())
        return tuple(a + (d <= a) for a in f)
    src = node.args[0] if node.args else None
    if isinstance(src, fx.Node) and (axes := feature_axes(src)):
        moved = _moved_axes(node, name, src, axes)
        if moved is not False:
            return moved  # type: ignore[return-value]
    # elementwise, with broadcasting: every operand's axes that it does not broadcast (an outer
    # product of per-copy weights and a projection, Hunyuan-V4's hyper-connections, has both)
    if out is None:
        return next((f for t in tensors if (f := feature_axes(t))), ())
    union: set[int] = set()
    for t in tensors:
        f, v = feature_axes(t), _val(t)
        if f and v is not None and v.dim() <= out.dim():
            shift = out.dim() - v.dim()
            union.update(a + shift for a in f if not (isinstance(v.shape[a], int) and v.shape[a] == 1))
    return tuple(sorted(union))


def feature_axes(node: Any) -> Axes:
    """The axes of ``node``'s value that hold its features (non-negative; several where they
    were split, heads and head features), ``()`` where nothing fixes them."""
    if not isinstance(node, fx.Node):
        return ()
    if KEY not in node.meta:
        try:
            axes = _axes_of(node)
        except (KeyError, ValueError, IndexError, TypeError):
            axes = ()  # an op whose arguments do not read as this module expects
        v = _val(node)
        node.meta[KEY] = tuple(a for a in axes if v is None or a >= v.dim()
                               or not (isinstance(v.shape[a], int) and v.shape[a] == 1))
    return node.meta[KEY]  # type: ignore[no-any-return]


def feature_axis(node: Any) -> int | None:
    """The axis C acts over: the innermost feature axis (a head's features, not the heads)."""
    axes = feature_axes(node)
    return axes[-1] if axes else None


def over_features(node: Any) -> dict[str, Any]:
    """The ``dim`` keyword C and P_perp take for ``node``'s value: none where its features are
    last or nothing fixes them."""
    a, rank = feature_axis(node), _rank(node)
    return {"dim": a} if a is not None and rank is not None and a != rank - 1 else {}


def annotate(graph: fx.Graph) -> None:
    """Write every node's feature axis, in graph order (each from its inputs')."""
    for node in graph.nodes:
        node.meta.pop(KEY, None)
    for node in graph.nodes:
        feature_axes(node)
