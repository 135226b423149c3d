"""Global mode: every leaf rescaled by its character and the whole graph re-run in float64. Every
node free of opaque generators must give ``out' = chi_u(g) out``, and its gradient must scale
by the character of the gradient unit the engine stored on it (Prop. 1) where no violation lies
between it and the loss."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import torch
import torch.fx as fx

from ..fxutil import op_name
from ..record import record, unit_of
from ..unitgraph import UnitGraph
from ..units import Unit
from ..values import Poly
from .compare import close, compare_tree, rounding_noise
from .interp import (
    GradRun,
    RunFailed,
    draw,
    is_value,
    leaf_values,
    run_with_grads,
    runs_on_its_inputs,
    scale,
)
from .local import agrees
from .result import Disagreement, OracleError, OracleResult

__all__ = ["global_mode", "scaled_leaves"]


def scaled_leaves(ug: UnitGraph, g: Mapping[str, float] | None) -> dict[str, Any]:
    """Leaf values in float64, each rescaled by the character of its unit under ``g``."""
    leaves = leaf_values(ug.traced, high=True)
    if g is not None:
        for name, v in leaves.items():
            leaves[name] = scale(v, unit_of(ug.node(name)), g)
    return leaves


def _downstream_violation(ug: UnitGraph) -> set[fx.Node]:
    """Nodes with a violation on some path to the output (Prop. 1 does not reach them)."""
    tainted: set[fx.Node] = set()
    for node in reversed(list(ug.graph.nodes)):
        for u in node.users:
            if record(u).opaque_source or u in tainted:
                tainted.add(node)
                break
    return tainted


def _upstream_violation(ug: UnitGraph) -> set[fx.Node]:
    """Nodes computed from a violation's output. A normaliser can erase the opaque generator
    from the unit, but the value still moved off the predicted direction: only local mode can
    judge these nodes."""
    tainted: set[fx.Node] = set()
    for node in ug.graph.nodes:
        if record(node).opaque_source or any(p in tainted for p in node.all_input_nodes):
            tainted.add(node)
    return tainted


def _checkable(unit: Any) -> Unit | None:
    if isinstance(unit, Poly):
        return Unit()
    if isinstance(unit, Unit) and not unit.is_opaque:
        return unit
    return None


def _first_output(ug: UnitGraph) -> fx.Node:
    return next(o for o in ug.traced.output_nodes() if isinstance(o, fx.Node))


PROBE_SEED = 7


def _probe(like: torch.Tensor) -> torch.Tensor:
    """A fixed random direction shaped like the run's real output (the graph's recorded shape may
    hold symbols a replayed or dynamic capture left)."""
    return torch.randn(tuple(like.shape), generator=torch.Generator().manual_seed(PROBE_SEED), dtype=torch.float64)


def _run(ug: UnitGraph, g: Mapping[str, float] | None, probe: bool,
         probe_unit: Unit | None) -> tuple[GradRun, float]:
    """Values and gradients of the loss (or of <output, probe>), and the loss's magnitude (the
    scale against which a gradient is judged to be rounding noise)."""
    loss_node = ug.loss_node
    scale_box: list[float] = [0.0]

    def objective(env: dict[fx.Node, Any]) -> torch.Tensor:
        if loss_node is not None:
            loss = env[loss_node]
            scale_box[0] = float(loss.detach().abs().sum())
            return loss  # type: ignore[no-any-return]
        out = env[_first_output(ug)]
        r = _probe(out) if probe else torch.zeros_like(out)
        if g is not None and probe_unit is not None:
            r = r * probe_unit.character(g)
        scale_box[0] = float((out * r).detach().abs().sum())
        return (out * r).sum()

    factor = (lambda u: u.character(g)) if g is not None else None
    run = run_with_grads(ug.traced, scaled_leaves(ug, g), objective, factor, high=True)
    return run, scale_box[0]


def global_mode(ug: UnitGraph, res: OracleResult, rng: random.Random) -> None:
    g = draw(ug.generators(), rng)
    loss_node = ug.loss_node
    probe, probe_unit = False, None
    if loss_node is None:
        out = _first_output(ug)
        if not isinstance(out.meta.get("val"), torch.Tensor):
            raise OracleError("the model's first output is not a tensor; return a tensor or a loss")
        probe = True
        u = unit_of(out)
        probe_unit = u.inverse() if isinstance(u, Unit) else None
    with runs_on_its_inputs():
        base, base_scale = _run(ug, None, probe, probe_unit)
    res.raised_casts = base.raised
    upstream = _upstream_violation(ug)
    try:
        scaled, scaled_scale = _run(ug, g, probe, probe_unit)
    except RunFailed as err:
        # indices chosen from a violation's output (an argmax over unitful logits) may leave the
        # table under the draw: the model itself is not equivariant there, which local mode judges
        if err.node in upstream:
            res.notes.append(f"global mode not run: under the draw the model fails at {err.node.name}, "
                             f"computed from a violation's output ({_short(err)})")
            return
        res.disagreements.append(Disagreement("global", err.node.name, op_name(err.node), str(unit_of(err.node)),
                                              f"the rescaled run fails: {_short(err)}"))
        return
    loss_unit = ug.loss_unit if loss_node is not None else Unit()
    end = loss_node if loss_node is not None else _first_output(ug)
    end_unit = unit_of(end)
    # Prop. 1 needs an invariant loss: not opaque, and not computed from a violation's output
    grads_ok = (
        loss_unit is not None and not loss_unit.is_opaque and end not in upstream
        and not (isinstance(end_unit, Unit) and end_unit.is_opaque)
    )
    tainted = _downstream_violation(ug) if grads_ok else set()
    noisy: set[fx.Node] = set()
    for node in ug.graph.nodes:
        if node.op == "output" or node in upstream:
            continue
        rec = record(node)
        unit = _checkable(rec.unit)
        value = base.env.get(node)
        if unit is not None and is_value(value):
            res.global_checked += 1
            expected = value * unit.character(g)
            ok, why = compare_tree(scaled.env[node], expected)
            if not ok:
                ok, why = agrees(ug, node, scaled.env, None, scaled.env[node], expected)
                # rounding noise (a value zero in exact arithmetic), or a value made from such
                # noise (a normaliser of it amplifies it): no scaling law to check
                ok = ok or any(p in noisy for p in node.all_input_nodes)
                if ok:
                    noisy.add(node)
            if ok:
                res.global_agreed += 1
            else:
                res.disagreements.append(Disagreement("global", node.name, op_name(node), str(unit), why))
        # a polymorphic value (a mask, x - x) has no definite unit, hence no dual law
        if grads_ok and node in base.grads and node not in tainted and isinstance(rec.unit, Unit):
            res.grad_checked += 1
            ok, why = _grad_agrees(node, rec.grad_unit, g, base, scaled, base_scale, scaled_scale)
            if ok:
                res.grad_agreed += 1
            else:
                res.disagreements.append(Disagreement("grad", node.name, op_name(node), str(rec.grad_unit), why))


def _grad_agrees(node: fx.Node, grad_unit: Any, g: Mapping[str, float], base: GradRun, scaled: GradRun,
                 base_scale: float, scaled_scale: float) -> tuple[bool, str]:
    """The measured gradient scaling against the gradient unit the engine stored."""
    if not isinstance(grad_unit, Unit):
        return False, f"the engine stored no gradient unit ({grad_unit!r})"
    if node not in scaled.grads:
        return False, "no gradient"
    if rounding_noise(base.grads[node], base.env[node], base_scale) and \
            rounding_noise(scaled.grads[node], scaled.env[node], scaled_scale):
        return True, ""  # zero in exact arithmetic on both sides: 0 scales to 0
    return close(scaled.grads[node], base.grads[node] * grad_unit.character(g))


def _short(err: BaseException, limit: int = 160) -> str:
    line = str(err).splitlines()[0] if str(err) else type(err).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."
