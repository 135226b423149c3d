"""Ground truth for the engine (SPEC 7): equivariance checks and the radial fingerprint.

- *local*: every node is re-run alone on its recorded inputs, each rescaled by the character of
  its own unit (opaque generators included). A node the rules call consistent must give
  ``out' = chi_u(g) out``; a node the rules call a violation must fail for every character: the
  ratio ``out'/out`` varies across elements (for a scalar: ``r(g^2) != r(g)^2``).
- *global*: every leaf is rescaled by its character and the whole graph re-run in float64; every
  node free of opaque generators must give ``out' = chi_u(g) out``, and its gradient the dual law
  ``grad' = chi(u(L) - u(v)) grad`` (Prop. 1) where no violation lies between it and the loss.
- *fingerprint* (Prop. 6): for each generator g, D_g L is ~0 exactly when the static pass calls g
  a gauge direction.

Numerical floors (eps) carry the unit of what they guard and are rescaled with it, so every
identity is exact up to float64 rounding.

>>> res = unitcheck.oracle.verify(model, (idx, targets))   # doctest: +SKIP
>>> res.checked == res.agreed and res.violations == res.confirmed   # doctest: +SKIP
True
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch import nn
from torch.fx.node import map_arg
from torch.utils import _pytree as pytree

from .errors import UnitcheckError
from .execute import call_node, floor_factor_args, run_graph
from .fxutil import op_name
from .infer import infer_units
from .record import record, unit_of
from .unitgraph import UnitGraph
from .units import Unit
from .values import Poly

__all__ = ["OracleResult", "Disagreement", "FingerprintRow", "verify", "fingerprint", "OracleError"]

RTOL = 1e-6
EXTREME = 1e30
ROUNDOFF = 1e-12  # relative to the loss: far above float64 rounding (~1e-16), far below any real effect


class OracleError(UnitcheckError, RuntimeError):
    """The oracle needs real values (it cannot run on meta tensors) or a runnable model."""


@dataclass
class Disagreement:
    mode: str  # "local", "global", "grad", "violation"
    node: str
    op: str
    unit: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.mode}] {self.node} ({self.op}) unit {self.unit}: {self.detail}"


@dataclass
class FingerprintRow:
    generator: str
    leaves: list[str]
    predicted_gauge: bool
    measured: float  # |D_g L| / sum_W |u_g(W)| ||W|| ||grad_W L||, floors carried
    weights_only: float  # the same with sum_W u_g(W) <W, grad_W L> (no floors), as in the paper
    threshold: float

    @property
    def measured_gauge(self) -> bool:
        return self.measured < self.threshold

    @property
    def match(self) -> bool:
        return self.predicted_gauge == self.measured_gauge

    def to_json(self) -> dict[str, Any]:
        return {
            "generator": self.generator,
            "leaves": self.leaves,
            "predicted_gauge": self.predicted_gauge,
            "measured": self.measured,
            "weights_only": self.weights_only,
            "threshold": self.threshold,
            "measured_gauge": self.measured_gauge,
            "match": self.match,
        }


@dataclass
class OracleResult:
    checked: int = 0
    agreed: int = 0
    violations: int = 0
    confirmed: int = 0
    global_checked: int = 0
    global_agreed: int = 0
    grad_checked: int = 0
    grad_agreed: int = 0
    float_nodes: int = 0
    unchecked: list[str] = field(default_factory=list)
    disagreements: list[Disagreement] = field(default_factory=list)
    fingerprint: list[FingerprintRow] | None = None

    @property
    def ok(self) -> bool:
        fp_ok = self.fingerprint is None or all(r.match for r in self.fingerprint)
        return (
            not self.disagreements
            and self.checked == self.agreed
            and self.violations == self.confirmed
            and self.global_checked == self.global_agreed
            and self.grad_checked == self.grad_agreed
            and fp_ok
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "checked": self.checked,
            "agreed": self.agreed,
            "disagreements": [str(d) for d in self.disagreements],
            "violations": self.violations,
            "confirmed": self.confirmed,
            "float_nodes": self.float_nodes,
            "unchecked": self.unchecked,
            "global": {"checked": self.global_checked, "agreed": self.global_agreed},
            "gradients": {"checked": self.grad_checked, "agreed": self.grad_agreed},
        }
        if self.fingerprint is not None:
            out["fingerprint"] = {
                "generators": len(self.fingerprint),
                "matches": sum(r.match for r in self.fingerprint),
                "rows": [r.to_json() for r in self.fingerprint],
            }
        return out


# -- preparation ------------------------------------------------------------------------------


def _to64(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.detach().to(torch.float64)
    return x


def _redraw(model: nn.Module, seed: int) -> None:
    """Every parameter redrawn at its own RMS (or 0.02 when it was zero), random signs, no zeros:
    a zero-initialised bias would otherwise make radial sensitivities vanish trivially."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if not p.is_floating_point():
                continue
            rms = float(p.double().pow(2).mean().sqrt()) if p.numel() else 0.0
            scale = rms if rms > 0 and math.isfinite(rms) else 0.02
            mag = torch.empty(p.shape, dtype=torch.float64).uniform_(0.5, 1.5, generator=g)
            sign = torch.randint(0, 2, p.shape, generator=g, dtype=torch.float64) * 2 - 1
            p.copy_((scale * mag * sign).to(p.dtype))


