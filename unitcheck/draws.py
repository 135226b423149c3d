"""Branches on random draws (LayerDrop: ``if torch.rand([]) < p: skip the layer``).

A capture holds one path. For a draw the path it holds is the one on which every uniform draw
takes its largest value, so every layer runs; :mod:`unitcheck.rewrite.layerdrop` turns each
branch back into one in the generated code. This module says which values in a graph are read
from a draw and what they are on that path."""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable
from typing import Any

import torch
import torch.fx as fx
from torch.utils import _pytree as pytree

from .fxutil import base_name, innermost_line

# ops that draw random values: a branch on one is no more the model's than a branch on data
# (numpy_rand and host_call draw from numpy's generator: :mod:`unitcheck.host_draws`)
RANDOM = frozenset({"rand", "randn", "rand_like", "randn_like", "randint", "randint_like", "randperm", "bernoulli",
                    "normal", "uniform", "multinomial", "exponential", "geometric", "cauchy", "log_normal",
                    "numpy_rand", "host_call"})
# draws of U[0, 1): the path that keeps every layer is the one where each is at its largest
_UNIFORM = frozenset({"rand", "rand_like", "uniform", "numpy_rand"})
_LARGEST = 1.0 - 2.0**-24  # the largest float32 below 1
READS = frozenset({"item", "_local_scalar_dense"})  # ops that read a tensor's value into Python


@functools.cache
def random_ops() -> frozenset[Any]:
    """Every overload of the ops that draw random numbers (looked up once)."""
    from .host_draws import OPS

    ops: set[Any] = set(OPS)
    for name in (*RANDOM, "bernoulli_", "uniform_", "normal_", "exponential_", "dropout", "native_dropout",
                 "feature_dropout", "alpha_dropout", "feature_alpha_dropout"):
        packet = getattr(torch.ops.aten, name, None)
        if packet is not None:
            ops.update(getattr(packet, o) for o in packet.overloads())
    return frozenset(ops)


def _concrete(value: Any) -> Any:
    """A node's value, or None where it is symbolic (a size the example does not fix)."""
    if isinstance(value, torch.Tensor):
        return None if any(not isinstance(s, int) for s in value.shape) else value
    return value


def kept_values(graph: fx.Graph) -> dict[fx.Node, int]:
    """Each node that reads a value of a uniform draw into Python (``item`` of ``rand([]) < p``),
    with its value when every draw is at its largest. Values computed from anything but draws and
    constants are unknown, and so are the reads that depend on them."""
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes():  # called while export traces: these ops must run, not be recorded
        return _evaluated(graph)


def _evaluated(graph: fx.Graph) -> dict[fx.Node, int]:
    known: dict[fx.Node, Any] = {}
    out: dict[fx.Node, int] = {}
    for n in graph.nodes:
        if n.op != "call_function":
            continue
        name = base_name(n)
        if name in _UNIFORM:
            val = _concrete(n.meta.get("val"))
            if isinstance(val, torch.Tensor):
                known[n] = torch.full(val.shape, _LARGEST, dtype=val.dtype)
            continue
        inputs = n.all_input_nodes
        if not inputs or any(a not in known for a in inputs):
            continue
        try:
            args, kwargs = fx.node.map_arg((n.args, n.kwargs), lambda a: known[a])
            value = n.target(*args, **kwargs)  # type: ignore[operator]
        except Exception:  # an op that needs more than values (a device, an out= tensor): unknown
            continue
        known[n] = value
        if n.meta.get("unbacked_bindings") and isinstance(value, (bool, int, torch.SymInt)):
            out[n] = int(value)
    return out


# node.meta keys of the marks mark_layer_drops leaves for code generation
READ = "unitcheck_draw"  # (index, kept value) on the node that reads draw ``index`` into Python
GUARDED = "unitcheck_drop"  # index of the draw that guards the node
SKIP = "unitcheck_skip"  # indices of the draws whose layer, when dropped, leaves this value
NO_GRAD_CUT = "unitcheck_no_grad_cut"  # on the detach that cuts a no-grad region's value from its readers


def checks(reads: Iterable[fx.Node]) -> set[fx.Node]:
    """The symbolic values and assertions computed from values read into Python (``Ne(u0, 1)``
    of a draw's read): one path's checks."""
    out: set[fx.Node] = set()
    todo = [u for r in reads for u in r.users]
    while todo:
        n = todo.pop()
        if n not in out and not isinstance(n.meta.get("val"), torch.Tensor) and n.op == "call_function":
            out.add(n)
            todo += list(n.users)
    return out


