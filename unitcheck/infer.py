"""The unit-inference pass: walk the graph in topological order and store a ``UnitRecord`` on
every node.

Like ``torch.fx.passes.shape_prop.ShapeProp`` it is one walk with one ``run_node``; unlike it, no
tensor is computed: each node's unit comes from the rule registered for its target (``rules/``),
applied to the units of its inputs. Leaves get their units from the declarations (SPEC 2):
float inputs their own generator ``in:<name>``, parameters and buffers a unit *variable* bound by
its first constraint. Each violation gets a fresh opaque generator ``v:<node>`` so that the
interface is reported once and the analysis goes on (SPEC 4). Variables are resolved after the
walk, so each node's record is written once, with its final forward and gradient units.

>>> ug = infer_units(model, (idx, targets))                # doctest: +SKIP
>>> str(ug.unit("linear"))                                 # doctest: +SKIP
'p:transformer.h.0.ln_1.weight · p:transformer.h.0.attn.c_attn.weight'
>>> [v.rule for v in ug.violations][:2]                    # doctest: +SKIP
['UC101', 'UC201']
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch import nn

import unitcheck.rules  # noqa: F401  (registers the built-in rules)

from . import registry
from .codes import CODES
from .declarations import as_unit, resolve_declarations
from .diagnostics import Location, Violation
from .fxutil import has_float, is_index_value, location, module_path, op_name
from .graphs import topo_index
from .record import Floor, UnitRecord, store
from .rulectx import RuleContext
from .tracer import TracedGraph, trace, uncompiled
from .unitgraph import Binding, UnitGraph
from .units import DIMENSIONLESS, Unit
from .values import INDEX, POLY, Poly, UnitValue, Var, is_poly_number

__all__ = ["infer_units", "run_inference", "trace_for_inference", "UnitGraph", "DEFAULT_FLOOR_EPS"]

DEFAULT_FLOOR_EPS = 1e-3


@dataclass
class _Findings:
    """What the rules reported at one node during the walk (folded into its record)."""

    violation: str | None = None
    interface: str | None = None
    unknown: bool = False
    floors: tuple[Floor, ...] = ()
    floor_noted: bool = False
    location: Location | None = None


class UnitPropagation:
    """One walk over the graph; implements the :class:`~unitcheck.rulectx.Engine` interface."""

    def __init__(
        self,
        traced: TracedGraph,
        declarations: Mapping[str, Unit] | None = None,
        input_units: Mapping[str, Unit] | None = None,
        floor_eps: float = DEFAULT_FLOOR_EPS,
    ) -> None:
        self.traced = traced
        self.declarations = dict(declarations or {})
        self.input_units = dict(input_units or {})
        self.floor_eps = floor_eps
        self.violations: list[Violation] = []
        self.notes: list[Violation] = []
        self.unknown: Counter[str] = Counter()
        self._order: dict[fx.Node, int] | None = None
        self._vars: dict[str, Var] = {}
        self._units: dict[fx.Node, UnitValue] = {}
        self._found: dict[fx.Node, _Findings] = {}
        self._consumed: list[tuple[Violation, tuple[UnitValue, ...]]] = []

    # -- the Engine interface -------------------------------------------------------------
    def unit(self, node: fx.Node) -> UnitValue:
        return self._units.get(node)

    def order(self) -> dict[fx.Node, int]:
        if self._order is None:
            self._order = topo_index(self.traced.graph)
        return self._order

    def add_floor(self, node: fx.Node, floor: Floor) -> bool:
        """Record a floor; True the first time a floor is noted at this node."""
        f = self._findings(node)
        f.floors = (*f.floors, floor)
        first, f.floor_noted = not f.floor_noted, True
        return first

    def report(
        self,
        node: fx.Node,
        code: str,
        message: str,
        units: dict[str, Unit],
        fix: str | None,
        consumed: Iterable[UnitValue] = (),
        role: str = "",
        sources: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        info = CODES[code]
        v = Violation(
            rule=code,
            message=message,
            node=node.name,
            op=op_name(node),
            module=module_path(node),
            units=units,
            fix=fix or info.fix,
            location=location(node),
            extra={"consumed": [], "role": role},
        )
        if sources:
            v.extra["sources"] = {k: list(names) for k, names in sources.items()}
        self._consumed.append((v, tuple(consumed)))
        if info.severity == "info":
            self.notes.append(v)
            return
        self.violations.append(v)
        f = self._findings(node)
        f.location = v.location
        if code == "UC901":
            f.unknown = True
        elif role == "loss":
            f.interface = code  # the op is equivariant; its result is not allowed
        else:
            f.violation = code

    def _findings(self, node: fx.Node) -> _Findings:
        f = self._found.get(node)
        if f is None:
            f = self._found[node] = _Findings()
        return f

    # -- leaves ---------------------------------------------------------------------------
    def leaf_value(self, node: fx.Node) -> UnitValue:
        leaf = self.traced.leaves[node.name]
        val = leaf.value
        if is_index_value(val):
            return INDEX
        if leaf.kind == "input":
            if leaf.name in self.input_units:
                return self.input_units[leaf.name]
            return Unit.generator(f"in:{leaf.name}")
        if leaf.kind == "constant":
            return _constant_kind(val)
        if leaf.name in self.declarations:
            return self.declarations[leaf.name]
        var = self._vars.get(leaf.name)
        if var is None:
            var = Var([leaf.name], "param" if leaf.kind == "param" else "buffer")
            self._vars[leaf.name] = var
        return var

    # -- the walk -------------------------------------------------------------------------
    def run(self) -> UnitGraph:
        t0 = time.perf_counter()
        graph = self.traced.graph
        compute = covered = 0
        for node in graph.nodes:
            op = node.op
            if op == "placeholder" or op == "get_attr":
                self._units[node] = self.leaf_value(node) if node.name in self.traced.leaves else None
            elif op != "output":
                compute += 1
                covered += self.run_node(node)
        for note in self.traced.notes:
            self.notes.append(Violation("UC903", note, "", "", "", {}, CODES["UC903"].fix))
        units = {n: _finalise(u) for n, u in self._units.items()}
        loss_node, loss_unit = self._loss(units)
        for v, values in self._consumed:  # variables bound after the violation count as bound
            v.extra["consumed"] = sorted({g for u in values for g in _generators(_finalise(u))})
        self._store(units, loss_unit)
        return UnitGraph(
            traced=self.traced,
            violations=self.violations,
            notes=self.notes,
            unknown_ops=self.unknown,
            coverage=covered / compute if compute else 1.0,
            compute_nodes=compute,
            loss_node=loss_node,
            loss_unit=loss_unit,
            infer_seconds=time.perf_counter() - t0,
            bindings=self._bindings(),
        )

    def _bindings(self) -> dict[str, Binding]:
        """How each parameter and buffer got its unit (after ``_finalise``: every class bound)."""
        out = {leaf.name: Binding("declared") for leaf in self.traced.leaves.values()
               if leaf.kind in ("param", "buffer") and leaf.name in self.declarations}
        for name, var in self._vars.items():
            root = var.find()
            out[name] = Binding(root.how or "default", root.bound_at, tuple(n for n in root.names if n != name))
        return out

    def run_node(self, node: fx.Node) -> bool:
        """Apply the node's rule; return whether a rule (or the index rule) covered it."""
        fn = registry.rule_for(node, self.traced.gm)
        val = node.meta.get("val")
        if fn is None:
            if val is None or not has_float(val):
                self._units[node] = _index_override(INDEX, val) if val is not None else None
                return True
            name = op_name(node)
            self.unknown[name] += 1
            # what flows into an op nobody knows is consumed: its scaling is not known to be kept
            inputs = [self._units.get(p) for p in node.all_input_nodes]
            self.report(node, "UC901", f"no unit rule for {name}; its output gets an opaque scale", {},
                        None, consumed=inputs)
            self._units[node] = _opaque_like(val, node.name)
            return False
        try:
            out = fn(RuleContext(node, self))
        except Exception as err:  # a rule bug must name the node, like ShapeProp does
            raise RuntimeError(
                f"unit rule {fn.__module__}.{fn.__name__} failed on node {node.format_node()}: {err}"
            ) from err
        self._units[node] = _index_override(out, val) if val is not None else out
        return True

    # -- loss, gradients and the records ----------------------------------------------------
    def _loss(self, units: Mapping[fx.Node, UnitValue]) -> tuple[fx.Node | None, Unit | None]:
        for out in self.traced.output_nodes():
            if not isinstance(out, fx.Node):
                continue
            val = out.meta.get("val")
            if isinstance(val, torch.Tensor) and val.is_floating_point() and val.dim() == 0:
                unit = units.get(out)
                if isinstance(unit, Poly):
                    unit = DIMENSIONLESS
                if isinstance(unit, Unit):
                    if not unit.is_dimensionless and not unit.is_opaque:
                        self.report(
                            out, "UC302", f"the loss has unit {unit}; it must be dimensionless",
                            {"loss": unit}, None, consumed=[unit], role="loss",
                        )
                    return out, unit
        return None, None

    def _store(self, units: Mapping[fx.Node, UnitValue], loss_unit: Unit | None) -> None:
        """One record per node. Gradient units follow Prop. 1: u(grad v) = u(L) - u(v) (a probe
        loss <out, R> is dimensionless)."""
        lu = loss_unit if loss_unit is not None else DIMENSIONLESS
        memo: dict[Unit, Unit] = {}  # many nodes share a unit: divide once per distinct unit

        def dual(u: UnitValue) -> UnitValue:
            if isinstance(u, Unit):
                d = memo.get(u)
                if d is None:
                    d = memo[u] = lu / u
                return d
            if isinstance(u, Poly):
                return lu
            if isinstance(u, tuple):
                return tuple(dual(x) for x in u)
            return None

        for node in self.traced.graph.nodes:
            if node.op == "output":
                continue
            u = units.get(node)
            f = self._found.get(node)
            if f is None:
                store(node, UnitRecord(u, dual(u)))
            else:
                store(node, UnitRecord(u, dual(u), f.violation, f.interface, f.unknown, f.floors, f.location))


