"""Local mode: every node re-run alone on its recorded inputs, each rescaled by the character of
its own unit (opaque generators included), so every node is judged, even downstream of a
violation. A node the rules call consistent must give ``out' = chi_u(g) out``; a node the rules
call a violation must break the identity (its ratio ``out'/out`` varies across elements; for a
scalar, ``r(g^2) != r(g)^2``)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

import torch
import torch.fx as fx
from torch.fx.node import map_arg
from torch.utils import _pytree as pytree

from ..fxutil import base_name, float_tensors, op_name, row_of_index_write
from ..record import record, unit_of
from ..unitgraph import UnitGraph
from ..units import Unit
from .compare import close, compare_tree, ratio_varies, rounding_bounds
from .interp import (
    call_node,
    default_dtype,
    draw,
    floor_factor_args,
    high_precision_args,
    is_value,
    scale,
    seeded,
)
from .result import Disagreement, OracleResult

__all__ = ["local_mode", "run_alone", "agrees", "live_inputs", "unexercised"]

Env = Mapping[fx.Node, Any]
_CALLS = ("call_function", "call_method", "call_module")


def run_alone(ug: UnitGraph, node: fx.Node, env: Env, g: Mapping[str, float] | None,
              convert: Callable[[torch.Tensor], torch.Tensor] | None = None,
              floors: Mapping[str, float] | None = None) -> Any:
    """The node on its recorded inputs (rescaled by g); ``convert`` maps every float input;
    ``floors`` rescales only the node's floors (its inputs as recorded)."""
    def scaled(n: fx.Node) -> Any:
        return scale(env[n], unit_of(n), g) if g is not None else env[n]

    def value(n: fx.Node) -> Any:
        if g is not None and n is through:  # a row of an index write: its operands rescaled, not the mix
            v = call_node(ug.traced.gm, n, *map_arg((tuple(n.args), dict(n.kwargs)), scaled), high=True)
        else:
            v = scaled(n)
        return convert(v) if convert is not None and isinstance(v, torch.Tensor) and v.is_floating_point() else v

    through = node.args[0] if row_of_index_write(node) is not None else None

    args = map_arg(node.args, value)
    kwargs = map_arg(node.kwargs, value)
    if g is not None or floors is not None:
        by = g if g is not None else floors
        args, kwargs = floor_factor_args(node, args, kwargs, lambda u: u.character(by))  # type: ignore[arg-type]
    high = convert is None  # the float32 rerun of the rounding check keeps its precision
    if high:
        args, kwargs, _ = high_precision_args(node, args, kwargs)  # type: ignore[arg-type]
    with seeded(), torch.no_grad(), default_dtype(torch.float64 if high else torch.float32):
        if convert is torch.abs and node.target in _SUB_AS_ADD:  # |a| - |b| cancels again
            return _SUB_AS_ADD[node.target](*args, **kwargs)
        return call_node(ug.traced.gm, node, args, kwargs, high)  # type: ignore[arg-type]


# the size of the terms a difference cancelled is |a| + |b|, not |a| - |b|
_SUB_AS_ADD: dict[Any, Any] = {torch.ops.aten.sub.Tensor: torch.ops.aten.add.Tensor,
                               torch.ops.aten.sub.Scalar: torch.ops.aten.add.Scalar}


def agrees(ug: UnitGraph, node: fx.Node, env: Env, g: Mapping[str, float] | None,
           actual: Any, expected: Any) -> tuple[bool, str]:
    """The node's outputs against the law, with a second look after a mismatch: is it float64
    rounding of a value that is zero in exact arithmetic? (``env`` rescaled by ``g`` gives the
    node's inputs in the run that produced ``actual``.)"""
    ok, why = compare_tree(actual, expected)
    if not ok and node.op in _CALLS:
        floor = rounding_bounds(actual, lambda convert: run_alone(ug, node, env, g, convert=convert))
        if floor is not None and compare_tree(actual, expected, atol=floor)[0]:
            return True, ""
    return ok, why


def _fmt(unit: Any) -> str:
    return str(unit) if isinstance(unit, Unit) else repr(unit)


