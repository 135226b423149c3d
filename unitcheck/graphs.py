"""Structural queries on FX graphs shared by the rules, the rewriter and the diagnostics."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx
from torch.utils import _pytree as pytree

from .fxutil import IDENTITY_OPS, LEAF_KEY, MOVEMENT_OPS, VIEW_OPS, base_name, module_path

__all__ = ["topo_index", "is_ancestor", "leaf_through_moves", "averaged", "residual_pair", "residual_adds", "users_through_views", "stream_source",
           "float_bytes"]


def topo_index(graph: fx.Graph) -> dict[fx.Node, int]:
    return {n: i for i, n in enumerate(graph.nodes)}


def is_ancestor(a: fx.Node, b: fx.Node, order: dict[fx.Node, int] | None = None) -> bool:
    """Does ``b`` depend on ``a``? Walks back from ``b``, pruning nodes older than ``a``.

    For a residual add ``h + f(h)`` the walk stays inside the branch, so it costs the branch's
    size, not the graph's.
    """
    if a is b:
        return True
    if order is None:
        order = topo_index(a.graph)
    ia = order[a]
    seen: set[fx.Node] = set()
    stack = [b]
    while stack:
        n = stack.pop()
        for p in n.all_input_nodes:
            if p is a:
                return True
            if p in seen or order[p] < ia:
                continue
            seen.add(p)
            stack.append(p)
    return False


def residual_pair(add: fx.Node, a: Any, b: Any, order: dict[fx.Node, int],
                  rows: bool = False) -> tuple[fx.Node, fx.Node] | None:
    """(stream, branch) when ``add`` is a residual: the branch is computed from the stream in
    another module than the add's own code: a submodule (``x + self.attn(ln(x))``) or a module
    beside it (a ``Residual`` wrapper whose forward only adds, as x-transformers writes it); not
    inline in the add's module or its parents (``x + 0.04 * x**3`` is a plain combine). With
    ``rows`` the add goes into some rows of the stream (``scatter_add``): the branch has the
    stream's rank, not its shape."""
    if not (isinstance(a, fx.Node) and isinstance(b, fx.Node)) or not (_tensor(a) and _tensor(b)):
        return None  # sizes added under symbolic shapes (DeepSeek-V4's ``T + T // 4``) are no stream
    here = module_path(add)

    def inside(path: str) -> bool:
        return path != here and path != "" and not here.startswith(path + ".")

    if not (_same_rank(a, b) if rows else _same_shape(a, b)):  # a residual adds two values of one shape
        return None
    if _feeds_softmax(add):
        # scores plus a bias normalised into attention weights, not a stream: CPM-Ant's position
        # bias, computed once and added in every layer, is an ancestor of later layers' scores
        return None
    # a stream that reaches the add averaged over its copies counts only where no operand is the
    # stream itself: attention's ``softmax(s) @ v`` is an average too, over positions
    for mixed, (stream, branch) in itertools.product((False, True), ((a, b), (b, a))):
        source = stream_source(stream)  # Mamba adds ``residual.to(float32)``, a cast beside the branch
        if mixed:
            source = averaged(source)  # type: ignore[assignment]
            if source is None:
                continue
        if order[source] > order[branch] or not is_ancestor(source, branch, order):
            continue
        # the branch's computation from the stream passes through a submodule: the branch
        # itself (x + attn(x)) or an op applied to its output (h + alpha * C(attn(h))); a
        # submodule that does not read the stream does not count (Mamba's ``y + u * D``, y
        # computed inline from u and from a projection of the mixer's input). The stream counts
        # with the values it is computed from inline: nGPT adds to ``justnorm(h)`` a branch
        # whose attention reads ``h``
        roots = _inline_roots(source, inside)
        start = min(order[r] for r in roots)
        seen, queue = {branch}, deque([branch])
        while queue and len(seen) < 4096:  # breadth-first and bounded: the submodule is close
            n = queue.popleft()
            if inside(module_path(n)) and any(is_ancestor(r, n, order) for r in roots):
                return stream, branch
            for p in n.all_input_nodes:
                if p not in roots and p not in seen and p.op == "call_function" and order[p] > start:
                    seen.add(p)
                    queue.append(p)
    return None


def averaged(node: fx.Node) -> fx.Node | None:
    """What ``node`` averages, when it is ``W @ x`` (a matmul, the ``bmm`` export makes of it)
    with weights normalised to sum to one (a softmax, or values divided by their own sum): the
    copies of DeepSeek-V4's hyper-connection stream, mixed by a Sinkhorn-balanced matrix. An
    average keeps its values' unit, so the stream passes through it."""
    node = leaf_through_moves(node)
    if base_name(node) not in ("bmm", "matmul") or not all(isinstance(x, fx.Node) for x in node.args[:2]):
        return None
    weights, values = (leaf_through_moves(x) for x in node.args[:2])  # type: ignore[arg-type]
    return values if _normalised(weights) and not _scores_of_data(weights) else None