def _checks(graph: fx.Graph) -> set[fx.Node]:
    """Every read's checks, which differ between the two captures."""
    return checks(r for r in graph.nodes if r.meta.get("unbacked_bindings") or base_name(r) in READS)


def _computes_tensors(n: fx.Node) -> bool:
    return any(isinstance(v, torch.Tensor) for v in pytree.tree_leaves(n.meta.get("val")))


def _key(n: fx.Node) -> tuple[str, str, str]:
    if n.meta.get(NO_GRAD_CUT):
        # where a no-grad region's value leaves it: made after whichever node the path ended on
        # (the last layer, or what precedes the layers when every one drops), read by the same
        return n.op, str(n.target), "cut for " + "".join(str(u.meta.get("stack_trace") or "") for u in n.users)
    return n.op, str(n.target), str(n.meta.get("stack_trace") or "")


def _read_by(u: fx.Node, side: Collection[int]) -> list[Any]:
    """The values ``u`` reads, in order; of the graph's output, the model's outputs only (not the
    buffer updates at ``side``, which differ between the paths)."""
    leaves = pytree.tree_leaves((u.args, u.kwargs))
    return [a for i, a in enumerate(leaves) if i not in side] if u.op == "output" else leaves


def mark_layer_drops(kept: fx.Graph, dropped: fx.Graph, kept_side: Collection[int] = (),
                     dropped_side: Collection[int] = ()) -> None:
    """Mark in ``kept`` (the capture on which every draw keeps its layer) the nodes each draw
    guards and the value its branch leaves when it drops, by aligning ``kept`` with ``dropped``
    (every draw dropped its layer): the same code ran in both, so ``dropped`` is ``kept`` without
    the guarded nodes. The value a dropped layer leaves is read from ``dropped`` too: it is what
    the first node after the layers reads there. ``*_side`` are the positions of buffer updates
    among each graph's outputs: a dropped layer updates none. Raises ValueError where the branch
    is not one value a layer computes or leaves."""
    reads = kept_values(kept)
    skip_checks = _checks(kept) | _checks(dropped)
    # aligned: what computes tensors (sizes are placed where a pass needs them, differently in each)
    computed = {n for n in kept.nodes if n.op == "call_function" and n not in skip_checks and n not in reads}
    ks, ds = ([n for n in g.nodes if n.op == "output" or (n.op == "call_function" and _computes_tensors(n))
               and n not in skip_checks] for g in (kept, dropped))
    match: dict[fx.Node, fx.Node] = {}
    i = 0
    for d in ds:
        while i < len(ks) and _key(ks[i]) != _key(d):
            i += 1
        if i == len(ks):
            raise ValueError(f"the path that drops every layer is not the other path with layers left out ({d.name}: "
                             f"{d.target} at {innermost_line(str(d.meta.get('stack_trace') or '')) or 'an unknown line'} "
                             "is not in it)")
        match[ks[i]] = d
        i += 1
    leaves = {n.name: n for n in dropped.nodes if n.op in ("placeholder", "get_attr")}
    image = {**{n: leaves[n.name] for n in kept.nodes if n.op in ("placeholder", "get_attr") and n.name in leaves},
             **match}
    # a node missing from ``dropped`` is guarded, or was dead code there (a mask only the layers
    # read): guarded are those inside a module the branch calls, those a kept node reads (the
    # stream a dropped layer leaves is another value there), and those between guarded ones
    order = [r for r in kept.nodes if r in reads]
    after: dict[fx.Node, int] = {}  # each node missing from ``dropped``: the last draw read before it
    last = -1
    for n in kept.nodes:
        last += n in reads
        if last >= 0 and n in computed and n not in match:
            after[n] = last
    missing = list(after)
    depth = [len(r.meta.get("nn_module_stack") or {}) for r in order]
    guarded = {n for n in missing if _computes_tensors(n) and (
        len(n.meta.get("nn_module_stack") or {}) > depth[after[n]] or any(u in match for u in n.users))}
    grew = True
    while grew:  # sizes the layers share (export computes ``B * S`` once) stay outside, unless computed inside
        more = {n for n in missing if n not in guarded and any(a in guarded for a in n.all_input_nodes)
                and (not _computes_tensors(n) or any(u in guarded for u in n.users))}
        guarded |= more
        grew = bool(more)
    loose = [n for n in missing if n not in guarded and n.target in random_ops()]
    if loose:  # computed outside the layers and used only by them: whether it draws when they drop is unknown
        raise ValueError(f"{loose[0].name} draws random numbers for the layers only, and the graph does not say "
                         "whether it draws when they drop")
    regions: list[list[fx.Node]] = [[] for _ in order]
    for n in missing:
        if n in guarded:
            regions[after[n]].append(n)
    owner = {n: k for k, nodes in enumerate(regions) for n in nodes}
    loop = [innermost_line(str(r.meta.get("stack_trace") or "")) for r in order]  # draws of one loop share it
    target: dict[int, fx.Node | None] = {}
    skip: dict[int, fx.Node] = {}
    for k in reversed(range(len(regions))):
        if regions[k]:
            target[k], skip[k] = _dropped_value(k, regions, owner, loop, match, image, target, skip, kept_side,
                                                dropped_side)
    for k, nodes in enumerate(regions):
        order[k].meta[READ] = (k, reads[order[k]])
        for n in nodes:
            n.meta[GUARDED] = k
        if nodes:
            skip[k].meta.setdefault(SKIP, []).append(k)