def prepare(
    model: nn.Module, example_inputs: Any, seed: int = 0, redraw: bool = True, **infer_kw: Any
) -> tuple[nn.Module, Any, UnitGraph]:
    """A float64 copy of the model (parameters redrawn) and its unit graph."""
    for t in list(model.parameters()) + list(model.buffers()):
        if t.device.type == "meta":
            raise OracleError(
                "the oracle needs real values; this model was built on the meta device "
                "(static lint only). Build it with real weights to verify."
            )
    model64 = copy.deepcopy(model).to(torch.float64)
    if redraw:
        _redraw(model64, seed)
    inputs64 = pytree.tree_map(_to64, example_inputs)
    ug = infer_units(model64, inputs64, **infer_kw)
    return model64, inputs64, ug


def draw(generators: list[str], rng: random.Random) -> dict[str, float]:
    """g_k log-uniform in [1/4, 4] per generator."""
    return {gen: 4.0 ** rng.uniform(-1.0, 1.0) for gen in generators}


def _scale(value: Any, unit: Any, g: Mapping[str, float]) -> Any:
    if isinstance(value, (tuple, list)) and isinstance(unit, tuple):
        return type(value)(_scale(v, u, g) for v, u in zip(value, unit))
    if isinstance(value, torch.Tensor) and value.is_floating_point() and isinstance(unit, Unit):
        return value * unit.character(g)
    return value


