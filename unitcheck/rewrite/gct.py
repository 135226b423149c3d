"""The Gauge-Canonical Transformer rewrite (seed 000) as rules over the exported FX graph.

Guided by the inferred units, in order:

1. ``residual_stream``: the chain of residual adds fed by the embedding becomes
   ``h0 = C(embedding)`` (each table canonicalised before a sum) and
   ``h <- C(h + alpha_l C(P_perp_h a))`` with a dimensionless alpha_l initialised at 1/sqrt(2L);
2. ``branch_normalisers``: a normaliser reading the canonical stream (LayerNorm, RMSNorm, or the
   hand-written ``x * rsqrt(mean(x^2) + eps) * w``) is dropped with its gain: C(h) = h on the
   canonical stream, up to the eps floor;
3. ``attention``: q and k canonicalised per head, a dimensionless per-head gain (init 1) on q,
   temperature sqrt(d_h);
4. ``activations``: the input of each non-homogeneous activation canonicalised: gelu(C(a)), or
   the normalised gate C(a) * sigmoid(C(a)) of a gated MLP;
5. ``logits``: ``gain * C(h_L) . C(W)^T / sqrt(d)`` with a dimensionless logit gain;
6. ``regression_losses``: an MSE or L1 loss of an input target divided by a constant 1 in its unit.

C and P_perp act over each value's feature axis (``layout``: the channels of a feature map, the
features of a Mamba mixer moved to axis 1). Every replacement is logged; what no rule recognised
is reported by module path and reason.
"""

from __future__ import annotations

import functools
import math
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch import nn

from .. import flex, opaque
from ..canonical import canonical, orthogonal
from ..errors import UnitcheckError
from ..fxutil import (
    MOVEMENT_OPS,
    ancestors,
    base_name,
    elementwise_extreme,
    module_path,
    module_stack,
)
from ..graphs import (
    averaged,
    is_ancestor,
    residual_adds,
    stream_source,
    topo_index,
    users_through_views,
)
from ..infer import run_inference, trace_for_inference
from ..record import record
from ..tracer import TracedGraph
from ..unitgraph import UnitGraph
from ..units import Unit
from .joins import mixed_parts
from .layout import annotate, feature_axis, over_features
from .losses import regression_losses
from .patterns import (
    RewriteContext,
    Rule,
    attention_scores,
    describe,
    einsum_linear,
    einsum_pair,
    holds_input,
    is_size,
    scalar,
    through_casts,
    through_moves,
    users_through_casts,
)
from .variants import float_dtype

__all__ = ["GCTResult", "RewriteError", "gct_graph", "RULES"]

aten = torch.ops.aten
_NORMS = {"layer_norm", "rms_norm", "group_norm", "native_layer_norm"}
_ELEMENTWISE = {"mul", "add", "sub", "div", "pow", "tanh", "neg", "_to_copy", "clone", "alias",
                "erf", "sigmoid", "exp", "rsqrt", "sqrt", "view", "reshape", "expand", "expm1", "square",
                "abs", "softplus", "clamp", "clamp_min", "clamp_max", "where"}
# violations an elementwise function of one pre-activation makes: a unitful activation (UC202),
# exponential (UC204, xIELU's expm1) or literal (UC103, GPT-OSS's clamps and ``up + 1``)
ACTIVATION_CODES = ("UC202", "UC204", "UC103")


class RewriteError(UnitcheckError, ValueError):
    """The model cannot be rewritten (e.g. it has no residual structure)."""


@dataclass
class GCTResult:
    traced: TracedGraph
    new_params: dict[str, Any]
    log: list[str]
    unhandled: list[dict[str, str]]
    residuals: int
    residuals_rewritten: int
    dropped: list[str] = field(default_factory=list)
    seconds: float = 0.0
    declared: dict[str, str] = field(default_factory=dict)  # existing parameters declared "1"

    @property
    def complete(self) -> bool:
        return self.residuals > 0 and self.residuals_rewritten == self.residuals


# -- rules ------------------------------------------------------------------------------------


def _residuals(ctx: RewriteContext) -> list[tuple[fx.Node, fx.Node, fx.Node]]:
    return residual_adds(ctx.graph, rows=True)


def _embedding_root(node: fx.Node) -> list[fx.Node] | None:
    """The embedding lookups summed into the stream's first value, if that is what it is."""
    node = through_casts(node)
    if base_name(node) == "embedding":
        return [node]
    if base_name(node) == "add" and len(node.args) >= 2 and any(a == 0 and scalar(a) for a in node.args[:2]):
        # GPT-1 adds ``token_type_embeds = 0`` when there are no token types
        other = next(a for a in node.args[:2] if not (scalar(a) and a == 0))
        return _embedding_root(other) if isinstance(other, fx.Node) else None
    if base_name(node) == "add" and all(isinstance(a, fx.Node) for a in node.args[:2]):
        parts = [_embedding_root(a) for a in node.args[:2]]  # type: ignore[arg-type]
        if all(p is not None for p in parts):
            return [e for p in parts for e in p]  # type: ignore[union-attr]
    return None


_FUSED = ("scaled_dot_product_attention", "flex_attention")  # attention whose logits the graph does not show
_ATTENTION = {*_FUSED, "softmax", "_softmax", "_safe_softmax"}


def _branch_nodes(part: fx.Node, stream: fx.Node) -> set[fx.Node]:
    """The nodes a branch computes from the stream (back from ``part``, not past ``stream``)."""
    order = topo_index(part.graph)
    seen, stack = {part}, [part]
    while stack:
        n = stack.pop()
        for p in n.all_input_nodes:
            if p is not stream and p not in seen and order[p] > order[stream] and is_ancestor(stream, p, order):
                seen.add(p)
                stack.append(p)
    return seen


def _attends(node: fx.Node) -> bool:
    """Fused attention, or a softmax whose weights multiply values (an MoE router's softmax
    feeds a top-k instead)."""
    name = base_name(node)
    if name in _FUSED:
        return True
    return name in _ATTENTION and any(base_name(u) in ("matmul", "bmm", "einsum", "mm", "baddbmm")
                                      for u in users_through_views(node))


# the names of modules that mix tokens without a softmax the graph shows: linear and delta-rule
# attention (BailingHybrid's ``self_attn``, Qwen3-Next's ``linear_attn``), state-space mixers
_ATTENTION_NAMES = re.compile(r"attn|attention", re.IGNORECASE)
_MIXER_NAMES = re.compile(r"mixer|mamba|ssm|rglru|recurren|temporal|retention|rwkv", re.IGNORECASE)
_NORM_NAMES = re.compile(r"norm|(^|_)ln", re.IGNORECASE)


def _branch_kind(part: fx.Node, stream: fx.Node, here: str, alone: bool) -> str:
    """What the branch computes, for the name of its residual step: ``attn`` when it attends
    (softmax weights on values, or the module it runs in is named for attention), ``mixer`` for a
    state-space or recurrent mixer, else ``mlp``; whatever the module that last touched it is
    called (a dropout, an output projection). The module is the branch's outermost one that
    does not hold the add, normalisers aside (Llama's MLP reads ``post_attention_layernorm``),
    else the module the add is in when it holds no other residual add (Mamba's skip term
    ``y + x D`` inside its mixer; a block that holds both adds says nothing of either)."""
    nodes = _branch_nodes(part, stream)
    if any(_attends(n) for n in nodes):
        return "attn"
    parts = here.split(".") if here else []
    holders = {".".join(parts[:i]) for i in range(len(parts) + 1)}
    names: set[str] = set()
    inside: set[str] = set()
    for n in nodes:
        stack = module_stack(n)
        labels = [(path, f"{path.rsplit('.', 1)[-1]} {cls}") for path, cls in stack]  # attribute and class
        outer = next((label for path, label in labels if path not in holders), None)
        if outer is not None and not _NORM_NAMES.search(outer):
            names.add(outer)
        if alone:
            inside.update(label for path, label in labels if path == here)
    for text in (" ".join(sorted(names)), " ".join(sorted(inside))):
        if _ATTENTION_NAMES.search(text):
            return "attn"
        if _MIXER_NAMES.search(text):
            return "mixer"
    return "mlp"