def local_mode(ug: UnitGraph, env: Env, res: OracleResult, rng: random.Random) -> None:
    gens = ug.generators()
    g1 = draw(gens, rng)
    g2 = {k: v * v for k, v in g1.items()}
    for node in ug.graph.nodes:
        if node.op not in _CALLS:
            continue
        rec = record(node)
        if not float_tensors(env.get(node)):
            if rec.violation:
                _confirm_index(ug, node, env, res, g1)
            continue
        res.float_nodes += 1
        if rec.violation:
            if unexercised(node, env):
                res.unexercised.append(node.name)
            else:
                _confirm(ug, node, env, res, g1, g2)
            continue
        if rec.unknown:
            res.unchecked.append(node.name)
            continue
        res.checked += 1
        base = run_alone(ug, node, env, None)
        scaled = run_alone(ug, node, env, g1)
        ok, why = agrees(ug, node, env, g1, scaled, scale(base, rec.unit, g1))
        if ok:
            res.agreed += 1
        else:
            res.disagreements.append(Disagreement("local", node.name, op_name(node), _fmt(rec.unit), why))
        if rec.interface:
            _confirm_interface(node, base, scaled, res)


def unexercised(node: fx.Node, env: Env) -> bool:
    """Do the example's values leave the node's mixing unexercised? An empty float tensor going in
    or out, or, for an op that selects by mask, a mask that is all True or all False (the image or
    audio part of a multimodal model given text only, a ``where`` whose branch is never taken):
    only one operand reaches the output, so a violation there can be neither confirmed nor
    refuted on these values."""
    values = [env.get(p) for p in node.all_input_nodes] + [env.get(node)]
    if any(_empty(v) for v in values):
        return True
    choice = _choice(node, env)
    return choice is not None and (bool(choice[0].all()) or not bool(choice[0].any()))


def _empty(value: Any) -> bool:
    """A value whose float tensors are all empty (a tuple such as eval batch norm's, with empty
    statistics beside its output, is not)."""
    ts = float_tensors(value)
    return bool(ts) and all(t.numel() == 0 for t in ts)


# ops whose boolean argument chooses which operand each element comes from
_SELECTING = {"where", "masked_fill", "masked_scatter", "index_put", "_unsafe_index_put"}


def live_inputs(node: fx.Node, env: Env) -> list[fx.Node]:
    """The inputs whose values reach the node's output on these values: all of them, less an
    empty float tensor, and, for an op that selects by a mask that is all True or all False,
    less the operand it never takes (``masked_scatter(x, none, src)`` is x)."""
    inputs = [p for p in node.all_input_nodes if not _empty(env.get(p))]
    choice = _choice(node, env)
    if choice is None:
        return inputs
    taken, when_true, when_false = choice
    everywhere, nowhere = bool(taken.all()), not bool(taken.any())
    if not (everywhere or nowhere):
        return inputs
    dropped = when_false if everywhere else when_true
    pos = [a for a in node.args if isinstance(a, fx.Node)]
    return [p for p in inputs if p is not dropped or p in pos and pos.count(p) > 1]


def _choice(node: fx.Node, env: Env) -> tuple[torch.Tensor, Any, Any] | None:
    """For an op that takes each output element from one of two operands: where it takes the
    first (a boolean tensor), the operand it takes there, and the one it takes elsewhere.
    ``where(mask, a, b)``; ``masked_fill``/``masked_scatter(x, mask, value)``; and
    ``index_put(x, indices, values)``, which takes ``values`` where the indices land (Informer's
    ``context[rows, top] = attn`` overwrites every row when u reaches the sequence length)."""
    name = base_name(node).rstrip("_")
    if name not in _SELECTING or len(node.args) < 2:
        return None
    if name in ("index_put", "_unsafe_index_put"):
        accumulate = node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False)
        dest, indices = env.get(node.args[0]), node.args[1]  # type: ignore[arg-type]
        if accumulate or len(node.args) < 3 or not isinstance(dest, torch.Tensor) or not isinstance(indices, (list, tuple)):
            return None
        idx = [env.get(i) if isinstance(i, fx.Node) else i for i in indices]
        try:
            landed = torch.zeros(dest.shape, dtype=torch.bool).index_put_(tuple(idx), torch.tensor(True))  # type: ignore[arg-type]
        except (RuntimeError, IndexError, TypeError):
            return None
        return landed, node.args[2], node.args[0]
    mask_node = node.args[0 if name == "where" else 1]
    m = env.get(mask_node) if isinstance(mask_node, fx.Node) else None
    if not (isinstance(m, torch.Tensor) and m.dtype == torch.bool and m.numel() > 0):
        return None
    when_true = node.args[1] if name == "where" else (node.args[2] if len(node.args) > 2 else None)
    when_false = node.args[2] if name == "where" else node.args[0]
    return m, when_true, when_false


