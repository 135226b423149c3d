"""The rule API: what a unit rule sees (:class:`RuleContext`) and the constraints it can state.

A rule is a function ``rule(ctx) -> UnitValue`` registered for explicit targets
(:func:`unitcheck.rule`). It reads its arguments' units with ``ctx.u``, states constraints
(``pin``, ``to_dimensionless``, ``same_unit``) and reports violations with ``ctx.violation``; the
inference pass (``infer.py``) calls it once per node. The engine behind ``ctx.engine`` is any
object with the small :class:`Engine` interface.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
import torch.fx as fx

from .fxutil import base_name
from .graphs import residual_pair
from .record import Floor
from .units import DIMENSIONLESS, Unit
from .values import INDEX, POLY, Index, Literal, Poly, UnitValue, Var

__all__ = ["RuleContext", "Combined", "Engine"]


class Engine(Protocol):
    """What the inference pass offers its rules."""

    floor_eps: float

    def unit(self, node: fx.Node) -> UnitValue: ...

    def report(self, node: fx.Node, code: str, message: str, units: dict[str, Unit],
               fix: str | None, consumed: Iterable[UnitValue] = (), role: str = "",
               sources: Mapping[str, Sequence[str]] | None = None) -> None: ...

    def add_floor(self, node: fx.Node, floor: Floor) -> bool: ...

    def order(self) -> dict[fx.Node, int]: ...


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

    def __init__(self, node: fx.Node, engine: Engine) -> None:
        self.node = node
        self.engine = engine
        self.args = node.args
        self.kwargs = node.kwargs

    # -- arguments ------------------------------------------------------------------------
    @property
    def op(self) -> str:
        """The op's short name (``add``, ``softmax``, ``view``)."""
        return base_name(self.node)

    def arg(self, index: int, name: str | None = None, default: Any = None) -> Any:
        if index < len(self.args):
            return self.args[index]
        if name is not None and name in self.kwargs:
            return self.kwargs[name]
        return default

    def u(self, a: Any) -> UnitValue:
        """The unit-value of a raw argument (a Node, a literal, a list of either)."""
        if isinstance(a, fx.Node):
            return _resolve(self.engine.unit(a))
        if isinstance(a, bool) or a is None:
            return None
        if isinstance(a, (int, float)):
            return Literal(float(a))
        if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return INDEX
        if isinstance(a, (list, tuple)):
            return tuple(self.u(x) for x in a)
        return None

    def val(self, a: Any = None) -> Any:
        """The recorded example value (``meta['val']``) of an argument, or of this node."""
        n = self.node if a is None else a
        return n.meta.get("val") if isinstance(n, fx.Node) else None

    def shape(self, a: Any = None) -> tuple[int, ...] | None:
        v = self.val(a)
        if isinstance(v, torch.Tensor):
            try:
                return tuple(int(s) for s in v.shape)
            except Exception:  # symbolic sizes
                return None
        return None

    def is_scalar(self, a: fx.Node) -> bool:
        s = self.shape(a)
        return s is not None and len(s) == 0

    # -- constraints ----------------------------------------------------------------------
    def bind(self, v: Var, unit: Unit, how: str = "combine") -> Unit:
        v.bind(unit, self.node.name, how)
        return unit

    def unify(self, variables: Sequence[Var]) -> Var:
        return Var.unify(variables)

    def pin(self, v: UnitValue) -> UnitValue:
        """A multiplicative use with a tensor: bind a weight variable to its own generator."""
        if isinstance(v, Var):
            root = v.find()
            if root.bound is None:
                unit = Unit.generator(root.generator_name()) if root.kind == "param" else DIMENSIONLESS
                self.bind(root, unit, "pin")
            return root.bound
        if isinstance(v, (Literal, Index)) or v is None:
            return DIMENSIONLESS
        return v

    def to_dimensionless(self, v: UnitValue) -> bool:
        """Constrain ``v`` to be dimensionless (binding a variable); False if it is unitful."""
        if isinstance(v, Var):
            root = v.find()
            if root.bound is None:
                self.bind(root, DIMENSIONLESS, "nonlinear")
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
                    self.bind(root, target, "combine")
                elif root.bound != target:
                    return Combined(None, mismatch=[*concrete, (var, root.bound)])
        elif variables and literals and not any_poly:
            # a literal is dimensionless: adding one to a parameter binds it so (1 + w)
            target = self.bind(self.unify(variables), DIMENSIONLESS)
        elif variables:
            target = self.unify(variables)
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
        """The opaque generator this node's output gets when it is a violation."""
        return Unit.opaque(self.node.name)

    def violation(
        self,
        code: str,
        message: str,
        units: Mapping[str, UnitValue],
        fix: str | None = None,
        consumed: Iterable[UnitValue] = (),
        role: str = "",
        sources: Mapping[str, Any] | None = None,
    ) -> Unit:
        """Record a violation at this node; the node's output gets an opaque generator.
        ``consumed``: values whose generators the violation consumes besides ``units`` (for the
        fingerprint); a parameter variable still unbound counts with the unit it ends up with.
        ``sources``: for a role whose unit is not one argument's (attention logits are
        ``u(q) u(k)``), the argument node(s) it is made of, so that ``unitcheck explain`` follows
        those and not every input."""
        shown = {k: u for k, u in units.items() if isinstance(u, Unit)}
        named = None
        if sources:
            named = {role_: [a.name for a in (src if isinstance(src, (list, tuple)) else [src])
                             if isinstance(a, fx.Node)] for role_, src in sources.items()}
        self.engine.report(self.node, code, message, shown, fix,
                           consumed=(*units.values(), *consumed), role=role, sources=named)
        return self.opaque()

    def floor(self, where: int | str | Literal, source: Any, power: int = 1, note: bool = True) -> None:
        """Mark an argument (a position, a keyword, or a literal value) as a numerical floor
        guarding ``source ** power``.

        The oracle rescales the floor by the character of that unit (computed from the final
        units, so a weight variable bound later is honoured); a note (UC902) is recorded once.
        """
        if not isinstance(source, fx.Node):
            return
        first = self.engine.add_floor(self.node, Floor(where, source, power))
        unit = self.u(source)
        if note and first and isinstance(unit, Unit) and not unit.is_dimensionless:
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
        """The code for a same-unit mismatch: UC303 for scalar loss terms, UC102 for a residual
        add, UC101 otherwise."""
        (a, ua), (b, ub) = _first_two_distinct(mismatch)
        units = {"lhs": ua, "rhs": ub}
        every = [u for _, u in mismatch]  # a cat of six tables consumes all six scales
        if isinstance(a, fx.Node) and isinstance(b, fx.Node) and self.is_scalar(a) and self.is_scalar(b):
            return self.violation(
                "UC303", f"loss terms with different units summed: {ua} and {ub}", units, consumed=every,
            )
        residual = (
            residual_pair(self.node, a, b, self.engine.order()) if what in ("add", "sub") else None
        )
        if residual is not None:
            stream, branch = residual
            us, ub_ = (ua, ub) if stream is a else (ub, ua)
            return self.violation(
                "UC102",
                f"residual {what} mixes the stream's unit {us} with the branch's unit {ub_}",
                {"stream": us, "branch": ub_}, consumed=every,
            )
        return self.violation(
            "UC101", f"{what} of tensors with different units: {ua} and {ub}", units, consumed=every,
        )


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