def _submodule_branch(n: fx.Node, stream: fx.Node, here: str) -> bool:
    """Is ``n`` computed from the stream in another module than ``here`` and its parents (a
    submodule or one beside it), not inline? (The test ``graphs.residual_pair`` makes.)"""
    return any((p := module_path(m)) != here and p != "" and not here.startswith(p + ".")
               for m in _branch_nodes(n, stream))


def _erased(node: fx.Node) -> bool:
    return bool(getattr(node, "_erased", False))


def _rewritten_branch(add: fx.Node) -> fx.Node | None:
    """The branch of a residual add whose recorded branch an earlier rewrite replaced: of its
    two operands, the one computed from the other."""
    a, b = add.args[:2]
    if not (isinstance(a, fx.Node) and isinstance(b, fx.Node)):
        return None
    order = topo_index(add.graph)
    return b if is_ancestor(a, b, order) else a if is_ancestor(b, a, order) else None


def _later_parts(add: fx.Node, stream: fx.Node, here: str) -> tuple[fx.Node, list[fx.Node]]:
    """``(h + attn(ln h)) + mlp(ln h)``, as Cohere writes a parallel block: the outermost add
    and the branches added after the first, each computed from the stream."""
    top, parts = add, []
    while len(top.users) == 1:
        u = next(iter(top.users))
        if base_name(u) != "add" or len(u.args) < 2 or u.kwargs.get("alpha") or module_path(u) != here:
            break
        other = u.args[1] if u.args[0] is top else u.args[0]
        order = topo_index(u.graph)
        if not (isinstance(other, fx.Node) and is_ancestor(stream, other, order)
                and not is_ancestor(top, other, order) and _submodule_branch(other, stream, here)):
            break
        parts.append(other)
        top = u
    return top, parts


def _branch_parts(branch: fx.Node, stream: fx.Node, here: str) -> list[fx.Node]:
    """The branches summed into one residual add: ``h + (attn(ln h) + mlp(ln h))`` in parallel
    blocks (Falcon, Phi, GPT-J) has two, each computed from the stream in a submodule of the
    add's module (a term computed inline, such as ``0.5 * h``, is not a branch of its own)."""
    order = topo_index(branch.graph)
    summed = through_casts(branch)  # a copy of the sum (a lowered graph clones it) is the sum
    if base_name(summed) == "add" and len(summed.args) >= 2 and not summed.kwargs.get("alpha") \
            and all(isinstance(a, fx.Node) and is_ancestor(stream, a, order) and _submodule_branch(a, stream, here)
                    for a in summed.args[:2]):
        return [p for a in summed.args[:2] for p in _branch_parts(a, stream, here)]  # type: ignore[arg-type]
    return [branch]


def residual_stream(ctx: RewriteContext) -> None:
    """h0 = C(sum of C(table lookups)); h <- C(h + sum_i alpha_i C(P_perp_h a_i)) at every
    residual add, one term per branch summed into it (one, or attention and MLP in parallel)."""
    residuals = _residuals(ctx)
    ctx.state["residuals"] = len(residuals)
    if not residuals:
        return
    alpha0 = 1.0 / math.sqrt(len(residuals))  # 1/sqrt(2L): two residual adds per layer
    canon: dict[fx.Node, fx.Node] = {}
    names: set[str] = set()
    per_module = Counter(module_path(add) for add, _, _ in residuals)
    done = 0
    for add, _, branch in residuals:
        if _erased(branch) and not _erased(add):  # the branch was itself a residual add, rewritten
            branch = _rewritten_branch(add)  # type: ignore[assignment]  # (BLT: h + (attn(h) + h))
        if _erased(add) or branch is None:
            ctx.skip(module_path(add), f"residual add {add.name}: an earlier residual's rewrite took in its "
                                       "operands, and which one is the stream is no longer clear")
            continue
        # earlier rewrites replaced the stream operand: read it from the add as it is now
        stream = add.args[1] if add.args[0] is branch else add.args[0]
        # MiniMax's constant scaling is subsumed by alpha; learned positions the branch reads are not
        root = stream_source(stream, read_by=branch)  # type: ignore[arg-type]
        h = canon.get(root)
        if h is None:
            h = _canonical_root(ctx, root)
            if stream is not root and through_casts(stream) is h:  # type: ignore[arg-type]
                # a normaliser computed in float32 and cast back (``.type_as(x)``): the stream is
                # the value cast back, in the model's dtype, not the float32 one
                h = stream  # type: ignore[assignment]
            canon[root] = h
        here = module_path(add)
        step_size = functools.partial(_step_size, ctx, names, alpha0, here, per_module[here] == 1)
        if base_name(add) == "scatter_add":
            if (new := _chosen_rows_update(ctx, add, h, branch, step_size)) is not None:
                canon[new] = new
                done += 1
            continue
        top, later = _later_parts(add, h, here)
        parts = _branch_parts(branch, h, here) + later
        acc, terms, last = h, [], top
        for part in parts:
            reads = h  # a branch of a stream whose copies are averaged reads them before the average
            if len(_branch_nodes(part, h)) == 1 and (copies := averaged(root)) is not None:
                reads = copies
            name, alpha = step_size(part, reads)
            acc = last = _plus_update(ctx, acc, part, h, alpha, last, add)
            terms.append(f"{name} * C(P_perp_h {describe(part)})")
        new = ctx.call(canonical, (acc,), after=last, like=add)
        top.replace_all_uses_with(new)
        while top is not add:  # the adds of later parallel branches, outermost first
            inner = next(a for a in top.args if isinstance(a, fx.Node) and (a is add or base_name(a) == "add"
                                                                             and _feeds(add, a)))
            ctx.graph.erase_node(top)
            top = inner
        ctx.graph.erase_node(add)
        canon[new] = new
        done += 1
        what = describe(branch) if len(parts) == 1 else " + ".join(describe(p) for p in parts)
        ctx.note("residual_stream", f"add(stream, {what})",
                 f"C(h + {' + '.join(terms)}) [alpha_0 = {alpha0:.4f}]")
    ctx.state["rewritten"] = done
    ctx.state["stream"] = set(canon.values())


def _plus_update(ctx: RewriteContext, acc: fx.Node, part: fx.Node, h: fx.Node, alpha: fx.Node, after: fx.Node,
                 like: fx.Node) -> fx.Node:
    """``acc + alpha * C(P_perp_h part)``, inserted after ``after``: one term of GCT's residual
    update (of the whole stream, or of the rows a scatter chose)."""
    p = ctx.call(orthogonal, (part, h), after=after, like=like)
    c = ctx.call(canonical, (p,), after=p, like=like)
    s = ctx.call(aten.mul.Tensor, (alpha, c), after=c, like=like)
    return ctx.call(aten.add.Tensor, (acc, s), after=s, like=like)


def _step_size(ctx: RewriteContext, names: set[str], alpha0: float, here: str, alone: bool, part: fx.Node,
               reads: fx.Node) -> tuple[str, fx.Node]:
    """A new alpha_l for the branch ``part`` (named for what it computes, unique) and its node."""
    base = f"{here + '.' if here else ''}alpha_{_branch_kind(part, reads, here, alone)}"
    name, i = base, 1
    while name in names:
        name, i = f"{base}_{i}", i + 1
    names.add(name)
    return name, ctx.param(name, torch.tensor(alpha0), "residual step size alpha_l, init 1/sqrt(2L)")


def _whole_rows(index: Any, h: fx.Node) -> bool:
    """Does a scatter's index move whole rows of the stream (one position per row, expanded over
    the features, as ``idx[..., None].expand(B, k, D)`` makes it)?"""
    iv, hv = (getattr(n, "meta", {}).get("val") for n in (index, h))
    if not (isinstance(iv, torch.Tensor) and isinstance(hv, torch.Tensor)) or iv.size(-1) != hv.size(-1):
        return False
    source = index.args[0] if base_name(index) == "expand" else None
    sv = getattr(source, "meta", {}).get("val")
    return bool(iv.stride(-1) == 0 or (isinstance(sv, torch.Tensor) and sv.size(-1) == 1))


