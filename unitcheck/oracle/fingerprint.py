"""The radial fingerprint (seed 000, Prop. 6): for each generator g, the loss's rate along "scale
every leaf W by c^(u_g(W)), and every numerical floor by the character of its unit" is ~0 exactly
when the static pass calls g a gauge direction (the loss unit does not involve g and no violating
or unknown op consumed a value whose unit involves g).

The rate D_g L is measured three ways, in float64 end to end:

- *backprop*: sum_W u_g(W) <W, grad_W L> (exact), plus the floors' share by the chain rule:
  sum over floored nodes of <dL/dy, dy/dc>, dy/dc a central difference of the node alone with
  only its eps rescaled (see :func:`_floors_rate`);
- *jvp*: forward-mode AD along the leaves' scaling direction, which must equal the backprop sum;
- *finite difference*: a central difference along the whole direction, leaves and floors (at
  h = 1e-4, then 1e-5 and 1e-6 where kinks the direction crosses make it err by O(h)).

The first is the measurement; the other two cross-check it, and a disagreement between methods
is reported, not resolved. Gauge means |D_g L| below 1e-11 of the generator's total sensitivity
sum_W |u_g(W)| ||W|| ||grad_W L||, plus the measurement's own rounding (the loss's through the
floors' difference quotient, the backprop sum's, and the spread between backprop and jvp): a
gauge direction measures at most about 1e-12 of its sensitivity in float64, while a real
dependence damped by a layer scale of 1e-6 after a few layers measures 1e-10 (ConvNeXt's
downsampling convolutions), which a threshold of 1e-7 called gauge.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Collection, Mapping
from typing import Any

import torch
import torch.autograd.forward_ad as fwad
import torch.fx as fx

from ..fxutil import ROUNDING_OPS, ancestors, base_name, float_tensors, integer_cast
from ..record import record, unit_of
from ..unitgraph import UnitGraph
from ..units import Unit
from .global_ import scaled_leaves
from .interp import RunFailed, run_graph, run_with_grads, scale, seeded
from .local import live_inputs, run_alone, unexercised
from .result import Disagreement, FingerprintRow, OracleError

__all__ = ["fingerprint_graph", "fingerprint_checked"]

EPS64 = torch.finfo(torch.float64).eps


def _feeding(node: fx.Node, env: Mapping[fx.Node, Any]) -> set[fx.Node]:
    """The node and every node whose value reaches it differentiably on this run: through the
    inputs that reach it (see :func:`live_inputs`) and carry a float tensor. An integer or boolean
    value (a threshold's mask, top-k indices, patch lengths) is locally constant, so what it is
    computed from moves the loss only by jumps, and D_g L along it is exactly 0."""
    return ancestors([node], lambda n: [p for p in live_inputs(n, env) if float_tensors(env.get(p))])


def _consumed(ug: UnitGraph, reach: set[fx.Node], env: Mapping[fx.Node, Any],
              grads: Mapping[fx.Node, torch.Tensor], jittered: Mapping[fx.Node, torch.Tensor]) -> set[str]:
    """Generators that some violation or unknown op on the way to the loss consumed: their
    direction reaches the loss through an op that is not equivariant (or not known to be). A
    violation in an output the loss does not read (an unused pooling head), in a part of the
    model these inputs leave out (an image tower whose features a text-only example never
    places, the selection that places them: see :func:`unexercised`), or whose output no
    derivative of the loss reaches (dL/dy is 0 up to rounding: a softmax over a single key after
    it, top-1 router weights divided by their own norm), changes nothing."""
    out: set[str] = set()
    for v in ug.violations:
        node = ug.node(v.node)
        if node not in reach:
            continue
        if node.op != "output" and (unexercised(node, env) or not _derivative_reaches(node, grads, jittered)):
            continue
        out.update(v.extra.get("consumed", ()))
    return out


def _derivative_reaches(node: fx.Node, grads: Mapping[fx.Node, torch.Tensor],
                        jittered: Mapping[fx.Node, torch.Tensor]) -> bool:
    """Is dL/dy a derivative, not rounding, somewhere in the node's float outputs?"""
    return any(_significant([(g, jittered.get(w))]) for w, _ in _outputs(node) if (g := grads.get(w)) is not None)


JITTER = 1e-9


def _jittered(leaves: Mapping[str, Any], held: Collection[str] = ()) -> dict[str, Any]:
    """The float leaves moved by a seeded relative 1e-9: a derivative moves with them by about
    that much, while rounding noise (a derivative that is 0 in exact arithmetic, computed as
    t/v - v t/v^2) is drawn anew. The ``held`` leaves stay (see :func:`_truncated_leaves`)."""
    gen = torch.Generator().manual_seed(0)
    out = dict(leaves)
    for k, v in leaves.items():
        if isinstance(v, torch.Tensor) and v.is_floating_point() and v.numel():
            moved = v * (1 + JITTER * torch.randn(v.shape, generator=gen, dtype=v.dtype))
            out[k] = v if k in held else moved  # (drawn either way: the other leaves' draws stay)
    return out


def _truncated_leaves(ug: UnitGraph) -> set[str]:
    """Float leaves that reach a cast to integers or a rounding op: moving them by 1e-9 moves a
    whole number across a jump (Pix2Struct's row id 1.0 becomes 0 under ``.long()`` when moved
    down), which changes the path, not a derivative."""
    steps = [n for n in ug.graph.nodes if integer_cast(n) or (n.op == "call_function" and base_name(n) in ROUNDING_OPS)]
    above = ancestors(steps) if steps else set()
    return {name for name in ug.traced.leaves if ug.node(name) in above}


def _significant(pairs: list[tuple[torch.Tensor, torch.Tensor | None]]) -> bool:
    """Are these gradients a derivative: not all 0, and within half their size of the same
    gradients at jittered leaves (an absent jittered gradient is taken as equal)?"""
    size = moved = 0.0
    for g, j in pairs:
        size += float(g.double().square().sum())
        if j is not None and j.shape == g.shape:
            moved += float((g.double() - j.double()).square().sum())
    return size > 0 and moved <= size / 4


def _floor_nodes(ug: UnitGraph) -> dict[fx.Node, set[str]]:
    """Nodes with a floor (an eps) whose unit is not dimensionless, and the generators in it."""
    out: dict[fx.Node, set[str]] = {}
    for n in ug.graph.nodes:
        for f in record(n).floors:
            u = f.unit()
            if u is not None and not u.is_dimensionless:
                out.setdefault(n, set()).update(u.generators())
    return out


def _outputs(node: fx.Node) -> list[tuple[fx.Node, int | None]]:
    """Where a node's float outputs are: the node itself, and for a tuple (eval batch norm's) the
    ``getitem`` users that take its parts."""
    return [(node, None)] + [(u, int(u.args[1])) for u in node.users  # type: ignore[call-overload]
                             if u.target is operator.getitem and isinstance(u.args[1], int)]


def _floors_rate(ug: UnitGraph, env: Mapping[fx.Node, Any], grads: Mapping[fx.Node, torch.Tensor],
                 nodes: Mapping[fx.Node, set[str]], gen: str, h: float) -> tuple[float, float]:
    """The floors' share of D_g L and its rounding, by the chain rule: sum over floored nodes of
    <dL/dy, dy/dc>, dy/dc a central difference of the node alone on its recorded inputs with
    only its floors rescaled (at h and h/2, Richardson-extrapolated). Differencing the loss
    instead cannot resolve a generator whose whole effect is below the loss's own rounding (a
    batch norm after a saturated ReLU6 moves the loss by 1e-20)."""
    rate = noise = 0.0
    for node, gens in nodes.items():
        if gen not in gens:
            continue
        ys = {c: run_alone(ug, node, env, None, floors={gen: c}) for c in (1 + h, 1 - h, 1 + h / 2, 1 - h / 2)}
        for where, i in _outputs(node):
            gr = grads.get(where)
            if gr is None:
                continue
            part = {c: (y if i is None else y[i]) for c, y in ys.items()}
            if not all(isinstance(v, torch.Tensor) and v.shape == gr.shape for v in part.values()):
                continue
            d1 = (part[1 + h] - part[1 - h]) / (2 * h)
            d2 = (part[1 + h / 2] - part[1 - h / 2]) / h
            rate += float((gr * (4 * d2 - d1) / 3).sum())
            noise += 64 * EPS64 * float((gr.abs() * part[1 + h].abs()).sum()) / h
    return rate, noise


def _loss(ug: UnitGraph, leaves: Mapping[str, Any], floors: Mapping[str, float] | None) -> float:
    assert ug.loss_node is not None
    factor = (lambda u: u.character(floors)) if floors is not None else None
    with seeded(), torch.no_grad():
        return float(run_graph(ug.traced, leaves, factor, high=True)[ug.loss_node])


def _along(ug: UnitGraph, leaves: dict[str, Any], members: list[tuple[str, float]], gen: str, c: float) -> float:
    """The loss with the floors and every leaf carrying ``gen`` rescaled by c^exponent."""
    gmap = {gen: c}
    vals = dict(leaves)
    for name, _ in members:
        vals[name] = scale(leaves[name], unit_of(ug.node(name)), gmap)
    return _loss(ug, vals, gmap)


def _central(ug: UnitGraph, leaves: dict[str, Any], members: list[tuple[str, float]], gen: str, h: float) -> float:
    """The central difference of the loss along the generator's direction, leaves and floors."""
    return (_along(ug, leaves, members, gen, 1 + h) - _along(ug, leaves, members, gen, 1 - h)) / (2 * h)


def _forward_ad_ok(ug: UnitGraph) -> bool:
    """Forward-mode AD is trusted through ATen ops (they raise when they lack it); a custom op
    (a library's autograd.Function behind torch.ops) may silently drop tangents."""
    for n in ug.graph.nodes:
        t = n.target
        if n.op == "call_module" or (isinstance(t, torch._ops.OpOverload) and t.namespace not in ("aten", "prims")):
            return False
    return True


def _jvp(ug: UnitGraph, leaves: dict[str, Any], members: list[tuple[str, float]]) -> float | None:
    """d/dt L(W e^(t u_g(W))) at t = 0 by forward-mode AD; None where an op has no forward
    derivative."""
    assert ug.loss_node is not None
    try:
        with fwad.dual_level(), seeded():
            vals = dict(leaves)
            for name, ex in members:
                vals[name] = fwad.make_dual(leaves[name], ex * leaves[name])
            out = run_graph(ug.traced, vals, high=True)[ug.loss_node]
            tangent = fwad.unpack_dual(out).tangent
        return float(tangent) if tangent is not None else 0.0
    except (RuntimeError, NotImplementedError):
        return None


def fingerprint_checked(ug: UnitGraph, h: float = 1e-4, h_floor: float = 1e-3, threshold: float = 1e-11
                        ) -> tuple[list[FingerprintRow], list[Disagreement]]:
    """Rows per generator, and the generators whose measurement methods disagree."""
    loss_node = ug.loss_node
    if loss_node is None:
        raise OracleError("the radial fingerprint needs a model that returns a scalar loss")
    leaves = scaled_leaves(ug, None)
    leaf_nodes = {ug.node(name): name for name in leaves}

    def loss(env: dict[fx.Node, Any]) -> torch.Tensor:
        return env[loss_node]  # type: ignore[no-any-return]

    floor_nodes = _floor_nodes(ug)
    violating = [ug.node(v.node) for v in ug.violations]
    wrt = set(leaf_nodes) | {w for n in [*floor_nodes, *violating] if n.op != "output" for w, _ in _outputs(n)}
    run = run_with_grads(ug.traced, leaves, loss, wrt=wrt, high=True)
    if run.objective is None:
        raise OracleError("the model's loss does not depend on any float leaf")
    base = float(run.objective.detach())
    grads = {leaf_nodes[n]: gr for n, gr in run.grads.items() if n in leaf_nodes}
    # the same gradients at jittered leaves tell a derivative from rounding; a run that fails
    # there leaves the exact-zero test (every gradient equals itself)
    truncated = _truncated_leaves(ug)
    try:
        jittered = run_with_grads(ug.traced, _jittered(leaves, truncated), loss, wrt=wrt, high=True).grads
    except RunFailed:
        jittered = run.grads
    grads2 = {leaf_nodes[n]: gr for n, gr in jittered.items() if n in leaf_nodes}
    reach = _feeding(loss_node, run.env)
    consumed = _consumed(ug, reach, run.env, run.grads, jittered)
    forward_ad = _forward_ad_ok(ug)
    loss_gens = set(ug.loss_unit.generators()) if isinstance(ug.loss_unit, Unit) else set()
    by_gen: dict[str, list[tuple[str, float]]] = {}
    for name, v in leaves.items():
        unit = unit_of(ug.node(name))
        if not (isinstance(v, torch.Tensor) and v.is_floating_point() and isinstance(unit, Unit)):
            continue
        for gen, e in unit.items():
            if not Unit.generator(gen).is_opaque:
                by_gen.setdefault(gen, []).append((name, float(e)))
    rows: list[FingerprintRow] = []
    bad: list[Disagreement] = []
    for gen, members in sorted(by_gen.items()):
        denom = radial = 0.0
        pairs: list[tuple[torch.Tensor, torch.Tensor | None]] = []
        for name, ex in members:
            gr = grads.get(name)
            if gr is None:
                continue
            pairs.append((gr, grads2.get(name)))
            w = leaves[name]
            denom += abs(ex) * float(w.norm()) * float(gr.norm())
            radial += ex * float((w * gr).sum())
        # does the loss see the generator's leaves: a derivative, not 0 or rounding?
        seen = _significant(pairs)
        floors, floor_noise = _floors_rate(ug, run.env, run.grads, floor_nodes, gen, h_floor)
        rate = radial + floors
        # a ReLU or max after a sum of a scaled and an unscaled term has kinks the direction may
        # cross: there the central difference errs by O(h), not O(h^2). Shrink the step until it
        # agrees within its own rounding (which grows as 1/step); one that never does disagrees
        for step in (h, h / 10, h / 100):
            fd = _central(ug, leaves, members, gen, step)
            agree = abs(fd - rate) <= 1e-5 * (abs(rate) + denom) + 1024 * EPS64 * abs(base) / step
            if agree:
                break
        jvp = _jvp(ug, leaves, members) if forward_ad else None
        # rounding of the measured rate: the loss's own float64 rounding through the floors'
        # difference quotient, and the backprop sum's
        noise = floor_noise + 1e-12 * denom + (0.0 if seen else abs(radial))
        if jvp is not None:
            noise += 4 * abs(jvp - radial)
        scale_ = denom if denom > 0 else 1e-300
        methods = {"backprop": radial, "floors": floors, "finite_difference": fd}
        if step != h:
            methods["finite_difference_step"] = step
        if jvp is not None:
            methods["jvp"] = jvp
            agree = agree and abs(jvp - radial) <= 1e-8 * (denom + abs(radial)) + 1e-12 * abs(base)
        row = FingerprintRow(
            generator=gen,
            leaves=[ug.traced.leaves[n].name for n, _ in members],
            # a generator whose leaves the loss does not see on this run (every gradient 0 or
            # rounding, no floor: CvT's last query norm, on spatial rows its classifier never
            # reads; DBRX's top-1 router, whose weights are divided by their own norm) moves
            # nothing, whatever consumed it
            predicted_gauge=gen not in loss_gens and (gen not in consumed or not seen and floors == 0.0),
            measured=abs(rate) / scale_,
            weights_only=abs(radial) / scale_,
            threshold=threshold + noise / scale_,
            rate=rate,
            methods=methods,
            methods_agree=agree and all(math.isfinite(v) for v in methods.values()),
        )
        rows.append(row)
        # a direction that moves a truncated leaf crosses the jumps of the truncation: its central
        # difference measures them, not a rate, and its disagreement with backprop is no finding
        if not row.methods_agree and not any(name in truncated for name, _ in members):
            shown = ", ".join(f"{k} {v:.6g}" for k, v in methods.items())
            bad.append(Disagreement("fingerprint", gen, "D_g L", gen,
                                    f"measurement methods disagree ({shown}; D_g L = {rate:.6g})"))
    return rows, bad


def fingerprint_graph(ug: UnitGraph, h: float = 1e-4, threshold: float = 1e-11) -> list[FingerprintRow]:
    return fingerprint_checked(ug, h=h, threshold=threshold)[0]
