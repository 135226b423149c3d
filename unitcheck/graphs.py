"""Structural queries on FX graphs shared by the rules, the rewriter and the diagnostics."""

from __future__ import annotations

from collections import deque
from typing import Any

import torch.fx as fx

from .fxutil import IDENTITY_OPS, MOVEMENT_OPS, base_name, module_path

__all__ = ["topo_index", "is_ancestor", "residual_pair", "residual_adds", "users_through_views", "stream_source"]


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


def residual_pair(add: fx.Node, a: Any, b: Any, order: dict[fx.Node, int]) -> tuple[fx.Node, fx.Node] | None:
    """(stream, branch) when ``add`` is a residual: the branch is computed from the stream in
    another module than the add's own code: a submodule (``x + self.attn(ln(x))``) or a module
    beside it (a ``Residual`` wrapper whose forward only adds, as x-transformers writes it); not
    inline in the add's module or its parents (``x + 0.04 * x**3`` is a plain combine)."""
    if not (isinstance(a, fx.Node) and isinstance(b, fx.Node)):
        return None
    here = module_path(add)

    def inside(path: str) -> bool:
        return path != here and path != "" and not here.startswith(path + ".")

    if not _same_shape(a, b):  # a residual adds two values of one shape; a mask broadcasts
        return None
    if _feeds_softmax(add):
        # scores plus a bias normalised into attention weights, not a stream: CPM-Ant's position
        # bias, computed once and added in every layer, is an ancestor of later layers' scores
        return None
    for stream, branch in ((a, b), (b, a)):
        source = stream_source(stream)  # Mamba adds ``residual.to(float32)``, a cast beside the branch
        if order[source] > order[branch] or not is_ancestor(source, branch, order):
            continue
        # the branch's computation (back to the stream) passes through a submodule: the branch
        # itself (x + attn(x)) or an op applied to its output (h + alpha * C(attn(h)))
        seen, queue = {branch}, deque([branch])
        while queue and len(seen) < 4096:  # breadth-first and bounded: the submodule is close
            n = queue.popleft()
            if inside(module_path(n)):
                return stream, branch
            for p in n.all_input_nodes:
                if p is not source and p not in seen and p.op == "call_function":
                    seen.add(p)
                    queue.append(p)
    return None


_SOFTMAX = frozenset({"softmax", "_softmax", "_safe_softmax", "log_softmax", "_log_softmax"})


def _feeds_softmax(node: fx.Node, depth: int = 6) -> bool:
    """Is ``node`` normalised by a softmax, through masks, scalings, moves and a join with sink
    logits?"""
    return any(base_name(u) in _SOFTMAX for u in users_through_views(node, depth, through=frozenset({"cat"})))


def stream_source(node: fx.Node) -> fx.Node:
    """The value a chain of casts, copies and scalings by a constant forwards: the stream a
    residual adds, when the block casts it (Mamba's ``residual.to(torch.float32)``) or scales it
    (MiniMax's ``residual * alpha + branch * beta``) after its branch has read it."""
    while node.args:
        name = base_name(node)
        if name in IDENTITY_OPS and isinstance(node.args[0], fx.Node) or name in ("mul", "div") and len(node.args) == 2 and isinstance(node.args[0], fx.Node) \
                and isinstance(node.args[1], (int, float)) and not isinstance(node.args[1], bool):
            node = node.args[0]
        elif name == "mul" and len(node.args) == 2 and isinstance(node.args[1], fx.Node) \
                and isinstance(node.args[0], (int, float)) and not isinstance(node.args[0], bool):
            node = node.args[1]
        else:
            break
    return node


def _same_shape(a: fx.Node, b: fx.Node) -> bool:
    """Do two recorded values have the same shape (symbolic sizes compared by name)? Unknown
    shapes count as the same."""
    va, vb = a.meta.get("val"), b.meta.get("val")
    shape_a, shape_b = getattr(va, "shape", None), getattr(vb, "shape", None)
    if shape_a is None or shape_b is None:
        return True
    return len(shape_a) == len(shape_b) and all(str(x) == str(y) for x, y in zip(shape_a, shape_b))


def residual_adds(graph: fx.Graph) -> list[tuple[fx.Node, fx.Node, fx.Node]]:
    """Every residual ``add`` of the graph as ``(add, stream, branch)``, in graph order."""
    order = topo_index(graph)
    out = []
    for n in graph.nodes:
        if n.op == "call_function" and base_name(n) == "add" and len(n.args) >= 2:
            pair = residual_pair(n, n.args[0], n.args[1], order)
            if pair is not None:
                out.append((n, pair[0], pair[1]))
    return out


# what attention code applies to its weights before the value matmul: moves, masks, scalings
_WEIGHT_PATH = MOVEMENT_OPS | {"masked_fill", "where", "add", "sub", "div", "mul", "native_dropout"}


def users_through_views(node: fx.Node, depth: int = 6, through: frozenset[str] = frozenset()) -> list[fx.Node]:
    """Consumers of ``node``, looking through views, masks and scalings (attention-weights code),
    and through the ops named in ``through``."""
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
            if base_name(u) in _WEIGHT_PATH or base_name(u) in through:
                nxt.extend(u.users)
        frontier = nxt
        if not frontier:
            break
    return out
