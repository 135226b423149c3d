"""The unit-inference pass: walk the graph in topological order and write ``node.meta["unit"]``.

Like ``torch.fx.passes.shape_prop.ShapeProp`` it is one walk with one ``run_node``; unlike it, no
tensor is computed: each node's unit comes from the rule registered for its target (``rules/``),
applied to the units of its inputs. Leaves get their units from the declarations (SPEC 2):
float inputs their own generator ``in:<name>``, parameters and buffers a unit *variable* bound by
its first constraint. Each violation gets a fresh opaque generator ``v:<node>`` so that the
interface is reported once and the analysis goes on (SPEC 4).

>>> ug = infer_units(model, (idx, targets))                # doctest: +SKIP
>>> str(ug.unit("linear"))                                 # doctest: +SKIP
'p:transformer.h.0.ln_1.weight · p:transformer.h.0.attn.c_attn.weight'
>>> [v.rule for v in ug.violations][:2]                    # doctest: +SKIP
['UC101', 'UC201']
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch import nn
from torch.utils import _pytree as pytree

from . import registry
from .codes import CODES
from .declarations import as_unit, resolve_declarations
from .diagnostics import Violation
from .graphs import op_name, residual_pair, topo_index
from .tracer import TracedGraph, location, module_path, trace
from .units import DIMENSIONLESS, Unit
from .values import INDEX, POLY, Index, Literal, Poly, UnitValue, Var, is_poly_number

__all__ = ["infer_units", "run_inference", "UnitGraph", "RuleContext", "DEFAULT_FLOOR_EPS"]

DEFAULT_FLOOR_EPS = 1e-3


@dataclass
class Combined:
    """Outcome of a same-unit constraint over several operands."""

    unit: UnitValue
    mismatch: list[tuple[Any, Unit]] = field(default_factory=list)  # (raw operand, unit) pairs
    bad_literal: float | None = None  # a non-zero, non-floor literal against a unitful operand
    floor_args: list[float] = field(default_factory=list)  # the floor literals' values


class RuleContext:
    """What a rule sees: the node, its raw arguments, and the constraint/report helpers."""

    __slots__ = ("node", "engine", "args", "kwargs")

    def __init__(self, node: fx.Node, engine: UnitPropagation) -> None:
        self.node = node
        self.engine = engine
        self.args = node.args
        self.kwargs = node.kwargs

    # -- arguments ------------------------------------------------------------------------
    def arg(self, index: int, name: str | None = None, default: Any = None) -> Any:
        if index < len(self.args):
            return self.args[index]
        if name is not None and name in self.kwargs:
            return self.kwargs[name]
        return default

    def u(self, a: Any) -> UnitValue:
        """The unit-value of a raw argument (a Node, a literal, a list of either)."""
        if isinstance(a, fx.Node):
            v = a.meta.get("unit")
            return _resolve(v)
        if isinstance(a, bool) or a is None:
            return None
        if isinstance(a, (int, float)):
            return Literal(float(a))
        if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return INDEX
        if isinstance(a, (list, tuple)):
            return tuple(self.u(x) for x in a)
        return None

    def is_tensor(self, a: Any) -> bool:
        return isinstance(a, fx.Node)

    def val(self, a: Any = None) -> Any:
        """The recorded example value (``meta['val']``) of an argument, or of this node."""
        n = self.node if a is None else a
        return n.meta.get("val") if isinstance(n, fx.Node) else None

    def shape(self, a: Any = None) -> tuple[int, ...] | None:
        v = self.val(a)
        if isinstance(v, torch.Tensor):
            try:
                return tuple(int(s) for s in v.shape)
            except Exception:
                return None
        return None

    # -- constraints ----------------------------------------------------------------------
    def pin(self, v: UnitValue) -> UnitValue:
        """A multiplicative use with a tensor: bind a weight variable to its own generator."""
        if isinstance(v, Var):
            root = v.find()
            if root.bound is None:
                unit = Unit.generator(root.generator_name()) if root.kind == "param" else DIMENSIONLESS
                self.engine.bind(root, unit, self.node, "pin")
            return root.bound
        if isinstance(v, (Literal, Index)) or v is None:
            return DIMENSIONLESS
        return v

    def to_dimensionless(self, v: UnitValue) -> bool:
        """Constrain ``v`` to be dimensionless (binding a variable); False if it is unitful."""
        if isinstance(v, Var):
            root = v.find()
            if root.bound is None:
                self.engine.bind(root, DIMENSIONLESS, self.node, "nonlinear")
                return True
            return root.bound.is_dimensionless
        if isinstance(v, Unit):
            return v.is_dimensionless
        return True

    def combine(self, operands: Sequence[Any], floors: bool = True) -> Combined:
        """Same-unit constraint over raw operands (SPEC 3): binds variables, finds mismatches."""
        concrete: list[tuple[Any, Unit]] = []
        variables: list[Var] = []
        literals: list[float] = []
        any_poly = False
        for a in operands:
            v = self.u(a)
            if v is None:
                continue
            if isinstance(v, Literal):
                if v.is_poly:
                    any_poly = True
                else:
                    literals.append(v.value)
            elif isinstance(v, Poly):
                any_poly = True
            elif isinstance(v, Index):
                concrete.append((a, DIMENSIONLESS))
            elif isinstance(v, Var):
                variables.append(v)
            elif isinstance(v, Unit):
                concrete.append((a, v))
            elif isinstance(v, tuple):
                raise TypeError("combine() takes flat operands")
        distinct = {u for _, u in concrete}
        if len(distinct) > 1:
            return Combined(None, mismatch=concrete)
        target: UnitValue
        if distinct:
            target = next(iter(distinct))
            for var in variables:
                root = var.find()
                if root.bound is None:
                    self.engine.bind(root, target, self.node, "combine")
                elif root.bound != target:
                    return Combined(None, mismatch=[*concrete, (var, root.bound)])
        elif variables:
            target = self.engine.unify(variables, self.node)
        elif literals:
            return Combined(DIMENSIONLESS)
        else:
            return Combined(POLY if any_poly else DIMENSIONLESS)
        result = Combined(target)
        for lit in literals:
            if isinstance(target, Unit) and target.is_dimensionless:
                continue
            if floors and abs(lit) <= self.engine.floor_eps:
                result.floor_args.append(lit)
            else:
                result.bad_literal = lit
        return result

    # -- reporting ------------------------------------------------------------------------
    def opaque(self) -> Unit:
        return Unit.generator(f"v:{self.node.name}")

    def violation(
        self,
        code: str,
        message: str,
        units: Mapping[str, UnitValue],
        fix: str | None = None,
        consumed: Iterable[UnitValue] = (),
        role: str = "",
    ) -> Unit:
        """Record a violation at this node; the node's output gets an opaque generator."""
        shown = {k: u for k, u in units.items() if isinstance(u, Unit)}
        gens: set[str] = set()
        for u in (*units.values(), *consumed):
            if isinstance(u, Unit):
                gens.update(u.generators())
        self.engine.report(self.node, code, message, shown, fix, consumed=gens, role=role)
        return self.opaque()

    def floor(self, where: int | str | Literal, source: Any, power: int = 1, note: bool = True) -> None:
        """Mark an argument (a position, a keyword, or a literal value) as a numerical floor
        guarding ``source ** power``.

        The oracle rescales the floor by the character of that unit (computed from the final
        units, so a weight variable bound later is honoured); a note (UC902) is recorded once.
        """
        if not isinstance(source, fx.Node):
            return
        self.node.meta.setdefault("unit_floors", []).append((where, source, power))
        unit = self.u(source)
        if note and isinstance(unit, Unit) and not unit.is_dimensionless and not self.node.meta.get("_floor_noted"):
            self.node.meta["_floor_noted"] = True
            shown = unit**power
            self.engine.report(
                self.node, "UC902",
                f"numerical floor treated as unit-transparent (it guards a quantity of unit {shown})",
                {"floor": shown}, None,
            )

    def same_unit(self, operands: Sequence[Any], what: str) -> UnitValue:
        """Same-unit combine with the standard reports (UC101/UC102/UC103/UC303/UC902)."""
        res = self.combine(operands)
        if res.mismatch:
            return self.report_mismatch(res.mismatch, what)
        if res.bad_literal is not None:
            return self.violation(
                "UC103",
                f"{what} adds the literal {res.bad_literal:g} to a tensor of unit {res.unit}",
                {"tensor": res.unit, "literal": DIMENSIONLESS},
            )
        if res.floor_args:
            source = next(
                (a for a in operands if isinstance(a, fx.Node) and self.u(a) == res.unit), None
            )
            for lit in res.floor_args:
                self.floor(Literal(lit), source)
        return res.unit

    def report_mismatch(self, mismatch: list[tuple[Any, Unit]], what: str) -> Unit:
        nodes = [a for a, _ in mismatch if isinstance(a, fx.Node)]
        (a, ua), (b, ub) = _first_two_distinct(mismatch)
        units = {"lhs": ua, "rhs": ub}
        if isinstance(a, fx.Node) and isinstance(b, fx.Node) and self.is_scalar(a) and self.is_scalar(b):
            return self.violation(
                "UC303", f"loss terms with different units summed: {ua} and {ub}", units,
            )
        residual = self.residual_pair(a, b) if what in ("add", "sub") else None
        if residual is not None:
            stream, branch = residual
            us, ub_ = (ua, ub) if stream is a else (ub, ua)
            return self.violation(
                "UC102",
                f"residual {what} mixes the stream's unit {us} with the branch's unit {ub_}",
                {"stream": us, "branch": ub_},
            )
        del nodes
        return self.violation(
            "UC101", f"{what} of tensors with different units: {ua} and {ub}", units
        )

    def residual_pair(self, a: Any, b: Any) -> tuple[fx.Node, fx.Node] | None:
        return residual_pair(self.node, a, b, self.engine.order(), module_path)

    def is_scalar(self, a: fx.Node) -> bool:
        s = self.shape(a)
        return s is not None and math.prod(s) == 1 and len(s) == 0