_PRODUCTS = frozenset({"linear", "matmul", "mm", "bmm", "baddbmm", "addmm", "einsum"})


def _scores_of_data(weights: fx.Node, limit: int = 512) -> bool:
    """Are the weights normalised scores of a product of two values the data computes (queries
    and keys: attention, which averages over positions), rather than of a projection by
    parameters (the mixing weights of hyper-connections, which average the stream's copies)?
    Nystromformer adds ``conv(v)`` to an attention average of ``v``: not a stream."""
    seen, stack = {weights}, [weights]
    while stack and len(seen) < limit:  # bounded: a Sinkhorn balance is a few dozen steps
        n = stack.pop()
        if base_name(n) in _PRODUCTS:
            if not any(_from_parameters(x) for x in n.all_input_nodes):
                return True
            continue  # a projection by parameters: the scores start here
        for p in n.all_input_nodes:
            if p not in seen:
                seen.add(p)
                stack.append(p)
    return False


def _normalised(node: fx.Node) -> bool:
    """Weights normalised to sum to one along an axis: a softmax, or ``w / (w.sum(axis) + eps)``
    (the axis is not checked: a Sinkhorn balance sums to about one along both)."""
    if base_name(node) in _SOFTMAX:
        return "log" not in base_name(node)  # a log-softmax's values do not sum to one
    if base_name(node) != "div" or not all(isinstance(x, fx.Node) for x in node.args[:2]):
        return False
    total: Any = node.args[1]
    if base_name(total) == "add" and len(total.args) == 2 and isinstance(total.args[1], (int, float)):
        total = total.args[0]  # the sum plus an eps
    return isinstance(total, fx.Node) and base_name(total) == "sum" and total.args[0] is node.args[0]


def _tensor(node: fx.Node) -> bool:
    """Is the recorded value a tensor (unknown counts as one: symbolic tracing records none)?"""
    return "val" not in node.meta or isinstance(node.meta["val"], torch.Tensor)


def _inline_roots(node: fx.Node, inside: Callable[[str], bool], limit: int = 16) -> list[fx.Node]:
    """``node`` and the values it is computed from by the add's own inline code, back to the
    first value another module computed (bounded: a normaliser is a few ops)."""
    roots, queue = [node], deque([node])
    while queue and len(roots) < limit:
        n = queue.popleft()
        if n.op != "call_function" or inside(module_path(n)):
            continue
        for p in n.all_input_nodes:
            if p not in roots and not _parameter_leaf(p):
                roots.append(p)
                queue.append(p)
    return roots


_SOFTMAX = frozenset({"softmax", "_softmax", "_safe_softmax", "log_softmax", "_log_softmax"})


def _feeds_softmax(node: fx.Node, depth: int = 6) -> bool:
    """Is ``node`` normalised by a softmax, through masks, scalings, moves and a join with sink
    logits?"""
    return any(base_name(u) in _SOFTMAX for u in users_through_views(node, depth, through=frozenset({"cat"})))


def stream_source(node: fx.Node, parameters: bool = True, read_by: fx.Node | None = None) -> fx.Node:
    """The value a chain of casts, copies and scalings by a constant or a parameter forwards: the
    stream a residual adds, when the block casts it (Mamba's ``residual.to(torch.float32)``),
    scales it (MiniMax's ``residual * alpha + branch * beta``, Doge's ``input_residual *
    residual + branch``) or shifts it by a parameter (Zaya's ``(residual + b) * s``) after its
    branch has read it. With ``read_by`` (the branch), the walk stops at a shift or scaling the
    branch reads (a cast it passes): that is part of the stream (learned positions added to the
    embedding, ``wte(idx) + pos[:, :T]``)."""
    order = topo_index(node.graph) if read_by is not None else None
    while node.args:
        name = base_name(node)
        if name in IDENTITY_OPS and isinstance(node.args[0], fx.Node):
            node = node.args[0]
            continue
        if read_by is not None and is_ancestor(node, read_by, order):
            break
        other = _other_operand(node, parameters) if name in ("mul", "div", "add", "sub") and len(node.args) == 2 else None
        if other is None:
            break
        node = other
    return node


def _other_operand(node: fx.Node, parameters: bool) -> fx.Node | None:
    """The tensor operand of a binary op whose other operand is a constant (a number, or a
    parameter, buffer or constant leaf, for ``mul`` and ``div`` only a number or such a leaf on
    the right of a ``div``), else None."""
    a, b = node.args[0], node.args[1]
    number = (int, float)

    def fixed(x: Any) -> bool:
        return isinstance(x, number) and not isinstance(x, bool) and base_name(node) in ("mul", "div") \
            or parameters and isinstance(x, fx.Node) and _from_parameters(x)
    if isinstance(a, fx.Node) and fixed(b) and not _from_parameters(a):
        return a
    if isinstance(b, fx.Node) and fixed(a) and base_name(node) in ("mul", "add") and not _from_parameters(b):
        return b
    return None