def _chosen_rows_update(ctx: RewriteContext, add: fx.Node, h: fx.Node, branch: fx.Node,
                        step_size: Callable[[fx.Node, fx.Node], tuple[str, fx.Node]]) -> fx.Node | None:
    """``scatter_add(h, dim, idx, u)`` -> ``scatter(h, dim, idx, C(h_i + alpha C(P_perp_{h_i} u)))``
    with ``h_i = gather(h, dim, idx)``: the residual update of the chosen rows, the others passed
    through (every row stays canonical). The rows must be distinct, as top-k's are: where an
    index repeats, ``scatter_add`` summed the updates and ``scatter`` keeps one."""
    dim, index = add.args[1], add.args[2]
    rank = getattr(h.meta.get("val"), "ndim", None)
    if over_features(h) or rank is None or not isinstance(dim, int) or dim % rank == rank - 1 \
            or not isinstance(index, fx.Node) or not _whole_rows(index, h):
        ctx.skip(module_path(add), f"residual scatter_add {add.name}: it does not add whole rows of the stream "
                                   "(an index expanded over the last axis, the features), so no row has an update")
        return None
    name, alpha = step_size(branch, h)
    rows = ctx.call(aten.gather.default, (h, dim, index), after=add, like=add)
    rows.meta["val"] = branch.meta.get("val")
    acc = _plus_update(ctx, rows, branch, rows, alpha, rows, add)
    updated = ctx.call(canonical, (acc,), after=acc, like=add)
    new = ctx.call(aten.scatter.src, (h, dim, index, updated), after=updated, like=add)
    new.meta["val"] = add.meta.get("val")
    add.replace_all_uses_with(new)
    ctx.graph.erase_node(add)
    ctx.note("residual_stream", f"scatter_add(stream, {describe(branch)})",
             f"scatter(h, {dim}, idx, C(h_i + {name} * C(P_perp_h_i {describe(branch)}))), h_i = gather(h, {dim}, idx): "
             "a residual update of the chosen rows, the others passed through")
    return new


def _peel_normaliser(node: fx.Node) -> fx.Node:
    """What a normaliser (and casts, dropout) applied to the stream input reads: BERT's
    ``LayerNorm(word + position + token_type)`` peels to the sum."""
    while True:
        n = through_casts(node)
        if base_name(n) == "getitem" and isinstance(n.args[0], fx.Node) and base_name(n.args[0]) == "native_layer_norm":
            n = n.args[0]
        if base_name(n) in _NORMS and isinstance(n.args[0], fx.Node):
            n = n.args[0]
        if n is node:
            return n
        node = n


def _feature_map(root: fx.Node) -> str:
    """What the log says of a stream whose features are not its last axis (a ResNet's, a
    UNet's, ConvNeXt's feature maps between blocks: their channels), or of a feature map whose
    channels nothing in the graph fixes (C then acts over the last axis)."""
    val = root.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dim() < 3:
        return ""
    axis = feature_axis(root)
    if axis is not None and axis != val.dim() - 1:
        return f" (a {val.dim()}-d feature map: C acts over its channels, axis {axis})"
    if axis is None and val.dim() >= 4:
        return f" (a {val.dim()}-d value whose feature axis nothing fixes: C acts over its last axis)"
    return ""


def _canonical_root(ctx: RewriteContext, root: fx.Node) -> fx.Node:
    """h0 = C(sum of C(each embedding table)); a normaliser of the sum (post-LN encoders) is
    replaced with it, its gain dropped as on the stream."""
    core = _peel_normaliser(root)
    tables = _embedding_root(core)
    if tables is not None and (len(tables) > 1 or core is not root):
        parts = [ctx.call(canonical, (e,), after=e, like=e) for e in tables]
        acc = parts[0]
        last = max(parts, key=lambda n: topo_index(ctx.graph)[n])
        for p in parts[1:]:
            acc = ctx.call(aten.add.Tensor, (acc, p), after=last, like=root)
            last = acc
        h0 = ctx.call(canonical, (acc,), after=acc, like=root)
        what = " + ".join(f"C({describe(e)})" for e in tables)
        ctx.note("residual_stream", f"stream input {describe(root)}", f"h0 = C({what})")
    else:
        summed = _embedding_sum_below(core)
        if summed is not None:  # ELECTRA, DeBERTa: the sum feeds the stream input indirectly
            _canonical_sum(ctx, summed)
        h0 = ctx.call(canonical, (root,), after=root, like=root)
        ctx.note("residual_stream", f"stream input {describe(root)}", "h0 = C(stream input)" + _feature_map(root))
    root.replace_all_uses_with(h0, delete_user_cb=lambda u: u is not h0 and not _feeds(u, h0))
    return h0


def _embedding_sum_below(node: fx.Node, depth: int = 8) -> fx.Node | None:
    """A sum of embedding tables the stream input is computed from through normalisers, a
    projection (ELECTRA) or a padding mask (DeBERTa's ``embeddings * mask``)."""
    n = node
    for _ in range(depth):
        n = through_casts(n)
        tables = _embedding_root(n)
        if tables is not None:
            return n if len(tables) > 1 else None
        if base_name(n) == "getitem" and isinstance(n.args[0], fx.Node) and base_name(n.args[0]) == "native_layer_norm":
            n = n.args[0]
        if base_name(n) in (*_NORMS, "linear", "mul") and isinstance(n.args[0], fx.Node):
            n = n.args[0]
        else:
            return None
    return None


def _canonical_sum(ctx: RewriteContext, summed: fx.Node) -> None:
    """The sum of tables becomes C(sum of C(table)) where it is (each table its own units)."""
    tables = _embedding_root(summed) or []
    parts = [ctx.call(canonical, (e,), after=e, like=e) for e in tables]
    acc, last = parts[0], max(parts, key=lambda n: topo_index(ctx.graph)[n])
    for p in parts[1:]:
        acc = last = ctx.call(aten.add.Tensor, (acc, p), after=last, like=summed)
    new = ctx.call(canonical, (acc,), after=acc, like=summed)
    summed.replace_all_uses_with(new, delete_user_cb=lambda u: u is not new and not _feeds(u, new))
    what = " + ".join(f"C({describe(e)})" for e in tables)
    ctx.note("residual_stream", f"embedding sum {describe(summed)}", f"C({what})")


def _feeds(node: fx.Node, target: fx.Node) -> bool:
    """Is ``node`` on the way into ``target`` (part of h0's own computation)?"""
    stack, seen = [target], set()
    while stack:
        n = stack.pop()
        if n is node:
            return True
        for p in n.all_input_nodes:
            if p not in seen:
                seen.add(p)
                stack.append(p)
    return False


def _users(node: fx.Node) -> list[fx.Node]:
    """Consumers of a value, ignoring metadata assertions."""
    return [u for u in node.users if base_name(u) != "_assert_tensor_metadata"]


def _rms_pattern(u: fx.Node, h: fx.Node) -> fx.Node | None:
    """x * rsqrt(mean(x^2) + eps) [* w]: return the normaliser's last node, starting at pow."""
    if base_name(u) != "pow" or u.args[1] != 2:
        return None
    nxt = _users(u)
    if len(nxt) != 1 or base_name(nxt[0]) != "mean":
        return None
    add = _users(nxt[0])
    if len(add) != 1 or base_name(add[0]) != "add":
        return None
    rs = _users(add[0])
    if len(rs) != 1 or base_name(rs[0]) != "rsqrt":
        return None
    muls = [m for m in _users(rs[0]) if base_name(m) == "mul"]
    other = next((a for a in muls[0].args if a is not rs[0]), None) if len(muls) == 1 else None
    if not isinstance(other, fx.Node) or through_casts(other) is not h:
        return None
    out = muls[0]
    while True:  # a cast back and a gain multiply (either order) belong to the normaliser
        users = _users(out)
        if len(users) != 1:
            break
        v = users[0]
        if base_name(v) in ("_to_copy", "to", "type_as"):
            out = v
            continue
        if base_name(v) == "mul" and any(isinstance(a, fx.Node) and a.op in ("placeholder", "get_attr") for a in v.args):
            out = v
        break
    return out


