"""The ``mixed_parts`` rule: a tensor joined from parts with different units.

DeepSeek's multi-head latent attention builds each key from a latent part (a normalised
projection) and a positional part (another projection), by ``cat`` or by writing both into an
empty tensor slice by slice (``k[..., :a] = k_nope; k[..., a:] = k_pe``, which the graph records
as a chain of ``slice_scatter``). The lint reports the join (UC101); the rule canonicalises each
part before it is joined, as the embedding-sum rule does for summed tables:

    cat([a, b])                          ->  cat([C(a), C(b)])
    slice_scatter(slice_scatter(empty, a), b)  ->  slice_scatter(slice_scatter(empty, C(a)), C(b))

Qwen2-MoE sums the routed experts' output and a gated shared expert's inside its MLP (UC101 on
the add); each summand is canonicalised the same way:

    add(routed, shared)                  ->  add(C(routed), C(shared))

A vision or audio language model places projected media features into the text embeddings at
the media tokens (``embeds.masked_scatter(mask, features)``, LLaVA and most of its kind); the
two sides are canonicalised alike:

    masked_scatter(embeds, mask, features)  ->  masked_scatter(C(embeds), mask, C(features))

A recurrent scan writes each step's state into a zero-filled output (RecurrentGemma's RG-LRU:
``out = zeros_like(x); out[:, t] = h``, lowered onto ``full_like``); each state is canonicalised
as it is written. A chain of slice writes into a value that is not a fresh tensor (``empty``,
``zeros``, ``full_like``) is left to the lint after (its own unit would still differ from the
parts'), which reports it if the parts still differ once the other rules ran: a delta rule's
forward substitution in place (Kimi-Linear) writes rows whose units differ only through a
decay whose argument has a unit, and the activations rule makes that argument dimensionless.
A feature map plus a conditioning term computed from the inputs and broadcast over its positions
(a diffusion UNet's time embedding, FiLM's shift) is a sum of two parts too:

    add(h, temb(t)[:, :, None, None])    ->  add(C(h), C(temb(t)[:, :, None, None]))

(each over its channels). A sum of a value and a broadcast term of parameters alone (a bias) or a
dimensionless one (a mask) is left to the other rules and the lint after, and so is a bias added to attention scores on their way to a softmax
(the attention rules' part).
"""

from __future__ import annotations

import torch
import torch.fx as fx

from ..canonical import canonical
from ..fxutil import MOVEMENT_OPS, base_name
from ..record import record
from ..units import Unit
from .layout import over_features
from .patterns import (
    RewriteContext,
    attention_scores,
    describe,
    holds_input,
    through_casts,
    through_moves,
)

__all__ = ["mixed_parts"]

_LISTS = {"cat", "stack"}
_PLACED = {"masked_scatter"}
_SUMS = {"add", "sub"}
_FRESH = {"empty", "new_empty", "empty_like", "zeros", "new_zeros", "zeros_like", "full", "new_full", "full_like",
          "empty_strided", "empty_permuted"}


def _scatter_chain(node: fx.Node) -> list[fx.Node] | None:
    """The ``slice_scatter`` writes from a fresh tensor up to ``node``; None when the first one
    writes into a value."""
    chain: list[fx.Node] = []
    cur: object = node
    while isinstance(cur, fx.Node) and base_name(cur) == "slice_scatter":
        chain.append(cur)
        cur = cur.args[0]
    if isinstance(cur, fx.Node) and base_name(through_casts(cur)) in _FRESH:
        return chain
    return None


def _weights(unit: object) -> frozenset[str]:
    return frozenset(g for g in unit.generators() if g.startswith("p:")) if isinstance(unit, Unit) else frozenset()


def _same_shape_terms(node: fx.Node) -> bool:
    """Both terms of a sum are tensors of the sum's own shape computed through different weights:
    two branch outputs, not a value and a broadcast bias, mask or constant, nor two powers of
    one value (``x + 0.044715 * x**3`` in a tanh GELU, which the activation rule handles)."""
    if len(node.args) < 2 or not all(_weighted_term(node, k) for k in (0, 1)):
        return False
    return _weights(record(node.args[0]).unit) != _weights(record(node.args[1]).unit)  # type: ignore[arg-type]


def _conditioning(ctx: RewriteContext, node: fx.Node, memo: dict[fx.Node, bool]) -> bool:
    """A feature map plus a conditioning term broadcast over its positions (a UNet block's
    ``h + temb(t)[:, :, None, None]``, FiLM's shift): both computed from the inputs through
    different weights. A bias (parameters alone) is not one."""
    out = node.meta.get("val")
    if len(node.args) < 2 or node.kwargs.get("alpha") not in (None, 1) or not isinstance(out, torch.Tensor):
        return False
    vals = [t.meta.get("val") if isinstance(t, fx.Node) else None for t in node.args[:2]]
    if not all(isinstance(v, torch.Tensor) and v.is_floating_point() and v.dim() == out.dim() for v in vals):
        return False
    units = [_weights(record(t).unit) for t in node.args[:2]]  # type: ignore[arg-type]
    return all(units) and units[0] != units[1] and any(v is not None and v.shape == out.shape for v in vals) \
        and all(holds_input(ctx, t, memo) for t in node.args[:2])  # type: ignore[arg-type]