def _from_parameters(node: fx.Node, limit: int = 32) -> bool:
    """A parameter, buffer or constant leaf, or a value computed from such leaves and numbers
    alone (Ergo's gate ``sqrt(1 + sigmoid(w)) * exp(-softplus(w) / 2)``): a scale the data does
    not move (bounded: a gate is a few ops)."""
    seen, stack = {node}, [node]
    while stack:
        n = stack.pop()
        if _parameter_leaf(n):
            continue
        if n.op != "call_function" or len(seen) > limit:
            return False
        for p in n.all_input_nodes:
            if p not in seen:
                seen.add(p)
                stack.append(p)
    return True


def leaf_through_moves(node: fx.Node) -> fx.Node:
    """What ``node`` views, casts or copies, back to the first value that is not a move."""
    while node.op == "call_function" and base_name(node) in MOVEMENT_OPS and node.args and isinstance(node.args[0], fx.Node):
        node = node.args[0]
    return node


def _parameter_leaf(node: fx.Node) -> bool:
    """A parameter, buffer or constant leaf, through moves (a gain viewed to broadcast)."""
    node = leaf_through_moves(node)
    return node.op == "placeholder" and node.meta.get(LEAF_KEY) in ("param", "buffer", "constant")


def _same_shape(a: fx.Node, b: fx.Node) -> bool:
    """Do two recorded values have the same shape (symbolic sizes compared by name)? Unknown
    shapes count as the same."""
    va, vb = a.meta.get("val"), b.meta.get("val")
    shape_a, shape_b = getattr(va, "shape", None), getattr(vb, "shape", None)
    if shape_a is None or shape_b is None:
        return True
    return len(shape_a) == len(shape_b) and all(str(x) == str(y) for x, y in zip(shape_a, shape_b))


def _same_rank(a: fx.Node, b: fx.Node) -> bool:
    ra, rb = (getattr(n.meta.get("val"), "ndim", None) for n in (a, b))
    return ra is None or rb is None or ra == rb


def residual_adds(graph: fx.Graph, rows: bool = False) -> list[tuple[fx.Node, fx.Node, fx.Node]]:
    """Every residual ``add`` of the graph as ``(add, stream, branch)``, in graph order; with
    ``rows``, also every ``scatter_add(stream, dim, index, branch)`` whose branch is computed from
    the stream: a residual add into chosen rows (Mixture-of-Depths adds the updates of the tokens
    it routed through a block back into the stream)."""
    order = topo_index(graph)
    out = []
    for n in graph.nodes:
        if n.op != "call_function":
            continue
        if base_name(n) == "add" and len(n.args) >= 2:
            pair = residual_pair(n, n.args[0], n.args[1], order)
        elif rows and base_name(n) == "scatter_add" and len(n.args) >= 4:
            pair = residual_pair(n, n.args[0], n.args[3], order, rows=True)
            pair = pair if pair is not None and pair[0] is n.args[0] else None
        else:
            continue
        if pair is not None:
            out.append((n, pair[0], pair[1]))
    return out


# what attention code applies to its weights before the value matmul: moves, masks, scalings
_WEIGHT_PATH = MOVEMENT_OPS | {"masked_fill", "where", "add", "sub", "div", "mul", "native_dropout"}


def users_through_views(node: fx.Node, depth: int = 6, through: frozenset[str] = frozenset()) -> list[fx.Node]:
    """Consumers of ``node``, looking through views, masks and scalings (attention-weights code),
    and through the ops named in ``through``. A training-mode dropout (``native_dropout`` and
    the ``getitem`` of its output) is one step, as its eval-mode form (a ``clone``) is, so that
    both modes' graphs see the same consumers."""
    out: list[fx.Node] = []
    frontier = list(node.users)
    seen: set[fx.Node] = set()
    for _ in range(depth):
        nxt: list[fx.Node] = []
        for u in frontier:
            if u in seen:
                continue
            seen.add(u)
            out.append(u)
            if base_name(u) == "native_dropout":
                kept = [g for g in u.users if base_name(g) == "getitem" and g.args[1] == 0]
                out.extend(kept)
                seen.update(kept)
                nxt.extend(v for g in kept for v in g.users)
            elif base_name(u) in _WEIGHT_PATH or base_name(u) in through:
                nxt.extend(u.users)
        frontier = nxt
        if not frontier:
            break
    return out


def float_bytes(graph: fx.Graph, itemsize: int | None = None) -> int:
    """Bytes of the floating values a run of ``graph`` computes (views share storage and do not
    count), at ``itemsize`` bytes per element or at each value's own; symbolic sizes at the
    example's."""
    total = 0
    for n in graph.nodes:
        if base_name(n) in VIEW_OPS:
            continue
        for v in pytree.tree_leaves(n.meta.get("val")):
            if isinstance(v, torch.Tensor) and (v.is_floating_point() or v.is_complex()):
                numel = v.numel()
                count = numel if isinstance(numel, int) else numel.node.hint
                total += int(count or 0) * (itemsize or v.element_size())
    return total