def branch_normalisers(ctx: RewriteContext) -> None:
    """A normaliser applied to the canonical stream is dropped (C(h) = h up to eps); so is one
    that reads the stream only once the one before it is gone (a post-norm layer's norm, then
    its stack's final norm)."""
    for h in list(ctx.state.get("stream", ())):
        if over_features(h):  # C acts over a feature map's channels, these norms over its last axis
            continue
        todo = list(users_through_casts(h))
        while todo:
            u = todo.pop(0)
            if base_name(u) in _NORMS:
                end = u
                if base_name(u) == "native_layer_norm":
                    end = next(x for x in u.users if x.args[1] == 0)
            else:
                end = _rms_pattern(u, h)  # type: ignore[assignment]
                if end is None:
                    continue
            readers = list(users_through_casts(end))
            end.replace_all_uses_with(h)
            todo += readers
            ctx.note("branch_normalisers", describe(u), "identity on the canonical stream (gain dropped)")




def attention(ctx: RewriteContext) -> None:
    """SDPA(q, k, v) -> SDPA(C(q) * g_h, C(k), v, scale=1/sqrt(d_h)) with g_h init 1; the same
    for flex_attention, whose score function then modifies dimensionless logits."""
    taken: set[str] = set()
    for n in list(ctx.graph.nodes):
        if base_name(n) not in _FUSED:
            continue
        q, k = n.args[0], n.args[1]
        qv = q.meta.get("val")  # type: ignore[union-attr]
        if not isinstance(qv, torch.Tensor) or qv.dim() != 4:
            ctx.skip(module_path(n), "attention with queries that are not (batch, heads, tokens, dim)")
            continue
        heads, dh = int(qv.shape[1]), int(qv.shape[-1])
        mod = module_path(n)
        name = f"{mod + '.' if mod else ''}gain"
        i = 1
        while name in taken:
            name, i = f"{mod + '.' if mod else ''}gain_{i}", i + 1
        taken.add(name)
        gain = ctx.param(name, torch.ones(heads), "per-head attention gain, init 1")
        with ctx.graph.inserting_before(n):
            cq = ctx.graph.call_function(canonical, (q,))
            g4 = ctx.graph.call_function(aten.view.default, (gain, [1, heads, 1, 1]))
            ck = ctx.graph.call_function(canonical, (k,))
        cq.meta["val"] = qv
        qg = ctx.call(aten.mul.Tensor, (cq, g4), after=g4, like=n)  # the gain in the queries' dtype
        for new in (cq, g4, ck):
            new.meta.update({k_: v for k_, v in n.meta.items() if k_ in ("nn_module_stack", "stack_trace")})
        args = list(n.args)
        args[0], args[1] = qg, ck
        kwargs = dict(n.kwargs)
        if base_name(n) == "flex_attention":
            args[flex.SCALE] = 1.0 / math.sqrt(dh)
        else:
            kwargs["scale"] = 1.0 / math.sqrt(dh)
        n.args, n.kwargs = tuple(args), kwargs
        what = "SDPA" if base_name(n) == "scaled_dot_product_attention" else "flex_attention"
        ctx.note("attention", describe(n), f"{what}(C(q) * {name}, C(k), v), temperature sqrt({dh})")


def _sdpa_mask(n: fx.Node) -> Any:
    return n.args[3] if len(n.args) > 3 else n.kwargs.get("attn_mask")


def _unitful(n: Any) -> bool:
    u = record(n).unit if isinstance(n, fx.Node) else None
    return isinstance(u, Unit) and not u.is_dimensionless


def _contractions(ctx: RewriteContext, mask: fx.Node, memo: dict[fx.Node, bool]) -> list[fx.Node] | None:
    """The products of data with a parameter bank that a unitful mask is made of, walking up
    through its unitful operands (gathers, fills, selects, moves); None where the way ends at a
    unitful value that is no such product (a unit the rule does not know how to remove)."""
    def product(n: fx.Node) -> bool:
        x, t = (n.args + (None, None))[:2]
        return base_name(n) in ("matmul", "linear", "mm", "bmm") and isinstance(x, fx.Node) \
            and isinstance(t, fx.Node) and holds_input(ctx, x, memo) and not holds_input(ctx, t, memo)

    def unitful_inputs(n: fx.Node) -> list[fx.Node]:
        return [] if product(n) else [p for p in n.all_input_nodes if _unitful(p) and not is_size(p)]

    walked = ancestors([mask], unitful_inputs)
    if any(not product(n) and not unitful_inputs(n) and holds_input(ctx, n, memo) for n in walked - {mask}):
        return None
    return sorted((n for n in walked if product(n)), key=lambda n: n.name)  # a set's order is not stable


def attention_bias(ctx: RewriteContext) -> None:
    """SDPA(q, k, v, mask) whose additive mask is computed from the stream (Inkling's
    ``gather(r_proj(h) @ bank)`` by distance): the data side of each product with a parameter
    bank is canonical over the contracted dimension (per head), and the bank's parameters are
    declared dimensionless, as a logit bias's are. A unitful mask of parameters alone (T5's
    relative-position logits, computed once and shared by every layer) has its parameters
    declared dimensionless."""
    memo: dict[fx.Node, bool] = {}
    for n in list(ctx.graph.nodes):
        if base_name(n) != "scaled_dot_product_attention":
            continue
        mask = _sdpa_mask(n)
        if not isinstance(mask, fx.Node) or not _unitful(mask):
            continue
        products = _contractions(ctx, mask, memo)
        if products is None:
            ctx.skip(module_path(n), "an attention bias whose unit comes from no product of the stream with parameters")
            continue
        if not products:  # a bias of parameters alone (T5's shared relative-position logits)
            tables = _float_parameters(ctx, [mask])
            if not tables:
                ctx.skip(module_path(n), "an attention bias with no parameter bank to declare")
                continue
            for name in tables:
                ctx.declare(name)
            ctx.note("attention_bias", f"{describe(n)} mask", f"a bias of parameters alone (declared dimensionless: "
                     f"{', '.join(tables)})")
            continue
        banks = _parameters_of(ctx, [t for p in products for t in p.args[1:2] if isinstance(t, fx.Node)])
        if not banks:
            ctx.skip(module_path(n), "an attention bias with no parameter bank to declare")
            continue
        read = ", ".join(f"C({describe(p.args[0])}) . bank" for p in products)  # type: ignore[arg-type]
        for p in products:
            x = p.args[0]
            cx = ctx.call(canonical, (x,), after=x, like=p)  # type: ignore[arg-type]
            p.replace_input_with(x, cx)  # type: ignore[arg-type]
        for name in banks:
            ctx.declare(name)
        ctx.note("attention_bias", f"{describe(n)} mask",
                 f"{read} (declared dimensionless: {', '.join(banks)})")


def explicit_attention(ctx: RewriteContext) -> None:
    """softmax(scale * q @ k^T + mask) @ v -> the same with C(q) and C(k) per head: the logits
    become dimensionless, the code's own temperature and mask stay (eager BLOOM, Gemma-2,
    DeBERTa, hand-written attention)."""
    done: set[fx.Node] = set()
    memo: dict[fx.Node, bool] = {}
    pooled: dict[fx.Node, list[fx.Node]] = {}
    for n in list(ctx.graph.nodes):
        if record(n).violation != "UC201" or base_name(n) in _FUSED:
            continue
        terms: list[fx.Node] = []
        path: list[fx.Node] = []
        s = attention_scores(n.args[0] if n.args else None, lambda x: not holds_input(ctx, x, memo), terms, path)
        if s is None:  # weights from one projection pool values (a mix of DeepSeek-V4's stream copies)
            if not _weights_projection(ctx, n, memo, pooled):
                ctx.skip(module_path(n), "attention logits that are neither a product of queries and keys "
                                         "nor one projection")
            continue
        ctx.state.setdefault("logits", set()).update(p for p in path if p is not s)
        if s in done:
            continue
        done.add(s)
        pair = einsum_pair(s)  # both operands hold the contracted dimension last
        qi, ki = (1, 2) if base_name(s) == "baddbmm" else (0, 1)
        q, kt = pair if pair is not None else (s.args[qi], s.args[ki])
        factor = _scaled_by(q)
        with ctx.graph.inserting_before(s):
            cq = ctx.graph.call_function(canonical, (q,))
            new = [cq]
            if factor is not None:  # C(q * s) = C(q): the code's temperature goes back on
                cq = ctx.graph.call_function(aten.mul.Tensor, (cq, factor))
                new.append(cq)
            if pair is not None:
                new.append(ckt := ctx.graph.call_function(canonical, (kt,)))
            else:
                k = ctx.graph.call_function(aten.transpose.int, (kt, -1, -2))
                ck = ctx.graph.call_function(canonical, (k,))
                ckt = ctx.graph.call_function(aten.transpose.int, (ck, -1, -2))
                new += [k, ck, ckt]
        for node in new:
            node.meta.update({k_: v for k_, v in s.meta.items() if k_ in ("nn_module_stack", "stack_trace")})
        if pair is not None:
            s.args = (s.args[0], [cq, ckt])
        else:
            args = list(s.args)
            args[qi], args[ki] = cq, ckt
            s.args = tuple(args)
        params = _float_parameters(ctx, terms)
        tables = _query_terms(ctx, q, terms) if isinstance(q, fx.Node) else []
        for p in params + tables:
            ctx.declare(p)
        kept = f"; logit biases and sinks declared dimensionless: {', '.join(params)}" if params else ""
        kept += (f"; C(q) in the terms that contract it with tables, declared dimensionless: {', '.join(tables)}"
                 if tables else "")
        read = "C(q) . C(k)^T" if factor is None else f"C(q) * {factor:.6g} . C(k)^T (the query's scale)"
        ctx.note("explicit_attention", describe(s), f"{read} (the code's scale and mask kept{kept})")
    for src, terms in pooled.items():
        _dimensionless_router(ctx, src, _parameters_of(ctx, terms))