def _dropped_value(k: int, regions: list[list[fx.Node]], owner: dict[fx.Node, int], loop: list[str],
                   match: dict[fx.Node, fx.Node], image: dict[fx.Node, fx.Node], target: dict[int, fx.Node | None],
                   skip: dict[int, fx.Node], kept_side: Collection[int],
                   dropped_side: Collection[int]) -> tuple[fx.Node | None, fx.Node]:
    """What layer ``k`` leaves when it drops: (the value read in its place where every layer
    drops, or None where nothing reads it there; the input of the layer that is that value).
    Later layers of the same loop are done: a layer whose output the next one leaves when it
    drops reads the same value in its place. A layer of another loop that reads it (a decoder's
    cross-attention reading the encoder's output) says nothing of it."""
    out = [n for n in regions[k] if any(owner.get(u) != k and n in _read_by(u, kept_side) for u in n.users)]
    if len(out) != 1:
        raise ValueError(f"the layer the draw at {k} skips gives {len(out)} values, not one "
                         f"({', '.join(o.name for o in out)})")
    seen: set[fx.Node | None] = set()
    for u in out[0].users:
        if u not in owner and (u in match or _computes_tensors(u)):  # a size read of it follows the call
            if u not in match:
                raise ValueError(f"{u.name} reads what a layer computes, and the path that drops every layer "
                                 "does not compute it")
            mine, there = _read_by(u, kept_side), _read_by(match[u], dropped_side)
            if len(mine) != len(there):
                raise ValueError(f"{u.name} reads its arguments differently where every layer drops")
            seen |= {d for a, d in zip(mine, there) if a is out[0]}
    if not seen:
        seen = {target[q] for u in out[0].users if (q := owner.get(u, k)) != k and loop[q] == loop[k]
                and skip.get(q) is out[0]}
    if len(seen) > 1:
        raise ValueError(f"where every layer drops, what reads {out[0].name} reads {len(seen)} values, not one "
                         "(a layer that changes the stream's shape, or one whose output is read unlike its input)")
    value = next(iter(seen), None)
    inputs = list(dict.fromkeys(a for n in regions[k] for a in n.all_input_nodes if owner.get(a) != k))
    before = [a for a in inputs if a in owner and owner[a] < k and loop[owner[a]] == loop[k]]
    if value is not None:
        found = [a for a in inputs if a not in owner and image.get(a) is value] + before
    else:  # nothing reads it where every layer drops: the loop's stream, or the input shaped like the output
        like = [a for a in inputs if a not in owner and _same_shape(a, out[0])]
        found = before or like
    if len(found) != 1:
        raise ValueError(f"{len(found)} values could be what the layer after draw {k} leaves when it drops")
    return value, found[0]


def _same_shape(a: fx.Node, b: fx.Node) -> bool:
    va, vb = a.meta.get("val"), b.meta.get("val")
    return isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor) and va.dtype == vb.dtype \
        and va.shape == vb.shape
