"""The result of unit inference: a traced graph whose nodes carry a :class:`UnitRecord`."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch.fx as fx
from torch.utils import _pytree as pytree

from .diagnostics import Violation
from .record import record
from .tracer import TracedGraph
from .units import Unit
from .values import UnitValue

__all__ = ["Binding", "UnitGraph"]


@dataclass(frozen=True, slots=True)
class Binding:
    """How a parameter's or buffer's unit was decided (SPEC 2), kept so that ``unitcheck
    explain`` can say why a leaf carries the unit it does."""

    how: str  # "declared", "pin", "combine", "nonlinear" or "default" (never constrained)
    at: str | None = None  # the node whose constraint bound it
    tied: tuple[str, ...] = ()  # the other leaves of the same unit variable (unified by a combine)


@dataclass
class UnitGraph:
    """Units on every node (``record(node)``), the findings, and the loss."""

    traced: TracedGraph
    violations: list[Violation]
    notes: list[Violation]
    unknown_ops: Counter[str]
    coverage: float
    compute_nodes: int
    loss_node: fx.Node | None
    loss_unit: Unit | None
    infer_seconds: float = 0.0
    bindings: dict[str, Binding] = field(default_factory=dict)  # qualified leaf name -> how it was bound
    _by_name: dict[str, fx.Node] = field(default_factory=dict, init=False, repr=False)

    @property
    def graph(self) -> fx.Graph:
        return self.traced.graph

    def node(self, name: str) -> fx.Node:
        if name not in self._by_name:
            self._by_name.clear()
            self._by_name.update((n.name, n) for n in self.graph.nodes)
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"no node named {name!r}") from None

    def unit(self, node: fx.Node | str) -> UnitValue:
        return record(self.node(node) if isinstance(node, str) else node).unit

    def grad_unit(self, node: fx.Node | str) -> UnitValue:
        return record(self.node(node) if isinstance(node, str) else node).grad_unit

    def leaf_units(self) -> dict[str, UnitValue]:
        """Qualified leaf name -> unit, for parameters, buffers and inputs."""
        return {self.traced.leaves[n.name].name: self.unit(n) for n in self.traced.leaf_nodes()}

    def generators(self) -> list[str]:
        gens: set[str] = set()
        for n in self.graph.nodes:
            for u in pytree.tree_leaves(record(n).unit, is_leaf=lambda x: isinstance(x, Unit)):
                if isinstance(u, Unit):
                    gens.update(u.generators())
        return sorted(gens)

    @property
    def errors(self) -> list[Violation]:
        return [v for v in self.violations if v.severity == "error"]