def _query_terms(ctx: RewriteContext, q: fx.Node, terms: list[fx.Node]) -> list[str]:
    """Terms added to the scores that contract the query itself with parameter tables (SAM's
    decomposed relative positions, ``einsum(q, R_h) + einsum(q, R_w)``): where such a term reads
    the query (or the query before its scale and head moves), it reads C(query), and the tables
    are declared dimensionless, so the term is as the scores are. Returns the tables."""
    chain: list[fx.Node] = []
    n: Any = q
    while isinstance(n, fx.Node):
        chain.append(n)
        if base_name(n) not in MOVEMENT_OPS and not (base_name(n) == "mul" and _scaled_by(n) is not None):
            break
        n = n.args[0]
    width = q.meta["val"].shape[-1] if isinstance(q.meta.get("val"), torch.Tensor) else None
    own = set(_parameters_of(ctx, [q]))  # the query's own weights (every node of the chain has them)
    found: set[str] = set()
    for c in chain:
        val = c.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.shape[-1] != width:
            continue
        for u in [u for u in c.users if u not in chain]:
            reads = [t for t in terms if _feeds(u, t)]
            if not reads:
                continue
            tables = set(_parameters_of(ctx, reads)) - own
            if not tables:
                continue
            cc = ctx.call(canonical, (c,), after=c, like=c)
            u.replace_input_with(c, cc)
            found |= tables
    return sorted(found)


def _scaled_by(q: Any) -> float | None:
    """The constant a query was scaled by before its heads were split (XGLM's
    ``q_proj(h) * d^-0.5``), looking through moves; None if it was not."""
    q = through_moves(q)
    factor = q.args[1] if isinstance(q, fx.Node) and base_name(q) == "mul" and len(q.args) == 2 else None
    return float(factor) if isinstance(factor, (int, float)) and scalar(factor) else None


# what a statistic of logits passes through (logsumexp's pieces, a max, moves): the result is
# in the logits' unit; a product with values (softmax(x) @ v) is not among them
_STATISTIC = {"amax", "max", "logsumexp", "sub", "add", "exp", "log", "sum", "squeeze", "unsqueeze", "getitem",
              "view", "reshape", "expand", "_to_copy", "to", "type_as", "clone", "abs", "where", "full_like",
              "neg", "mul", "div", "masked_fill", "eq", "isinf", "scalar_tensor"}


def _of_logits(ctx: RewriteContext, n: fx.Node, memo: dict[fx.Node, bool]) -> bool:
    """Is the activation's argument computed from attention logits the explicit attention rule
    rewrote (and parameter terms) through statistics alone? GraniteMoE-SWA's sink scaling
    ``sigmoid(logsumexp(logits) - sink)``: dimensionless once the logits are."""
    logits = ctx.state.get("logits", set())
    if not logits:
        return False
    stack, seen = [p for p in n.all_input_nodes], set()
    while stack:
        p = stack.pop()
        if p in seen or p in logits or is_size(p) or not holds_input(ctx, p, memo):
            continue
        seen.add(p)
        if base_name(p) not in _STATISTIC or p.op != "call_function":
            return False
        stack.extend(p.all_input_nodes)
    return True


def _parameters_of(ctx: RewriteContext, terms: list[fx.Node]) -> list[str]:
    """The parameters (qualified names) parameter terms are computed from."""
    leaves = ctx.ug.traced.leaves
    found = (leaves.get(n.name) for n in ancestors(terms) if n.op == "placeholder")
    return sorted({leaf.name for leaf in found if leaf is not None and leaf.kind == "param"})


_PRODUCTS = {"linear", "matmul", "mm", "bmm", "baddbmm", "addmm", "einsum", "conv1d", "conv2d", "convolution"}


def _float_parameters(ctx: RewriteContext, terms: list[fx.Node]) -> list[str]:
    """The parameters of terms added to attention scores that are tables or constants of their
    own (a relative position bias looked up at computed indices, a sink logit), not looking past
    integer values; a term computed by a product from data (a projection of the stream) gives
    none, its unit is not the rewrite's to declare."""
    leaves, out = ctx.ug.traced.leaves, set()
    for term in terms:
        found: set[str] = set()
        stack, seen = [term], {term}
        while stack:
            n = stack.pop()
            val = n.meta.get("val")
            if not (isinstance(val, torch.Tensor) and val.is_floating_point()):
                continue
            if base_name(n) in _PRODUCTS:
                found = set()
                break
            leaf = leaves.get(n.name) if n.op == "placeholder" else None
            if leaf is not None and leaf.kind == "param":
                found.add(leaf.name)
            for p in n.all_input_nodes:
                if p not in seen:
                    seen.add(p)
                    stack.append(p)
        out |= found
    return sorted(out)


def _elementwise(n: fx.Node) -> bool:
    return n.op == "call_function" and (base_name(n) in _ELEMENTWISE or elementwise_extreme(n))  # xIELU's min(x, eps)


def _condition(n: fx.Node) -> bool:
    """A boolean value: what ``where`` selects by, not an operand."""
    val = n.meta.get("val")
    return isinstance(val, torch.Tensor) and val.dtype == torch.bool


def _pre_activation(ctx: RewriteContext, n: fx.Node, memo: dict[fx.Node, bool],
                    stop: fx.Node | None = None) -> tuple[fx.Node | None, list[fx.Node]]:
    """The one input-dependent value an activation's argument is an elementwise function of,
    and the parameter terms combined with it (a gain, a bias: ``sigmoid(g * s^2)``,
    ``softplus(dt + dt_bias)``). Sizes (a view's symbolic shape) are neither."""
    mod = module_path(n)
    stack, seen, sources = [n], {n}, set()
    while stack:
        cur = stack.pop()
        for p in cur.all_input_nodes:
            if p in seen or _condition(p):
                continue  # a condition (``where(x > 0, ...)``) selects; it is not an operand
            seen.add(p)
            if p is not stop and module_path(p) == mod and _elementwise(p):
                stack.append(p)
            elif isinstance(p.meta.get("val"), torch.Tensor) or p.op == "get_attr":
                sources.add(p)
    data = [s for s in sources if s.op != "get_attr" and holds_input(ctx, s, memo)]
    terms = sorted((s for s in sources if s not in data), key=lambda s: s.name)
    if len(data) > 1 and stop is None and (join := _data_join(ctx, n, memo)) is not None:
        # inputs combined inline (HY-V4's head: ``sigmoid(linear(x) * rms(x) * s + b)``): the
        # value they are combined into is the pre-activation, with the terms applied after it
        return _pre_activation(ctx, n, memo, stop=join)
    return (data[0] if len(data) == 1 else None), terms