def _weighted_term(node: fx.Node, k: int) -> bool:
    """Is term ``k`` of the sum ``node`` a float tensor of the sum's shape (or a table lookup
    broadcast to it) whose unit holds weights?"""
    out, term = node.meta.get("val"), node.args[k]
    val = term.meta.get("val") if isinstance(term, fx.Node) else None
    return node.kwargs.get("alpha") in (None, 1) and isinstance(out, torch.Tensor) and isinstance(val, torch.Tensor) \
        and val.is_floating_point() and (val.shape == out.shape or _lookup(term)) \
        and bool(_weights(record(term).unit))  # type: ignore[arg-type]


def _lookup(node: object) -> bool:
    """A table lookup, through moves and constant scalings (a position table broadcast over the
    batch, BioGPT's ``wte(idx) * sqrt(d)``): a term of an embedding sum, not a bias."""
    while isinstance(node, fx.Node):
        name = base_name(node)
        if name == "embedding":
            return True
        if name not in MOVEMENT_OPS and not (name == "mul" and len(node.args) == 2
                                             and isinstance(node.args[1], (int, float))):
            return False
        node = node.args[0]
    return False


_SOFTMAX = {"softmax", "_softmax", "_safe_softmax"}


def _biased_scores(ctx: RewriteContext, node: fx.Node, memo: dict[fx.Node, bool], depth: int = 6) -> bool:
    """Attention scores plus a bias on their way to a softmax (CPM-Ant's shared relative
    position bias, its unit bound in the first layer and a mismatch in the next; SAM's query
    contracted with a table of offsets): the attention rules make the scores dimensionless, and
    the bias follows; canonicalising the sum would change the code's temperature."""
    if attention_scores(node, lambda x: not holds_input(ctx, x, memo)) is None:
        return False
    frontier = [node]
    for _ in range(depth):
        frontier = [u for n in frontier for u in n.users]
        if any(base_name(u) in _SOFTMAX for u in frontier):
            return True
    return False


def _logit_heads(join: fx.Node) -> bool:
    """A join of linear heads that a likelihood loss reads (MusicGen's codebook heads stacked,
    each codebook's cross-entropy on its slice): the logits rule makes each head dimensionless,
    which canonicalising the parts first would leave it no linear to find."""
    parts = join.args[0]
    if not isinstance(parts, (list, tuple)) or not parts:
        return False
    for part in parts:
        p = through_moves(part)
        if not (isinstance(p, fx.Node) and base_name(p) == "linear"):
            return False
    stack, seen = [join], {join}
    while stack:
        n = stack.pop()
        if record(n).violation == "UC301":
            return True
        for u in n.users:
            if u not in seen and (base_name(u) in MOVEMENT_OPS or record(u).violation == "UC301"):
                seen.add(u)
                stack.append(u)
    return False


def _canonical_before(ctx: RewriteContext, part: fx.Node, user: fx.Node) -> fx.Node:
    """C(part) over its feature axis (a feature map's channels: a UNet's skip concatenation)."""
    with ctx.graph.inserting_before(user):
        c = ctx.graph.call_function(canonical, (part,), dict(over_features(part)))
    for key in ("nn_module_stack", "stack_trace"):
        if key in user.meta:
            c.meta[key] = user.meta[key]
    return c


def mixed_parts(ctx: RewriteContext) -> None:
    """join(a, b) of parts with different units (UC101 on cat, stack, slice_scatter,
    masked_scatter, or a sum of two same-shaped branch outputs) -> join(C(a), C(b)): every part
    dimensionless before it is joined."""
    done: set[fx.Node] = set()
    memo: dict[fx.Node, bool] = {}
    for n in list(ctx.graph.nodes):
        name = base_name(n)
        if record(n).violation != "UC101" or name not in (*_LISTS, *_SUMS, *_PLACED, "slice_scatter") or not n.users or n in done:
            continue
        if name in _PLACED:  # media features placed into the text embeddings at their tokens
            n.args = tuple(_canonical_before(ctx, a, n) if i in (0, 2) and isinstance(a, fx.Node) else a
                           for i, a in enumerate(n.args))
            count = 2
        elif name in _SUMS:
            if not (_same_shape_terms(n) or _conditioning(ctx, n, memo)) or _biased_scores(ctx, n, memo):
                continue  # a mask or bias added to scores: the attention rules' part, or left to lint
            n.args = tuple(_canonical_before(ctx, t, n) for t in n.args[:2]) + tuple(n.args[2:])  # type: ignore[arg-type]
            count = 2
            # the sum goes on (``sum(table_i(ids[:, i]) for i)``, MusicGen's codebook tables):
            # each later term is made dimensionless too (the sum so far has no unit of its own)
            while len(n.users) == 1 and base_name(u := next(iter(n.users))) == "add" and u not in done \
                    and _weighted_term(u, 1 if u.args[0] is n else 0):
                k = 1 if u.args[0] is n else 0
                u.args = tuple(_canonical_before(ctx, a, u) if i == k else a for i, a in enumerate(u.args))  # type: ignore[arg-type]
                done.add(u)
                n, count = u, count + 1
        elif name in _LISTS:
            if _logit_heads(n):
                continue
            parts = list(n.args[0])  # type: ignore[arg-type]
            new = [_canonical_before(ctx, p, n) if isinstance(p, fx.Node) else p for p in parts]
            n.args = (new, *n.args[1:])
            count = len(parts)
        else:
            chain = _scatter_chain(n)
            if chain is None:  # left to the lint after, which names it if its parts still differ
                continue
            count = 0
            for s in chain:
                if s in done or not isinstance(s.args[1], fx.Node):
                    continue
                done.add(s)
                args = list(s.args)
                args[1] = _canonical_before(ctx, s.args[1], s)
                s.args = tuple(args)
                count += 1
        ctx.note("mixed_parts", describe(n), f"{name} of C(part) for each of its {count} parts")