def _first_two_distinct(pairs: list[tuple[Any, Unit]]) -> tuple[tuple[Any, Unit], tuple[Any, Unit]]:
    first = pairs[0]
    for p in pairs[1:]:
        if p[1] != first[1]:
            return first, p
    return first, pairs[1]


def _resolve(v: UnitValue) -> UnitValue:
    if isinstance(v, Var):
        return v.resolved()
    if isinstance(v, tuple):
        return tuple(_resolve(x) for x in v)
    return v


def _finalise(v: UnitValue) -> UnitValue:
    """After the walk: unbound parameter variables become their own generator, buffers 1."""
    if isinstance(v, Var):
        root = v.find()
        if root.bound is None:
            root.bound = Unit.generator(root.generator_name()) if root.kind == "param" else DIMENSIONLESS
            root.how = "default"
        return root.bound
    if isinstance(v, tuple):
        return tuple(_finalise(x) for x in v)
    return v


def _is_int_tensor(t: Any) -> bool:
    if isinstance(t, torch.Tensor):
        return not (t.is_floating_point() or t.is_complex())
    return isinstance(t, (int, bool, torch.SymInt, torch.SymBool))


def _index_override(value: UnitValue, val: Any) -> UnitValue:
    """Integer/bool outputs are index-kind whatever the rule computed (one dtype-based rule)."""
    if isinstance(val, (list, tuple)):
        vals = list(val)
        if isinstance(value, tuple) and len(value) == len(vals):
            return tuple(_index_override(u, x) for u, x in zip(value, vals))
        return value
    if _is_int_tensor(val):
        return INDEX
    return value