def _data_join(ctx: RewriteContext, n: fx.Node, memo: dict[fx.Node, bool]) -> fx.Node | None:
    """Back from ``n`` through elementwise ops of its module that each take one input-dependent
    operand: the first that takes two or more, where the inputs are combined."""
    mod, cur = module_path(n), n
    while True:
        dd = [p for p in cur.all_input_nodes if holds_input(ctx, p, memo) and not _condition(p)]
        if len(dd) > 1 and cur is not n:
            return cur
        if len(dd) != 1 or module_path(dd[0]) != mod or not _elementwise(dd[0]):
            return None
        cur = dd[0]


def _caps_logits(node: fx.Node, depth: int = 8) -> bool:
    """Is this activation a soft cap of the logits (``cap * tanh(logits / cap)`` feeding the
    loss)? The logits rule makes its input dimensionless; C would undo the logit gain."""
    frontier = [node]
    for _ in range(depth):
        nxt = []
        for n in frontier:
            for u in n.users:
                if record(u).violation == "UC301":
                    return True
                if base_name(u) in MOVEMENT_OPS or (base_name(u) in ("mul", "div") and any(scalar(a) for a in u.args)):
                    nxt.append(u)
        frontier = nxt
    return False


def _declare_terms(ctx: RewriteContext, n: fx.Node, terms: list[fx.Node], what: str) -> None:
    """Declare dimensionless the parameters of ``n``'s argument not declared yet, and log them."""
    fresh = [p for p in _parameters_of(ctx, terms) if p not in ctx.declared]
    for name in fresh:
        ctx.declare(name)
    if fresh:
        ctx.note("activations", f"{base_name(n)}@{module_path(n)}", f"{what} declared dimensionless: {', '.join(fresh)}")


def activations(ctx: RewriteContext) -> None:
    """act(a) -> act(C(a)); for a gated MLP silu(C(a)) = C(a) sigmoid(C(a)), the normalised gate.
    Parameter terms combined with ``a`` stay (``sigmoid(C(g) * s^2)``, ``softplus(C(dt) +
    dt_bias)``): the lint then binds each to the unit that keeps the argument dimensionless."""
    done: set[fx.Node] = set()
    routers: set[fx.Node] = set()  # projections made dimensionless for the activations that read them
    canon: dict[fx.Node, tuple[fx.Node, fx.Node]] = {}  # a pre-activation -> (what C reads, C(a))
    memo: dict[fx.Node, bool] = {}
    for n in list(ctx.graph.nodes):
        code = record(n).violation
        if code not in ACTIVATION_CODES or _caps_logits(n) or _log_normaliser(n):
            continue  # a log-normaliser: the router rule makes its logits dimensionless
        a, terms = _pre_activation(ctx, n, memo)
        mod = module_path(n)
        if _of_logits(ctx, n, memo):  # C over a statistic's last axis would mix tokens
            if code == "UC202":
                ctx.note("activations", f"{base_name(n)}@{mod}", "unchanged: its argument is a statistic of "
                         "attention logits the attention rules made dimensionless")
            continue
        if a is None and terms and not any(holds_input(ctx, t, memo) for t in terms):
            # a function of parameters alone (DiffLlama's exp(sum(lambda_q * lambda_k))): its
            # parameters are declared dimensionless, the unit that makes its argument one
            _declare_terms(ctx, n, terms, "of parameters alone")
            continue
        if a is None:
            if code == "UC202":
                ctx.skip(mod, f"activation {base_name(n)} has no single pre-activation input")
            continue
        if a in canon and canon[a][0] in n.all_input_nodes:
            # read by activations in several modules (a UNet's time embedding, each block's SiLU)
            _read_canonical(*canon[a], n)
            ctx.note("activations", f"{base_name(n)}({describe(a)})@{mod}", f"{base_name(n)}(C(a)), the C(a) above")
            continue
        if a in done or _on_stream(ctx, a) or base_name(a) == "canonical":
            # already dimensionless; parameter terms this op adds are declared (Doge's
            # ``exp(A * softplus(C(dt)))`` after the softplus was rewritten)
            _declare_terms(ctx, n, terms, "parameter terms")
            continue
        done.add(a)
        routed = _gate_projection(a)
        if routed is not None:  # the projection's logits become dimensionless instead
            if routed not in routers:
                routers.add(routed)
                _dimensionless_router(ctx, routed, [])
            continue
        read = _under_masking_fill(a)
        ca = ctx.call(canonical, (read,), after=read, like=n)
        canon[a] = (read, ca)
        _read_canonical(read, ca, n)
        a = read
        params = _parameters_of(ctx, terms)
        for name in params:
            ctx.declare(name)
        kept = f" (parameter terms kept, declared dimensionless: {', '.join(params)})" if params else ""
        ctx.note("activations", f"{base_name(n)}({describe(a)})", f"{base_name(n)}(C(a)){kept}")


def _read_canonical(a: fx.Node, ca: fx.Node, n: fx.Node) -> None:
    """The activation ``n`` and what else its module computes from ``a`` read ``C(a)``; other
    modules' reads of ``a`` stay."""
    mod = module_path(n)
    for u in [u for u in a.users if u is not ca and (module_path(u) == mod or u is n)]:
        u.replace_input_with(a, ca)


def _under_masking_fill(a: fx.Node) -> fx.Node:
    """What a fill with -inf (or inf, NaN) masks: C over the filled value is NaN everywhere, so the
    values are canonicalised before the mask (Mamba2's ``exp(segsum)``: a cumulative sum masked
    to -inf above the diagonal)."""
    while base_name(a) == "masked_fill" and isinstance(a.args[0], fx.Node) and len(a.args) > 2 \
            and isinstance(a.args[2], float) and not math.isfinite(a.args[2]):
        a = a.args[0]
    return a


_NORMALISERS = ("logsumexp", "amax", "max")


def _statistic_of(b: Any, x: Any) -> bool:
    """Is ``b`` a statistic of ``x`` that log-normalises it (``logsumexp(x)``, ``amax(x)``), through moves?"""
    b = through_moves(b, but=("getitem",))
    if isinstance(b, fx.Node) and base_name(b) == "getitem" and isinstance(b.args[0], fx.Node):
        b = b.args[0]  # max(x, dim) returns (values, indices)
    return isinstance(b, fx.Node) and base_name(b) in _NORMALISERS and bool(b.args) and b.args[0] is x


def _log_normaliser(n: fx.Node) -> bool:
    """Is ``n`` a statistic subtracted from its own argument, a linear projection (``x -
    logsumexp(x)``: log-softmax written out, as ``torch.distributions.Categorical(logits=x)``
    does)? The projection is the interface; C of the statistic's argument alone would break the
    identity. (Inkling's router log-normalises ``logsigmoid(...)``: an activation's output, left
    to the activations rule.)"""
    x = n.args[0] if n.args else None
    src = _projection(x) if base_name(n) in _NORMALISERS else None
    return src is not None and base_name(src) == "linear" and any(
        base_name(u) == "sub" and u.args[0] is x and _statistic_of(u.args[1], x)
        for u in users_through_views(n))


_PARTS = frozenset({"split", "split_with_sizes", "chunk", "unbind", "tensor_split"})
_WEIGHTS = frozenset({"softmax", "_softmax", "_safe_softmax", "sigmoid", "tanh"})
_CANONICAL = frozenset({"canonical"})


def _every_part_normalised(split: fx.Node) -> bool:
    """Does every part of a split projection become weights (a softmax, a sigmoid gate) through
    moves, masks and scalings (DeepSeek-V4's pre, post and comb mixes)? Then the projection can be
    made dimensionless whole."""
    return all(any(base_name(u) in _WEIGHTS for u in users_through_views(part, through=_CANONICAL))
               for part in split.users)  # (a gate's argument may be canonical already: sigmoid(C(a)))