def _finalise(v: UnitValue) -> UnitValue:
    """After the walk: unbound parameter variables become their own generator, buffers 1."""
    if isinstance(v, Var):
        root = v.find()
        if root.bound is None:
            root.bind(Unit.generator(root.generator_name()) if root.kind == "param" else DIMENSIONLESS,
                      None, "default")
        return root.bound
    if isinstance(v, tuple):
        return tuple(_finalise(x) for x in v)
    return v


def _generators(v: UnitValue) -> set[str]:
    if isinstance(v, Unit):
        return set(v.generators())
    if isinstance(v, tuple):
        return {g for x in v for g in _generators(x)}
    return set()


def _index_override(value: UnitValue, val: Any) -> UnitValue:
    """Integer/bool outputs are index-kind whatever the rule computed (one dtype-based rule)."""
    if isinstance(val, (list, tuple)):
        vals = list(val)
        if isinstance(value, tuple) and len(value) == len(vals):
            return tuple(_index_override(u, x) for u, x in zip(value, vals))
        return value
    if is_index_value(val):
        return INDEX
    return value


def _opaque_like(val: Any, name: str) -> UnitValue:
    if isinstance(val, (list, tuple)):
        return tuple(_opaque_like(v, f"{name}.{i}") for i, v in enumerate(val))
    if isinstance(val, torch.Tensor) and (val.is_floating_point() or val.is_complex()):
        return Unit.opaque(name)
    return INDEX


