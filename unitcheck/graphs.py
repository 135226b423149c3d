"""Small structural queries on FX graphs shared by the rules, the oracle and the rewriter."""

from __future__ import annotations

from collections import deque
from typing import Any

import torch
import torch.fx as fx
from torch.utils import _pytree as pytree

__all__ = ["is_ancestor", "node_dtype", "is_float_value", "op_name", "users_through_views", "topo_index"]


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


def residual_pair(
    add: fx.Node, a: Any, b: Any, order: dict[fx.Node, int], module_of: Any
) -> tuple[fx.Node, fx.Node] | None:
    """(stream, branch) when ``add`` is a residual: the branch is computed from the stream inside
    a submodule of the add's module (``x + self.attn(ln(x))``), not inline (``x + 0.04 * x**3``
    is a plain combine). ``module_of`` maps a node to its module path."""
    if not (isinstance(a, fx.Node) and isinstance(b, fx.Node)):
        return None
    here = module_of(add)

    def inside(path: str) -> bool:
        return path != here and (here == "" or path.startswith(here + "."))

    for stream, branch in ((a, b), (b, a)):
        if order[stream] > order[branch] or not is_ancestor(stream, branch, order):
            continue
        # the branch's computation (back to the stream) passes through a submodule: the branch
        # itself (x + attn(x)) or an op applied to its output (h + alpha * C(attn(h)))
        seen, queue = {branch}, deque([branch])
        while queue and len(seen) < 4096:  # breadth-first and bounded: the submodule is close
            n = queue.popleft()
            if inside(module_of(n)):
                return stream, branch
            for p in n.all_input_nodes:
                if p is not stream and p not in seen and p.op == "call_function":
                    seen.add(p)
                    queue.append(p)
    return None


def residual_adds(graph: fx.Graph, module_of: Any) -> list[tuple[fx.Node, fx.Node, fx.Node]]:
    """Every residual ``add`` of the graph as ``(add, stream, branch)``, in graph order."""
    order = topo_index(graph)
    out = []
    for n in graph.nodes:
        if n.op == "call_function" and base_name(n) == "add" and len(n.args) >= 2:
            pair = residual_pair(n, n.args[0], n.args[1], order, module_of)
            if pair is not None:
                out.append((n, pair[0], pair[1]))
    return out


def node_dtype(val: Any) -> torch.dtype | None:
    if isinstance(val, torch.Tensor):
        return val.dtype
    return None


def is_float_value(val: Any) -> bool:
    """Whether a node's recorded value (``meta['val']``) holds any floating tensor."""
    return any(
        isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())
        for t in pytree.tree_leaves(val)
    )


def op_name(node: fx.Node) -> str:
    """A readable, stable op name: ``aten.add.Tensor``, ``torch.nn.functional.gelu``, ``Tensor.view``."""
    t = node.target
    if node.op == "call_method":
        return f"Tensor.{t}"
    if node.op == "call_module":
        return f"module:{t}"
    if isinstance(t, torch._ops.OpOverload):
        return str(t)
    mod = getattr(t, "__module__", None) or ""
    name = getattr(t, "__qualname__", None) or getattr(t, "__name__", None) or str(t)
    if mod in ("_operator", "operator"):
        return f"operator.{name}"
    return f"{mod}.{name}" if mod else str(name)


_VIEWS = {
    "view", "_unsafe_view", "reshape", "permute", "transpose", "expand", "contiguous", "clone",
    "alias", "unsqueeze", "squeeze", "flatten", "t", "to", "type_as", "_to_copy", "getitem",
    "masked_fill", "where", "add", "sub", "div", "mul", "dropout", "native_dropout",
}


def _base(node: fx.Node) -> str:
    t = node.target
    if isinstance(t, torch._ops.OpOverload):
        return t.overloadpacket.__name__
    if isinstance(t, str):
        return t
    return getattr(t, "__name__", str(t))


def users_through_views(node: fx.Node, depth: int = 6) -> list[fx.Node]:
    """Consumers of ``node``, looking through views, masks and scalings (attention-weights code)."""
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
            if _base(u) in _VIEWS:
                nxt.extend(u.users)
        frontier = nxt
        if not frontier:
            break
    return out


def base_name(node: fx.Node) -> str:
    return _base(node)