@dataclass
class UnitGraph:
    """The result of unit inference: a traced graph whose nodes carry ``meta['unit']``."""

    traced: TracedGraph
    violations: list[Violation]
    notes: list[Violation]
    unknown_ops: Counter[str]
    coverage: float
    compute_nodes: int
    loss_node: fx.Node | None
    loss_unit: Unit | None
    infer_seconds: float = 0.0

    @property
    def graph(self) -> fx.Graph:
        return self.traced.graph

    def node(self, name: str) -> fx.Node:
        for n in self.graph.nodes:
            if n.name == name:
                return n
        raise KeyError(f"no node named {name!r}")

    def unit(self, node: fx.Node | str) -> UnitValue:
        n = self.node(node) if isinstance(node, str) else node
        return n.meta.get("unit")

    def grad_unit(self, node: fx.Node | str) -> UnitValue:
        n = self.node(node) if isinstance(node, str) else node
        return n.meta.get("grad_unit")

    def leaf_units(self) -> dict[str, UnitValue]:
        """Qualified leaf name -> unit, for parameters, buffers and inputs."""
        return {leaf.name: self.unit(n) for n in self.traced.leaf_nodes() if (leaf := self.traced.leaves[n.name])}

    def generators(self) -> list[str]:
        gens: set[str] = set()
        for n in self.graph.nodes:
            for u in pytree.tree_leaves(n.meta.get("unit"), is_leaf=lambda x: isinstance(x, Unit)):
                if isinstance(u, Unit):
                    gens.update(u.generators())
        return sorted(gens)

    @property
    def errors(self) -> list[Violation]:
        return [v for v in self.violations if v.severity == "error"]