def _constant_kind(val: Any) -> UnitValue:
    """A lifted constant: polymorphic if every entry is 0/+-inf/extreme, else dimensionless."""
    if not isinstance(val, torch.Tensor):
        return DIMENSIONLESS
    if val.numel() == 0:
        return POLY
    if val.device.type == "meta":
        return DIMENSIONLESS
    flat = val.detach().reshape(-1)
    if flat.is_complex():  # Meta's Llama keeps its rotary table as a complex tensor (torch.polar)
        flat = torch.view_as_real(flat).reshape(-1)
    if flat.numel() > 1_000_000:
        flat = flat[:1_000_000]
    if all(is_poly_number(float(x)) for x in flat.unique()[:64]) and flat.unique().numel() <= 64:
        return POLY
    return DIMENSIONLESS


def run_inference(
    traced: TracedGraph,
    declarations: Mapping[str, Unit] | None = None,
    input_units: Mapping[str, Unit] | None = None,
    floor_eps: float = DEFAULT_FLOOR_EPS,
) -> UnitGraph:
    return UnitPropagation(traced, declarations, input_units, floor_eps).run()


def _no_rule(target: Any) -> bool:
    return registry.lookup(target) is None


def trace_for_inference(model: nn.Module, example_inputs: Any, method: str = "auto",
                        dynamic: bool = False, training: bool = False) -> TracedGraph:
    """Trace, decomposing the graph when it holds an op with no unit rule (its pieces may have
    rules)."""
    return trace(model, example_inputs, method=method, dynamic=dynamic, lower_op=_no_rule,  # type: ignore[arg-type]
                 training=training)


def infer_units(
    model: nn.Module,
    example_inputs: Any,
    *,
    declare: Mapping[str, str | Unit] | None = None,
    input_units: Mapping[str, str | Unit] | None = None,
    floor_eps: float = DEFAULT_FLOOR_EPS,
    method: str = "auto",
    traced: TracedGraph | None = None,
) -> UnitGraph:
    """Trace ``model`` and infer forward and gradient units on every node.

    ``declare`` maps glob patterns over qualified parameter/buffer names to units (the same form
    as ``[tool.unitcheck.declare]``); ``input_units`` maps input names to units.
    """
    model = uncompiled(model)
    tg = traced if traced is not None else trace_for_inference(model, example_inputs, method=method)
    decls = resolve_declarations(model, declare)
    inputs = {k: as_unit(v, f"input {k!r}") for k, v in (input_units or {}).items()}
    return run_inference(tg, decls, inputs, floor_eps)