def _projection(node: Any, constant: Any = None, terms: list[fx.Node] | None = None,
                _walked: dict[fx.Node, fx.Node | None] | None = None) -> fx.Node | None:
    """The linear map a logit-like value comes from, looking through moves and casts, a scaling
    by a constant (Granite's ``logits / logits_scaling``, Cohere's ``logits * logit_scale``), a
    soft cap (Gemma-2's ``cap * tanh(logits / cap)``), the values a top-k selected, and a scaling
    by a value ``constant`` says holds no input (Dory's learned ``logits * logit_scale``), collected in ``terms``;
    a part of the projection's outputs where every part is normalised into weights, and slices of
    it written into a constant fill."""
    while isinstance(node, fx.Node):
        name = base_name(node)
        if name in ("linear", "matmul", "mm") or einsum_pair(node) is not None:
            return node
        scaled = name in ("mul", "div") and len(node.args) == 2 and scalar(node.args[1])
        if name == "getitem" and node.args[1] == 0 and isinstance(node.args[0], fx.Node) \
                and base_name(node.args[0]) in ("topk", "sort", "max", "min"):
            node = node.args[0].args[0]  # the values a top-k chose (Cohere2-MoE routes, then softmaxes)
        elif name in _PARTS and not _every_part_normalised(node):
            return None  # a fused projection whose other parts are values, not weights: not made dimensionless
        elif name in MOVEMENT_OPS or name in _PARTS or name == "tanh" or scaled:
            node = node.args[0]  # a part of a projection's outputs is a projection (by rows of W)
        elif name == "sub" and len(node.args) == 2 and _statistic_of(node.args[1], node.args[0]):
            node = node.args[0]  # log-normalised logits: a shift by their own logsumexp
        elif name == "masked_fill" or (name == "scatter" and len(node.args) == 4 and scalar(node.args[3])):
            node = node.args[0]  # entries masked out (PhiMoE's sparsemixer fills -inf below a threshold)
        elif name in ("slice_scatter", "select_scatter") and len(node.args) >= 2:
            # slices of one projection written into a constant fill (DeepSeek-V4's compressor lays
            # two windows' gates side by side in a -inf buffer): every part must read the same one
            # (a write across two axes reads its base twice: each value is walked once)
            walked = _walked if _walked is not None else {}
            found = set()
            for x in node.args[:2]:
                if isinstance(x, fx.Node) and not _filled(through_moves(x)):
                    if x not in walked:
                        walked[x] = _projection(x, constant, terms, walked)
                    found.add(walked[x])
            return found.pop() if len(found) == 1 else None
        elif name == "copy" and len(node.args) == 2:
            node = node.args[1]  # a copy into a slice writes the whole slice: its values are the source's
        elif name == "where" and len(node.args) == 3 and sum(map(_filled, node.args[1:])) == 1:
            node = next(a for a in node.args[1:] if not _filled(a))  # masked_fill as lowering writes it
        elif name == "mul" and len(node.args) == 2 and scalar(node.args[0]):
            node = node.args[1]
        elif name in ("add", "sub") and constant is not None and _one_data_operand(node, constant):
            data, bias = sorted(node.args, key=constant)  # type: ignore[arg-type]  # BART's final_logits_bias
            if terms is not None:
                terms.append(bias)  # type: ignore[arg-type]
            node = data
        elif name in ("mul", "div") and len(node.args) == 2 and constant is not None \
                and isinstance(node.args[1], fx.Node) and constant(node.args[1]):
            if terms is not None:
                terms.append(node.args[1])
            node = node.args[0]
        elif name == "mul" and len(node.args) == 2 and constant is not None \
                and isinstance(node.args[0], fx.Node) and constant(node.args[0]):
            if terms is not None:
                terms.append(node.args[0])
            node = node.args[1]
        else:
            return None
    return None


def _one_data_operand(node: fx.Node, constant: Callable[[fx.Node], bool]) -> bool:
    """Two node operands, one of them computed from the input, the other not (a bias term)."""
    args = node.args
    return len(args) == 2 and all(isinstance(a, fx.Node) for a in args) \
        and sorted(map(constant, args)) == [False, True]  # type: ignore[arg-type]


def _filled(value: Any) -> bool:
    """A constant fill: a number, or a tensor made of one (``scalar_tensor(-inf)``, ``full``)."""
    return scalar(value) or isinstance(value, fx.Node) and base_name(value) in ("scalar_tensor", "full", "full_like", "new_full")


_CHOOSE_POSITIONS = ("gather", "take_along_dim", "index_select")


def _gate_projection(node: Any) -> fx.Node | None:
    """The projection a gate reads where C of the gate's argument would be wrong, through moves
    and casts; None otherwise:

    - top-k values placed back into a constant fill (Llama 4's ``full_like(logits,
      -inf).scatter_(1, idx, top)``, then sigmoid): C over the fill is NaN;
    - one value per token (a scalar gate on an update, Mixture-of-Depths' router score), also
      through a choice of positions (``gather(w, 1, top)``): C of one value is its sign, and C
      over the chosen positions mixes tokens."""
    selected = False
    while isinstance(node, fx.Node):
        name = base_name(node)
        if name in ("scatter", "scatter_") and len(node.args) >= 4 and isinstance(node.args[0], fx.Node) \
                and base_name(node.args[0]) in ("full", "full_like", "new_full", "fill", "zeros_like", "zeros"):
            node, selected = node.args[3], True
        elif name == "getitem" and node.args[1] == 0 and isinstance(node.args[0], fx.Node) \
                and base_name(node.args[0]) == "topk":
            node, selected = node.args[0].args[0], True
        elif name in _CHOOSE_POSITIONS or (name in MOVEMENT_OPS and name != "getitem"):
            node = node.args[0]
        else:
            break
    if not isinstance(node, fx.Node) or base_name(node) != "linear":
        return None
    val = node.meta.get("val")
    one_wide = isinstance(val, torch.Tensor) and val.dim() > 0 and val.shape[-1] == 1
    return node if selected or one_wide else None


def _stacked_projections(node: Any) -> tuple[fx.Node | None, list[fx.Node] | None]:
    """Per-position heads stacked into one logits tensor (CSM's codebook heads:
    ``stack([linear(h[:, i], W_i) for i])``): the stack, and each part's own linear projection
    (None where a part is not one)."""
    node = through_moves(node, but=("stack", "cat"))
    if not (isinstance(node, fx.Node) and base_name(node) in ("stack", "cat") and isinstance(node.args[0], (list, tuple))):
        return None, None
    parts = [_projection(p) for p in node.args[0]]
    if not parts or any(p is None or base_name(p) != "linear" for p in parts):
        return node, None
    return node, parts  # type: ignore[return-value]


def _on_stream(ctx: RewriteContext, h: Any) -> bool:
    return through_moves(h) in ctx.state.get("stream", ())


_DIMENSIONLESS = "unitcheck_dimensionless_linear"  # node.meta: a product _dimensionless_linear made


def _dimensionless_linear(ctx: RewriteContext, src: fx.Node, gain_name: str, why: str) -> str:
    """linear(h, W, b) -> gain * C(h) . C(W)^T / sqrt(d) + b, C(h) only where h is not already
    the canonical stream (an MLM head's transform, a router reading a branch)."""
    h, w = src.args[0], src.args[1]
    bias = src.args[2] if len(src.args) > 2 else None
    d = int(w.meta["val"].shape[-1])  # type: ignore[union-attr]
    gain = ctx.param(gain_name, torch.tensor(1.0), why)
    read, anchor = "C(h)", src
    if not _on_stream(ctx, h):
        h = anchor = ctx.call(canonical, (h,), after=src, like=src)
        read = f"C({describe(src.args[0])})"  # type: ignore[arg-type]
    cw = ctx.call(canonical, (w,), after=anchor, like=src)
    scores = ctx.call(aten.linear.default, (h, cw), after=cw, like=src)
    scores.meta[_DIMENSIONLESS] = True
    g = ctx.call(aten.mul.Tensor, (gain, scores), after=scores, like=src)
    out = ctx.call(aten.div.Tensor, (g, math.sqrt(d)), after=g, like=src)
    if bias is not None:
        out = ctx.call(aten.add.Tensor, (out, bias), after=out, like=src)
    src.replace_all_uses_with(out)
    ctx.graph.erase_node(src)
    return f"{gain_name} * {read} . C(W)^T / sqrt({d})"