def _leaf_values(ug: UnitGraph, g: Mapping[str, float] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, leaf in ug.traced.leaves.items():
        v = leaf.value
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            v = v.detach().to(torch.float64)
            if g is not None:
                node = _node(ug, name)
                v = _scale(v, unit_of(node), g)
        out[name] = v
    return out


def _node(ug: UnitGraph, name: str) -> fx.Node:
    return ug.node(name)


# -- comparisons ------------------------------------------------------------------------------


def _floats(x: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(x) if isinstance(t, torch.Tensor) and t.is_floating_point()]


def close(actual: torch.Tensor, expected: torch.Tensor, rtol: float = RTOL, atol: float = 0.0) -> tuple[bool, str]:
    """Elementwise equality up to rtol times the tensor's scale; extreme values (masks) agree when
    both are extreme with the same sign."""
    a, e = actual.detach().double(), expected.detach().double()
    if a.shape != e.shape:
        return False, f"shape {tuple(a.shape)} vs {tuple(e.shape)}"
    ext_a = ~torch.isfinite(a) | (a.abs() >= EXTREME)
    ext_e = ~torch.isfinite(e) | (e.abs() >= EXTREME)
    if not torch.equal(ext_a, ext_e):
        return False, "extreme (masked) entries differ"
    if ext_a.any():
        sa, se = torch.sign(a[ext_a]), torch.sign(e[ext_e])
        nan_a, nan_e = torch.isnan(a[ext_a]), torch.isnan(e[ext_e])
        if not (torch.equal(nan_a, nan_e) and torch.equal(sa[~nan_a], se[~nan_e])):
            return False, "extreme entries differ in sign"
    fin = ~ext_e
    if not fin.any():
        return True, ""
    af, ef = a[fin], e[fin]
    scale = float(ef.abs().max())
    err = float((af - ef).abs().max())
    tol = rtol * scale + atol + 1e-300
    if err <= tol:
        return True, ""
    return False, f"max abs error {err:.3g} > {tol:.3g} (scale {scale:.3g})"


def _ratio_varies(scaled: torch.Tensor, base: torch.Tensor) -> bool:
    """No single factor c gives scaled = c * base: the least-squares residual is not rounding
    (a non-zero output from a zero one counts: a consistent op maps 0 to 0)."""
    a, b = scaled.detach().double().reshape(-1), base.detach().double().reshape(-1)
    ok = torch.isfinite(a) & torch.isfinite(b) & (b.abs() < EXTREME) & (a.abs() < EXTREME)
    if not ok.any():
        return False
    a, b = a[ok], b[ok]
    na, nb = float(a.norm()), float(b.norm())
    if na == 0.0:
        return False
    if nb <= 1e-12 * na:
        return True
    c = float(a @ b) / (nb * nb)
    return float((a - c * b).norm()) > 1e-6 * na


# -- local mode -------------------------------------------------------------------------------


def _run_alone(ug: UnitGraph, node: fx.Node, env: Mapping[fx.Node, Any], g: Mapping[str, float] | None,
               convert: Callable[[torch.Tensor], torch.Tensor] | None = None) -> Any:
    """The node on its recorded inputs (rescaled by g); ``convert`` maps every float input."""
    def value(n: fx.Node) -> Any:
        v = env[n]
        v = _scale(v, unit_of(n), g) if g is not None else v
        return convert(v) if convert is not None and isinstance(v, torch.Tensor) and v.is_floating_point() else v

    args = map_arg(node.args, value)
    kwargs = map_arg(node.kwargs, value)
    if g is not None:
        args, kwargs = floor_factor_args(node, args, kwargs, lambda u: u.character(g))  # type: ignore[arg-type]
    torch.manual_seed(1234)
    with torch.no_grad():
        return call_node(ug.traced.gm, node, args, kwargs)  # type: ignore[arg-type]


def _local(ug: UnitGraph, env: Mapping[fx.Node, Any], res: OracleResult, rng: random.Random) -> None:
    gens = ug.generators()
    g1 = draw(gens, rng)
    g2 = {k: v * v for k, v in g1.items()}
    for node in ug.graph.nodes:
        if node.op not in ("call_function", "call_method", "call_module"):
            continue
        base_val = env.get(node)
        if not _floats(base_val):
            if record(node).violation:
                _confirm_index(ug, node, env, res, g1)
            continue
        res.float_nodes += 1
        unit = unit_of(node)
        if record(node).violation:
            _confirm(ug, node, env, res, g1, g2)
            continue
        if _is_unknown(ug, node):
            res.unchecked.append(node.name)
            continue
        res.checked += 1
        base = _run_alone(ug, node, env, None)
        scaled = _run_alone(ug, node, env, g1)
        expected = _scale(base, unit, g1)
        ok, why = _agrees(ug, node, env, g1, scaled, expected)
        if ok:
            res.agreed += 1
        else:
            res.disagreements.append(Disagreement("local", node.name, _op(node), _fmt(unit), why))
        if record(node).interface:
            _confirm_interface(node, base, scaled, res)


def _agrees(ug: UnitGraph, node: fx.Node, env: Mapping[fx.Node, Any], g: Mapping[str, float] | None,
            actual: Any, expected: Any) -> tuple[bool, str]:
    """The node's outputs against the law, with a second look after a mismatch: is it float64
    rounding of a value that is zero in exact arithmetic? (``env`` rescaled by ``g`` gives the
    node's inputs in the run that produced ``actual``.)"""
    ok, why = _compare_tree(actual, expected)
    if not ok and node.op in ("call_function", "call_method", "call_module"):
        floor = _rounding_floor(ug, node, env, g, actual)
        if floor is not None and _compare_tree(actual, expected, atol=floor)[0]:
            return True, ""
    return ok, why


def _compare_tree(actual: Any, expected: Any, atol: list[float] | None = None) -> tuple[bool, str]:
    acts, exps = _floats(actual), _floats(expected)
    if len(acts) != len(exps):
        return False, "output structure differs"
    for i, (a, e) in enumerate(zip(acts, exps)):
        ok, why = close(a, e, atol=atol[i] if atol else 0.0)
        if not ok:
            return False, why
    return True, ""


def _rounding_floor(ug: UnitGraph, node: fx.Node, env: Mapping[fx.Node, Any], g: Mapping[str, float] | None,
                    result: Any) -> list[float] | None:
    """float64 rounding in the node's outputs, in each output's own unit. A value that is zero in
    exact arithmetic (the mean of centred data) is rounding noise that follows no scaling law.
    Two bounds, the larger wins: the node on the absolute values of its inputs (the size of the
    terms that cancelled) times 1e4 eps64, and the same call in float32, |y32 - y64| times
    1e3 eps64/eps32 (which alone fails when float32 happens to cancel exactly). None when
    neither can run."""
    high = _floats(result)
    eps = torch.finfo(torch.float64).eps
    bounds: list[list[float]] = []
    for convert, factor in ((torch.abs, 1e4 * eps), (lambda t: t.to(torch.float32), 1e3 * eps / torch.finfo(torch.float32).eps)):
        try:
            outs = _floats(_run_alone(ug, node, env, g, convert=convert))
        except Exception:  # a module with float64 weights, an op without float32 support
            continue
        if len(outs) != len(high):
            continue
        sizes = []
        for o, h in zip(outs, high):
            if o.shape != h.shape or not o.numel():
                sizes.append(0.0)
                continue
            r = o.detach().double() if convert is torch.abs else o.detach().double() - h.detach().double()
            sizes.append(factor * float(r.abs().max()))
        bounds.append(sizes)
    if not bounds:
        return None
    return [max(b[i] for b in bounds) for i in range(len(high))]


def _refuted(ug: UnitGraph, node: fx.Node, env: Mapping[fx.Node, Any],
             g1: Mapping[str, float], g2: Mapping[str, float]) -> bool:
    """Does the draw break the equivariance identity at ``node`` on the inputs in ``env``?"""
    base = _floats(_run_alone(ug, node, env, None))
    s1 = _floats(_run_alone(ug, node, env, g1))
    s2: list[torch.Tensor] | None = None
    for i, (b, a) in enumerate(zip(base, s1)):
        if b.numel() == 1:
            s2 = s2 if s2 is not None else _floats(_run_alone(ug, node, env, g2))
            r1, r2 = float(a) / float(b), float(s2[i]) / float(b)
            if abs(r2 - r1 * r1) > 1e-6 * max(abs(r1 * r1), 1e-300):
                return True
        elif _ratio_varies(a, b):
            return True
    return False


def _fresh_inputs(node: fx.Node, env: Mapping[fx.Node, Any], seed: int) -> dict[fx.Node, Any]:
    """The recorded inputs with every float tensor replaced by an independent Gaussian draw."""
    g = torch.Generator().manual_seed(seed)
    out = dict(env)
    for p in node.all_input_nodes:
        v = env.get(p)
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            out[p] = torch.randn(v.shape, generator=g, dtype=v.dtype)
    return out


def _confirm(ug: UnitGraph, node: fx.Node, env: Mapping[fx.Node, Any], res: OracleResult,
             g1: Mapping[str, float], g2: Mapping[str, float]) -> None:
    """A violation must break the identity. The recorded inputs are the first witness; when they
    happen to hide it (an input that is an exact multiple of another, a branch never taken), an
    identity is refuted by any input, so independent Gaussian inputs of the same shapes are the
    second."""
    res.violations += 1
    if _refuted(ug, node, env, g1, g2) or _refuted(ug, node, _fresh_inputs(node, env, 99), g1, g2):
        res.confirmed += 1
        return
    res.disagreements.append(
        Disagreement("violation", node.name, _op(node), record(node).violation or "",
                     "reported as a violation but the node is equivariant under the draw")
    )


def _confirm_interface(node: fx.Node, base: Any, scaled: Any, res: OracleResult) -> None:
    """A loss that is not dimensionless: its value must change under the draw (L' != L)."""
    res.violations += 1
    b, a = _floats(base), _floats(scaled)
    if b and a and not close(a[0], b[0])[0]:
        res.confirmed += 1
    else:
        res.disagreements.append(Disagreement("violation", node.name, _op(node),
                                              record(node).interface or "",
                                              "the loss is invariant under the draw"))


def _confirm_index(ug: UnitGraph, node: fx.Node, env: Mapping[fx.Node, Any], res: OracleResult,
                   g1: Mapping[str, float]) -> None:
    res.violations += 1
    base = _run_alone(ug, node, env, None)
    scaled = _run_alone(ug, node, env, g1)
    differs = any(
        not torch.equal(a, b)
        for a, b in zip(pytree.tree_leaves(scaled), pytree.tree_leaves(base))
        if isinstance(a, torch.Tensor)
    )
    if differs:
        res.confirmed += 1
    else:
        res.disagreements.append(
            Disagreement("violation", node.name, _op(node), record(node).violation or "",
                         "index output unchanged under the draw")
        )


def _is_unknown(ug: UnitGraph, node: fx.Node) -> bool:
    return any(v.node == node.name and v.rule == "UC901" for v in ug.violations)


def _op(node: fx.Node) -> str:
    return op_name(node)


def _fmt(unit: Any) -> str:
    return str(unit) if isinstance(unit, Unit) else repr(unit)


# -- global mode ------------------------------------------------------------------------------


def _downstream_violation(ug: UnitGraph) -> set[fx.Node]:
    """Nodes with a violation on some path to the output (Prop. 1 does not reach them)."""
    tainted: set[fx.Node] = set()
    for node in reversed(list(ug.graph.nodes)):
        for u in node.users:
            if _opaque_source(u) or u in tainted:
                tainted.add(node)
                break
    return tainted


def _opaque_source(node: fx.Node) -> bool:
    """A violation or an op with no rule: its output's scaling is unknown."""
    return record(node).opaque_source


def _upstream_violation(ug: UnitGraph) -> set[fx.Node]:
    """Nodes computed from a violation's output. A normaliser can erase the opaque generator
    from the unit, but the value still moved off the predicted direction: only local mode can
    judge these nodes."""
    tainted: set[fx.Node] = set()
    for node in ug.graph.nodes:
        if _opaque_source(node) or any(p in tainted for p in node.all_input_nodes):
            tainted.add(node)
    return tainted


def _checkable(unit: Any) -> Unit | None:
    if isinstance(unit, Poly):
        return Unit()
    if isinstance(unit, Unit) and not unit.is_opaque:
        return unit
    return None


def _run_with_grads(ug: UnitGraph, leaves: dict[str, Any], g: Mapping[str, float] | None,
                    loss_node: fx.Node | None, probe: torch.Tensor | None, probe_unit: Unit | None
                    ) -> tuple[dict[fx.Node, Any], dict[fx.Node, torch.Tensor], float]:
    """Values, gradients of the loss (or of <output, probe>) for every float node, and the loss's
    magnitude (the scale against which a gradient is judged to be rounding noise)."""
    req = {}
    for k, v in leaves.items():
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            v = v.detach().clone().requires_grad_(True)
        req[k] = v
    factor = (lambda u: u.character(g)) if g is not None else None
    torch.manual_seed(1234)
    env = run_graph(ug.traced, req, floor_factor=factor)
    tensors: dict[fx.Node, torch.Tensor] = {
        n: v for n, v in env.items()
        if isinstance(v, torch.Tensor) and v.is_floating_point() and v.requires_grad
    }
    if loss_node is not None:
        loss = env[loss_node]
    else:
        outs = [o for o in ug.traced.output_nodes() if isinstance(o, fx.Node)]
        out = env[outs[0]]
        r = probe if probe is not None else torch.zeros_like(out)
        if g is not None and probe_unit is not None:
            r = r * probe_unit.character(g)
        loss = (out * r).sum()
        scale = float((out * r).detach().abs().sum())
    if loss_node is not None:
        scale = float(loss.detach().abs().sum())
    if not loss.requires_grad:
        return env, {}, scale
    nodes = list(tensors)
    grads = torch.autograd.grad(loss, [tensors[n] for n in nodes], allow_unused=True)
    return env, {n: gr for n, gr in zip(nodes, grads) if gr is not None}, scale


def _rounding_noise(grad: torch.Tensor, value: Any, loss_scale: float) -> bool:
    """A gradient whose first-order effect on the loss (|grad| |value|) is below float64 rounding
    of the loss is zero in exact arithmetic (e.g. d/d rms of x / rms(x) fed to a normaliser):
    it carries no scaling law to check."""
    if not isinstance(value, torch.Tensor):
        return False
    effect = float(grad.detach().double().abs().max()) * float(value.detach().double().abs().max())
    return effect <= ROUNDOFF * loss_scale


def _global(ug: UnitGraph, res: OracleResult, rng: random.Random) -> None:
    gens = ug.generators()
    g = draw(gens, rng)
    loss_node = ug.loss_node
    probe, probe_unit = None, None
    if loss_node is None:
        outs = [o for o in ug.traced.output_nodes() if isinstance(o, fx.Node)]
        val = outs[0].meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise OracleError("the model's first output is not a tensor; return a tensor or a loss")
        gen = torch.Generator().manual_seed(7)
        probe = torch.randn(tuple(val.shape), generator=gen, dtype=torch.float64)
        u = unit_of(outs[0])
        probe_unit = u.inverse() if isinstance(u, Unit) else None
    base_env, base_grads, base_scale = _run_with_grads(ug, _leaf_values(ug, None), None, loss_node, probe, probe_unit)
    env, grads, scale = _run_with_grads(ug, _leaf_values(ug, g), g, loss_node, probe, probe_unit)
    loss_unit = ug.loss_unit if loss_node is not None else Unit()
    upstream = _upstream_violation(ug)
    end = loss_node if loss_node is not None else next(
        o for o in ug.traced.output_nodes() if isinstance(o, fx.Node))
    end_unit = unit_of(end)
    # Prop. 1 needs an invariant loss: not opaque, and not computed from a violation's output
    grads_ok = (
        loss_unit is not None and not loss_unit.is_opaque and end not in upstream
        and not (isinstance(end_unit, Unit) and end_unit.is_opaque)
    )
    tainted = _downstream_violation(ug) if grads_ok else set()
    for node in ug.graph.nodes:
        if node.op == "output" or node in upstream:
            continue
        unit = _checkable(unit_of(node))
        base = base_env.get(node)
        if unit is not None and isinstance(base, torch.Tensor) and base.is_floating_point():
            res.global_checked += 1
            ok, why = _agrees(ug, node, env, None, env[node], base * unit.character(g))
            if ok:
                res.global_agreed += 1
            else:
                res.disagreements.append(Disagreement("global", node.name, _op(node), str(unit), why))
        # a polymorphic value (a mask, x - x) has no definite unit, hence no dual law
        if grads_ok and node in base_grads and node not in tainted and isinstance(unit_of(node), Unit):
            gu = loss_unit / unit  # type: ignore[operator]
            res.grad_checked += 1
            if node not in grads:
                ok, why = False, "no gradient"
            elif _rounding_noise(base_grads[node], base, base_scale) and _rounding_noise(grads[node], env[node], scale):
                ok, why = True, ""  # zero in exact arithmetic on both sides: 0 scales to 0
            else:
                ok, why = close(grads[node], base_grads[node] * gu.character(g))
            if ok:
                res.grad_agreed += 1
            else:
                res.disagreements.append(Disagreement("grad", node.name, _op(node), str(gu), why))


# -- public entry points ----------------------------------------------------------------------


def verify(
    model: nn.Module,
    example_inputs: Any,
    *,
    modes: tuple[str, ...] = ("local", "global"),
    with_fingerprint: bool = False,
    seed: int = 0,
    redraw: bool = True,
    **infer_kw: Any,
) -> OracleResult:
    """Run the equivariance oracle in float64 on a copy of ``model`` (parameters redrawn)."""
    _, _, ug = prepare(model, example_inputs, seed=seed, redraw=redraw, **infer_kw)
    return verify_graph(ug, modes=modes, with_fingerprint=with_fingerprint, seed=seed)


def verify_graph(
    ug: UnitGraph, *, modes: tuple[str, ...] = ("local", "global"), with_fingerprint: bool = False,
    seed: int = 0,
) -> OracleResult:
    """The oracle on an already inferred float64 unit graph (see :func:`prepare`)."""
    rng = random.Random(seed)
    res = OracleResult()
    with torch.no_grad():
        env = run_graph(ug.traced, _leaf_values(ug, None))
    if "local" in modes:
        _local(ug, env, res, rng)
    if "global" in modes:
        _global(ug, res, rng)
    if with_fingerprint:
        res.fingerprint = fingerprint_graph(ug)
    return res


def fingerprint(model: nn.Module, example_inputs: Any, *, seed: int = 0, **infer_kw: Any) -> list[FingerprintRow]:
    """Radial fingerprint per generator: static gauge prediction vs measured rate (Prop. 6)."""
    _, _, ug = prepare(model, example_inputs, seed=seed, **infer_kw)
    return fingerprint_graph(ug)


def _loss_along(ug: UnitGraph, leaves: dict[str, Any], gen: str, members: list[tuple[str, float]], c: float) -> float:
    """The loss with every leaf carrying ``gen`` (and every floor) rescaled by c^exponent."""
    gmap = {gen: c}
    vals = dict(leaves)
    for name, _ in members:
        vals[name] = _scale(leaves[name], unit_of(_node(ug, name)), gmap)
    torch.manual_seed(1234)
    with torch.no_grad():
        out = run_graph(ug.traced, vals, floor_factor=lambda u: u.character(gmap))
    assert ug.loss_node is not None
    return float(out[ug.loss_node])


def fingerprint_graph(ug: UnitGraph, h: float = 1e-4, threshold: float = 1e-7) -> list[FingerprintRow]:
    loss_node = ug.loss_node
    if loss_node is None:
        raise OracleError("the radial fingerprint needs a model that returns a scalar loss")
    leaves = _leaf_values(ug, None)
    # gradients of every float leaf at the point itself
    req = {k: (v.detach().clone().requires_grad_(True) if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
           for k, v in leaves.items()}
    torch.manual_seed(1234)
    env = run_graph(ug.traced, req)
    loss = env[loss_node]
    names = [k for k, v in req.items() if isinstance(v, torch.Tensor) and v.requires_grad]
    grads = dict(zip(names, torch.autograd.grad(loss, [req[k] for k in names], allow_unused=True)))
    consumed: set[str] = set()
    for v in ug.violations:
        if v.rule not in ("UC901",):
            consumed.update(v.extra.get("consumed", ()))
    loss_gens = set(ug.loss_unit.generators()) if isinstance(ug.loss_unit, Unit) else set()
    by_gen: dict[str, list[tuple[str, float]]] = {}
    for name in names:
        unit = unit_of(_node(ug, name))
        if not isinstance(unit, Unit):
            continue
        for gen, e in unit.items():
            if not gen.startswith("v:"):
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

