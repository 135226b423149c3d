"""In-place updates of views, emitted in place again.

The capture functionalises ``p = x.permute(...); p += h`` into ``y = add(p, h)`` and rebuilds
the base from ``y``. The values are the same, but autograd is not: in eager the update goes
through the view into its base, so the gradient that reaches the op that made the base is laid
out as the base is (autograd's ``CopySlices``); functional, it is laid out as the chain of
views hands it back. A matrix product fed a gradient in another layout blocks its sums
otherwise and rounds otherwise (Gemma 3n's AltUp: ``predictions += hidden_states`` on a
permuted product; its coefficients' gradients differed by 1e-4).

So where the capture recorded that the model called the in-place method (``torch_fn`` names
``add_``) on a view, and writing in place cannot change what any other node reads, the
generated code calls the in-place op on the view, as the model did."""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from ..fxutil import called_name

__all__ = ["in_place_on_views"]

# views in which elements share memory: nothing can be written through them
_SPREAD = frozenset({torch.ops.aten.expand.default, torch.ops.aten.as_strided.default})


def _aliases(node: fx.Node) -> bool:
    """A view of its first argument (reshape where it can be one)."""
    t = node.target
    return node.op == "call_function" and isinstance(t, torch._ops.OpOverload) and t not in _SPREAD and (
        t.is_view or t in (torch.ops.aten.reshape.default, torch.ops.aten._unsafe_view.default))



def _in_place_overload(node: fx.Node) -> Any:
    """The in-place overload of a functional op the model called in place, or None."""
    t = node.target
    called = called_name(node)
    if not isinstance(t, torch._ops.OpOverload) or not called:
        return None
    name = t.overloadpacket.__name__
    if called != f"{name}_" or called.startswith("_"):
        return None
    packet = getattr(torch.ops.aten, called, None) if t.namespace == "aten" else None
    return getattr(packet, t._overloadname, None) if packet is not None else None


def _same_shape_and_dtype(a: fx.Node, b: fx.Node) -> bool:
    va, vb = a.meta.get("val"), b.meta.get("val")
    return (isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor) and va.dtype == vb.dtype
            and tuple(va.shape) == tuple(vb.shape))


def _writable(view: fx.Node, update: fx.Node, order: dict[fx.Node, int]) -> bool:
    """Every tensor that shares memory with ``view`` (the chain of views down to the op that made
    the memory) is read by nothing after ``update`` except through ``update``, and that memory is
    the model's own intermediate (not an input, a weight or a buffer)."""
    node, successor = view, update
    while True:
        if any(u is not successor and order[u] > order[update] for u in node.users):
            return False
        if not _aliases(node):
            break
        parent = node.args[0]
        if not isinstance(parent, fx.Node):
            return False
        node, successor = parent, node
    return node.op == "call_function"


def in_place_on_views(graph: fx.Graph) -> None:
    """Rewrite each functionalised in-place update of a view back to the in-place op."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    for node in list(graph.nodes):
        op = _in_place_overload(node) if node.op == "call_function" else None
        view = node.args[0] if op is not None and node.args else None
        if not isinstance(view, fx.Node) or not _aliases(view) or not _same_shape_and_dtype(view, node):
            continue
        if _writable(view, node, order):
            node.target = op