def _refuted(ug: UnitGraph, node: fx.Node, env: Env, g1: Mapping[str, float], g2: Mapping[str, float]) -> bool:
    """Does the draw break the equivariance identity at ``node`` on the inputs in ``env``?"""
    base = float_tensors(run_alone(ug, node, env, None))
    s1 = float_tensors(run_alone(ug, node, env, g1))
    s2: list[torch.Tensor] | None = None
    for i, (b, a) in enumerate(zip(base, s1)):
        if b.numel() == 1:
            s2 = s2 if s2 is not None else float_tensors(run_alone(ug, node, env, g2))
            r1, r2 = float(a) / float(b), float(s2[i]) / float(b)
            if abs(r2 - r1 * r1) > 1e-6 * max(abs(r1 * r1), 1e-300):
                return True
        elif ratio_varies(a, b):
            return True
    return False


def _fresh_inputs(node: fx.Node, env: Env, seed: int, spread: float = 0.0,
                  kept: Collection[fx.Node] = ()) -> dict[fx.Node, Any]:
    """The recorded inputs with every float tensor but ``kept`` replaced by an independent
    Gaussian draw, each element times ``10**u`` with u uniform in [-spread, spread] (a literal
    threshold such as ``clamp(x, -10, 10)`` only shows at magnitudes that reach it)."""
    g = torch.Generator().manual_seed(seed)
    out = dict(env)
    for p in node.all_input_nodes:
        v = env.get(p)
        if is_value(v) and p not in kept:
            x = torch.randn(v.shape, generator=g, dtype=v.dtype)
            if spread:
                u = torch.rand(v.shape, generator=g, dtype=torch.float64) * (2 * spread) - spread
                x = x * torch.pow(10.0, u).to(v.dtype)
            out[p] = x
    return out


def _thresholds(node: fx.Node, env: Env) -> list[fx.Node]:
    """The 0-d float operands after the first: a bound held as a scalar tensor (Gemma 3n clamps
    at a buffer of 1e10) is a threshold as a literal is; the first operand is what is compared
    or clamped (``x.amax() >= 5``), whatever its shape."""
    first = next((a for a in node.args if isinstance(a, fx.Node)), None)
    return [p for p in node.all_input_nodes if p is not first and is_value(v := env.get(p))
            and v.dim() == 0 and not v.is_complex()]


def _literals(node: fx.Node, env: Env) -> list[float]:
    """The finite non-zero numbers among the node's arguments, with the values of its thresholds
    held in tensors (see :func:`_thresholds`)."""
    numbers = [a for a in pytree.tree_leaves((node.args, node.kwargs)) if isinstance(a, (int, float))]
    numbers += [float(env[p]) for p in _thresholds(node, env)]
    return [float(a) for a in numbers if not isinstance(a, bool) and math.isfinite(a) and a != 0]


def _largest_literal(node: fx.Node, env: Env) -> float:
    """The largest finite threshold among the node's arguments (1 when there is none)."""
    return max([1.0, *(abs(a) for a in _literals(node, env))])


