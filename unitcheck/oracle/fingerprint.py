"""The radial fingerprint (seed 000, Prop. 6): for each generator g, the loss's rate along "scale
every leaf W by c^(u_g(W))" is ~0 exactly when the static pass calls g a gauge direction (the
loss unit does not involve g and no violating op consumed a value whose unit involves g)."""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from ..record import unit_of
from ..unitgraph import UnitGraph
from ..units import Unit
from .global_ import scaled_leaves
from .interp import run_graph, run_with_grads, scale, seeded
from .result import FingerprintRow, OracleError

__all__ = ["fingerprint_graph"]


def _loss_along(ug: UnitGraph, leaves: dict[str, Any], gen: str, members: list[tuple[str, float]], c: float) -> float:
    """The loss with every leaf carrying ``gen`` (and every floor) rescaled by c^exponent."""
    gmap = {gen: c}
    vals = dict(leaves)
    for name, _ in members:
        vals[name] = scale(leaves[name], unit_of(ug.node(name)), gmap)
    with seeded(), torch.no_grad():
        out = run_graph(ug.traced, vals, floor_factor=lambda u: u.character(gmap))
    assert ug.loss_node is not None
    return float(out[ug.loss_node])


def _consumed(ug: UnitGraph) -> set[str]:
    """Generators that some violation consumed (their direction reaches the loss non-trivially)."""
    out: set[str] = set()
    for v in ug.violations:
        if v.rule != "UC901":
            out.update(v.extra.get("consumed", ()))
    return out


def fingerprint_graph(ug: UnitGraph, h: float = 1e-4, threshold: float = 1e-7) -> list[FingerprintRow]:
    loss_node = ug.loss_node
    if loss_node is None:
        raise OracleError("the radial fingerprint needs a model that returns a scalar loss")
    leaves = scaled_leaves(ug, None)
    leaf_nodes = {ug.node(name): name for name in leaves}

    def loss(env: dict[fx.Node, Any]) -> torch.Tensor:
        return env[loss_node]  # type: ignore[no-any-return]

    run = run_with_grads(ug.traced, leaves, loss, wrt=leaf_nodes)
    grads = {leaf_nodes[n]: gr for n, gr in run.grads.items() if n in leaf_nodes}
    consumed = _consumed(ug)
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
    for gen, members in sorted(by_gen.items()):
        rate = (_loss_along(ug, leaves, gen, members, 1 + h) - _loss_along(ug, leaves, gen, members, 1 - h)) / (2 * h)
        denom = 0.0
        radial = 0.0
        for name, ex in members:
            gr = grads.get(name)
            if gr is None:
                continue
            w = leaves[name]
            denom += abs(ex) * float(w.norm()) * float(gr.norm())
            radial += ex * float((w * gr).sum())
        denom = denom if denom > 0 else 1e-300
        rows.append(
            FingerprintRow(
                generator=gen,
                leaves=[ug.traced.leaves[n].name for n, _ in members],
                predicted_gauge=gen not in loss_gens and gen not in consumed,
                measured=abs(rate) / denom,
                weights_only=abs(radial) / denom,
                threshold=threshold,
            )
        )
    return rows