def _as_linear(ctx: RewriteContext, src: fx.Node, memo: dict[fx.Node, bool]) -> fx.Node | None:
    """A head written as a product with a table (``h @ wte.weight.t()``, ``einsum("btd,vd->btv",
    h, W)``) as the linear map it is, in its place: ``linear(h, W)`` with W (out, in). None where
    the table is computed from the input or is not a matrix."""
    pair = einsum_pair(src)
    h, t = pair if pair is not None else (src.args + (None, None))[:2]
    val = t.meta.get("val") if isinstance(t, fx.Node) else None
    if not isinstance(h, fx.Node) or not isinstance(val, torch.Tensor) or val.dim() != 2 \
            or holds_input(ctx, t, memo):  # type: ignore[arg-type]
        return None
    if pair is not None:
        if not einsum_linear(src):
            return None
        w = t
    elif _swapped(t):  # h @ W.t(): W itself
        w = t.args[0]  # type: ignore[union-attr]
    else:  # h @ T with T (in, out)
        w = ctx.call(aten.t.default, (t,), after=t, like=src)  # type: ignore[arg-type]
        w.meta["val"] = val.t()
    with ctx.graph.inserting_before(src):
        lin = ctx.graph.call_function(aten.linear.default, (h, w))
    lin.meta.update(src.meta)
    src.replace_all_uses_with(lin)
    ctx.graph.erase_node(src)
    return lin


def _swapped(t: Any) -> bool:
    """``W.t()`` of a matrix W, as ``t``, ``transpose`` or ``permute`` writes it."""
    if not (isinstance(t, fx.Node) and t.args and isinstance(t.args[0], fx.Node)):
        return False
    name, dims = base_name(t), t.args[1:]
    if name == "permute" and isinstance(dims[0], (list, tuple)):
        dims = tuple(dims[0])
    axes = [d % 2 for d in dims if isinstance(d, int)]
    return name == "t" or name == "transpose" and axes in ([0, 1], [1, 0]) or name == "permute" and axes == [1, 0]


def logits(ctx: RewriteContext) -> None:
    """lm_head(h) -> gain * C(h) . C(W)^T / sqrt(d): the canonical stream, or C of what an MLM
    head's transform computes from it; a constant scaling or soft cap after it stays, and so does
    a learned scaling (its parameters declared dimensionless)."""
    memo: dict[fx.Node, bool] = {}
    stacks: set[fx.Node] = set()  # rewritten already: each codebook's loss reads the one stack (MusicGen)
    for n in list(ctx.graph.nodes):
        if record(n).violation != "UC301":
            continue
        terms: list[fx.Node] = []
        src = _projection(n.args[0], lambda x: not holds_input(ctx, x, memo), terms)
        stack, parts = _stacked_projections(n.args[0]) if src is None else (None, None)
        if stack in stacks:
            continue
        if parts:
            stacks.add(stack)  # type: ignore[arg-type]
            for i, part in enumerate(parts):
                name, k = f"logit_gain_{i}", 1
                while name in ctx.new_params:
                    name, k = f"logit_gain_{i}_{k}", k + 1
                ctx.note("logits", f"{describe(part)} (one of {len(parts)} stacked heads)",
                         _dimensionless_linear(ctx, part, name, "learnable logit gain, init 1"))
            continue
        if src is None:
            ctx.skip(module_path(n), "the logits are not a linear projection of the stream")
            continue
        was = describe(src)
        if base_name(src) != "linear":
            src = _as_linear(ctx, src, memo)
            if src is None:
                ctx.skip(module_path(n), "the logits are a product with a value computed from the input, not a head")
                continue
        name = "logit_gain" if "logit_gain" not in ctx.new_params else f"logit_gain_{len(ctx.new_params)}"
        after = _dimensionless_linear(ctx, src, name, "learnable logit gain, init 1")
        ctx.note("logits", was, after + _declare_kept(ctx, _parameters_of(ctx, terms)))


def router_logits(ctx: RewriteContext) -> None:
    """The softmax of an MoE router (UC203), or of other logits that feed no loss (BLT's
    entropy model: ``Categorical(logits=head(h))``, log-normalised by their own logsumexp), reads
    gain * C(h) . C(W)^T / sqrt(d)."""
    sources: dict[fx.Node, list[fx.Node]] = {}
    memo: dict[fx.Node, bool] = {}
    for n in list(ctx.graph.nodes):  # every softmax's projection first: a rewrite replaces it
        code = record(n).violation
        if not n.args or not (code == "UC203" or code in ACTIVATION_CODES and _log_normaliser(n)):
            continue
        if not _weights_projection(ctx, n, memo, sources):  # (one record for a projection normalised twice:
            ctx.skip(module_path(n), f"{base_name(n)} of a unitful value that is not a linear projection")  # PhiMoE)
    for src, terms in sources.items():
        _dimensionless_router(ctx, src, _parameters_of(ctx, terms))


def _weights_projection(ctx: RewriteContext, n: fx.Node, memo: dict[fx.Node, bool],
                        sources: dict[fx.Node, list[fx.Node]]) -> bool:
    """Is what ``n`` normalises one linear projection, through parts of its outputs and a scale
    and shift by parameters (DeepSeek-V4's hyper-connection mixes)? Recorded in ``sources`` with
    those parameters, for :func:`_dimensionless_router`."""
    terms: list[fx.Node] = []
    src = _projection(n.args[0] if n.args else None, lambda x: not holds_input(ctx, x, memo), terms)
    if src is None or base_name(src) != "linear":
        return False
    if not src.meta.get(_DIMENSIONLESS):  # made dimensionless for another normaliser already
        sources.setdefault(src, []).extend(terms)
    return True


def _dimensionless_router(ctx: RewriteContext, src: fx.Node, params: list[str]) -> None:
    name = f"{module_path(src)}_gain" if module_path(src) else "router_gain"
    after = _dimensionless_linear(ctx, src, name, "router logit gain, init 1")
    ctx.note("router_logits", describe(src), after + _declare_kept(ctx, params))


def _declare_kept(ctx: RewriteContext, params: list[str]) -> str:
    """Declare the parameters of a learned scaling kept after a projection dimensionless; what
    the log says of them."""
    for p in params:
        ctx.declare(p)
    return f" (learned scaling kept, declared dimensionless: {', '.join(params)})" if params else ""


RULES: list[Rule] = [residual_stream, branch_normalisers, mixed_parts, attention, attention_bias, explicit_attention,
                    activations, logits, router_logits, regression_losses]


# -- driver -----------------------------------------------------------------------------------


def _eliminate_dead(traced: TracedGraph) -> list[str]:
    """Erase what nothing reads; the parameters that leaves the model without. A module kept
    whole reads its own weights (the generated module holds it with them): not dropped."""
    graph = traced.graph
    graph.eliminate_dead_code()
    whole = tuple(f"{opaque.call_parts(n)[0]}." for n in graph.find_nodes(op="call_function", target=opaque.OP))
    gone = []
    for n in list(graph.nodes):
        if n.op in ("placeholder", "get_attr") and not n.users and n.name in traced.leaves:
            leaf = traced.leaves[n.name]
            if leaf.kind in ("param", "buffer", "constant"):
                gone.append(leaf.name)
                del traced.leaves[n.name]
                graph.erase_node(n)
    kept = {leaf.name for leaf in traced.leaves.values()}
    # a tied weight's unused alias is not a dropped parameter either
    return sorted(name for name in set(gone) - kept if not name.startswith(whole))


def gct_graph(model: nn.Module, example_inputs: Any, rules: list[Rule] | None = None,
              traced: TracedGraph | None = None) -> GCTResult:
    """Trace (dynamic batch and sequence) unless ``traced`` is given, infer units, and apply the
    GCT rules."""
    t0 = time.perf_counter()
    if traced is None:
        traced = trace_for_inference(model, example_inputs, dynamic=True)
    ug: UnitGraph = run_inference(traced)
    annotate(traced.graph)
    ctx = RewriteContext(ug, dtype=float_dtype(model))
    for rule in rules or RULES:
        rule(ctx)
    residuals = int(ctx.state.get("residuals", 0))
    if residuals == 0:
        raise RewriteError(
            f"{type(model).__name__} has no residual stream (no add of a stream and a branch computed "
            "from it inside a submodule): there is nothing to put on canonical coordinates"
        )
    dropped = _eliminate_dead(traced)
    traced.graph.lint()
    by_module: dict[str, int] = defaultdict(int)
    for u in ctx.unhandled:
        by_module[u["module"]] += 1
    return GCTResult(traced, dict(ctx.new_params), ctx.log, ctx.unhandled, residuals,
                     int(ctx.state.get("rewritten", 0)), dropped, time.perf_counter() - t0,
                     {k: v for k, v in ctx.declared.items() if k not in dropped})