class UnitPropagation:
    """One walk over the graph writing ``node.meta['unit']`` (and ``'grad_unit'``)."""

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

    # -- variables ------------------------------------------------------------------------
    def bind(self, root: Var, unit: Unit, node: fx.Node, how: str) -> None:
        root.bound = unit
        root.bound_at = node.name
        root.how = how

    def unify(self, variables: list[Var], node: fx.Node) -> Var:
        roots: list[Var] = []
        for v in variables:
            r = v.find()
            if r not in roots:
                roots.append(r)
        head = roots[0]
        for r in roots[1:]:
            r.parent = head
            head.names.extend(n for n in r.names if n not in head.names)
            if r.kind == "param":
                head.kind = "param"
        return head

    def order(self) -> dict[fx.Node, int]:
        if self._order is None:
            self._order = topo_index(self.traced.graph)
        return self._order

    # -- reports --------------------------------------------------------------------------
    def report(
        self,
        node: fx.Node,
        code: str,
        message: str,
        units: dict[str, Unit],
        fix: str | None,
        consumed: set[str] | None = None,
        role: str = "",
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
            extra={"consumed": sorted(consumed or ()), "role": role},
        )
        if info.severity == "info":
            self.notes.append(v)
        else:
            self.violations.append(v)
            if code == "UC901":
                node.meta["unit_unknown"] = True
            elif role == "loss":
                node.meta["unit_interface"] = code  # the op is equivariant; its result is not allowed
            else:
                node.meta["unit_violation"] = code

    # -- leaves ---------------------------------------------------------------------------
    def leaf_value(self, node: fx.Node) -> UnitValue:
        leaf = self.traced.leaves[node.name]
        val = leaf.value
        if leaf.kind == "input":
            if isinstance(val, torch.Tensor) and not (val.is_floating_point() or val.is_complex()):
                return INDEX
            if leaf.name in self.input_units:
                return self.input_units[leaf.name]
            return Unit.generator(f"in:{leaf.name}")
        if isinstance(val, torch.Tensor) and not (val.is_floating_point() or val.is_complex()):
            return INDEX
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
        compute = 0
        covered = 0
        for node in graph.nodes:
            op = node.op
            if op == "placeholder" or op == "get_attr":
                if node.name in self.traced.leaves:
                    node.meta["unit"] = self.leaf_value(node)
                else:
                    node.meta["unit"] = None
                continue
            if op == "output":
                continue
            compute += 1
            known = self.run_node(node)
            covered += known
        for note in self.traced.notes:
            self.notes.append(
                Violation("UC903", note, "", "", "", {}, CODES["UC903"].fix)
            )
        for node in graph.nodes:
            if "unit" in node.meta:
                node.meta["unit"] = _finalise(node.meta["unit"])
        loss_node, loss_unit = self._loss()
        self._gradients(loss_unit)
        elapsed = time.perf_counter() - t0
        return UnitGraph(
            traced=self.traced,
            violations=self.violations,
            notes=self.notes,
            unknown_ops=self.unknown,
            coverage=covered / compute if compute else 1.0,
            compute_nodes=compute,
            loss_node=loss_node,
            loss_unit=loss_unit,
            infer_seconds=elapsed,
        )

    def run_node(self, node: fx.Node) -> bool:
        """Apply the node's rule; return whether a rule (or the index rule) covered it."""
        target: Any = node.target
        if node.op == "call_method":
            target = registry.MethodTarget(str(node.target))
        elif node.op == "call_module":
            target = type(self.traced.gm.get_submodule(str(node.target)))
        fn = registry.lookup(target)
        val = node.meta.get("val")
        if fn is None:
            if val is None or not _has_float(val):
                node.meta["unit"] = _index_override(INDEX, val) if val is not None else None
                return True
            name = op_name(node)
            self.unknown[name] += 1
            self.report(
                node, "UC901", f"no unit rule for {name}; its output gets an opaque scale",
                {}, None,
            )
            node.meta["unit"] = _opaque_like(val, node.name)
            return False
        ctx = RuleContext(node, self)
        try:
            out = fn(ctx)
        except Exception as err:  # a rule bug must name the node, like ShapeProp does
            raise RuntimeError(
                f"unit rule {fn.__module__}.{fn.__name__} failed on node {node.format_node()}: {err}"
            ) from err
        node.meta["unit"] = _index_override(out, val) if val is not None else out
        return True

    # -- loss and gradients ---------------------------------------------------------------
    def _loss(self) -> tuple[fx.Node | None, Unit | None]:
        for out in self.traced.output_nodes():
            if not isinstance(out, fx.Node):
                continue
            val = out.meta.get("val")
            if isinstance(val, torch.Tensor) and val.is_floating_point() and val.dim() == 0:
                unit = out.meta.get("unit")
                if isinstance(unit, Poly):
                    unit = DIMENSIONLESS
                if isinstance(unit, Unit):
                    if not unit.is_dimensionless and not unit.is_opaque:
                        self.report(
                            out, "UC302", f"the loss has unit {unit}; it must be dimensionless",
                            {"loss": unit}, None, consumed=set(unit.generators()), role="loss",
                        )
                    return out, unit
        return None, None

    def _gradients(self, loss_unit: Unit | None) -> None:
        """Prop. 1: u(grad v) = u(L) - u(v); a probe loss <out, R> is dimensionless."""
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
            if "unit" in node.meta:
                node.meta["grad_unit"] = dual(node.meta["unit"])


def _has_float(val: Any) -> bool:
    return any(isinstance(t, torch.Tensor) and t.is_floating_point() for t in pytree.tree_leaves(val))


def _opaque_like(val: Any, name: str) -> UnitValue:
    if isinstance(val, (list, tuple)):
        return tuple(_opaque_like(v, f"{name}.{i}") for i, v in enumerate(val))
    if isinstance(val, torch.Tensor) and val.is_floating_point():
        return Unit.generator(f"v:{name}")
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
    tg = traced if traced is not None else trace(model, example_inputs, method=method)  # type: ignore[arg-type]
    decls = resolve_declarations(model, declare)
    inputs = {k: as_unit(v, f"input {k!r}") for k, v in (input_units or {}).items()}
    return run_inference(tg, decls, inputs, floor_eps)