def _straddling_inputs(node: fx.Node, env: Env, g: Mapping[str, float], seed: int) -> dict[fx.Node, Any] | None:
    """Fresh inputs half of whose elements sit at ``L / sqrt(c)`` for each literal L of the node
    (c: the character of the input's unit under g), so that the draw carries them across L: the
    witness for a threshold (``x >= -5``, ``clamp(x, max=5)``) that random values rarely straddle."""
    lits = _literals(node, env)
    if not lits:
        return None
    kept = _thresholds(node, env)  # a threshold itself keeps its recorded value
    out = _fresh_inputs(node, env, seed, kept=kept)
    for p in node.all_input_nodes:
        unit, v = unit_of(p), out.get(p)
        if p in kept:
            continue
        if not (is_value(v) and isinstance(unit, Unit)) or v.numel() == 0:
            continue
        c = unit.character(g)
        if abs(math.log(c)) < 1e-3:
            continue
        targets = torch.tensor([t for lit in lits for t in (lit, -lit)], dtype=v.dtype) / math.sqrt(c)
        flat = v.reshape(-1).clone()
        half = max(1, flat.numel() // 2)
        flat[:half] = targets.repeat(half // len(targets) + 1)[:half]
        out[p] = flat.reshape(v.shape)
    return out


def _witnesses(node: fx.Node, env: Env, g: Mapping[str, float]) -> Iterator[Env]:
    """The inputs a violation is tried on, in order: the recorded ones, independent Gaussian
    ones, Gaussian ones spread from 1e-3 to beyond the node's largest literal, and ones that
    straddle each literal under the draw."""
    yield env
    yield _fresh_inputs(node, env, 99)
    yield _fresh_inputs(node, env, 98, spread=max(3.0, math.log10(_largest_literal(node, env)) + 2.0),
                        kept=_thresholds(node, env))
    straddling = _straddling_inputs(node, env, g, 97)
    if straddling is not None:
        yield straddling


def _confirm(ug: UnitGraph, node: fx.Node, env: Env, res: OracleResult,
             g1: Mapping[str, float], g2: Mapping[str, float]) -> None:
    """A violation must break the identity. The recorded inputs are the first witness; when they
    happen to hide it (an input that is an exact multiple of another, a branch never taken), an
    identity is refuted by any input, so independent Gaussian inputs of the same shapes are the
    second; see :func:`_witnesses` for the rest."""
    res.violations += 1
    if any(_refuted(ug, node, w, g1, g2) for w in _witnesses(node, env, g1)):
        res.confirmed += 1
        return
    res.disagreements.append(
        Disagreement("violation", node.name, op_name(node), record(node).violation or "",
                     "reported as a violation but the node is equivariant under the draw")
    )


def _confirm_interface(node: fx.Node, base: Any, scaled: Any, res: OracleResult) -> None:
    """A loss that is not dimensionless: its value must change under the draw (L' != L)."""
    res.violations += 1
    b, a = float_tensors(base), float_tensors(scaled)
    if b and a and not close(a[0], b[0])[0]:
        res.confirmed += 1
    else:
        res.disagreements.append(Disagreement("violation", node.name, op_name(node),
                                              record(node).interface or "",
                                              "the loss is invariant under the draw"))


def _index_changes(ug: UnitGraph, node: fx.Node, env: Env, g1: Mapping[str, float]) -> bool:
    base = run_alone(ug, node, env, None)
    scaled = run_alone(ug, node, env, g1)
    return any(
        not torch.equal(a, b)
        for a, b in zip(pytree.tree_leaves(scaled), pytree.tree_leaves(base))
        if isinstance(a, torch.Tensor)
    )


def _confirm_index(ug: UnitGraph, node: fx.Node, env: Env, res: OracleResult, g1: Mapping[str, float]) -> None:
    """An integer or boolean output (``x > 0.5``, a bucket index) must change under the draw, on
    the recorded inputs or on the same fresh witnesses as :func:`_confirm` (a threshold only
    shows where values cross it)."""
    res.violations += 1
    if any(_index_changes(ug, node, w, g1) for w in _witnesses(node, env, g1)):
        res.confirmed += 1
    else:
        res.disagreements.append(
            Disagreement("violation", node.name, op_name(node), record(node).violation or "",
                         "index output unchanged under the draw")
        )
