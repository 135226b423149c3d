"""What unit inference stores on a node: one frozen record under one ``node.meta`` key.

As ``ShapeProp`` stores a ``TensorMetadata``, the inference pass stores a :class:`UnitRecord` in
``node.meta["unitcheck"]``; everything downstream (reports, oracle, rewriter, diagnostics) reads
it through the accessors here, never through ad-hoc meta keys.

>>> rec = record(node)                      # doctest: +SKIP
>>> str(rec.unit), str(rec.grad_unit), rec.violation   # doctest: +SKIP
('p:ln_1.weight', 'p:ln_1.weight^-1', None)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch.fx as fx

from .diagnostics import Location
from .units import Unit
from .values import Literal, UnitValue

__all__ = ["KEY", "Floor", "UnitRecord", "record", "unit_of", "store", "update"]

KEY = "unitcheck"


@dataclass(frozen=True, slots=True)
class Floor:
    """A numerical floor among a node's arguments (a position, a keyword, or a literal's value)
    that guards ``source ** power``: the oracle rescales it by that unit's character."""

    where: int | str | Literal
    source: fx.Node
    power: int = 1

    def unit(self) -> Unit | None:
        u = unit_of(self.source)
        return u**self.power if isinstance(u, Unit) else None


@dataclass(frozen=True, slots=True)
class UnitRecord:
    """Forward and gradient unit of a node and what the rules found there."""

    unit: UnitValue = None
    grad_unit: UnitValue = None
    violation: str | None = None  # rule code: the op itself breaks equivariance
    interface: str | None = None  # rule code: the op is equivariant, its result is not allowed (a unitful loss)
    unknown: bool = False  # no unit rule for the op (UC901): its output got an opaque generator
    floors: tuple[Floor, ...] = ()
    location: Location | None = None  # the user's source line, where a finding was reported

    @property
    def opaque_source(self) -> bool:
        """A violation or an op with no rule: the scaling of its output is unknown."""
        return self.violation is not None or self.unknown


_EMPTY = UnitRecord()


def record(node: fx.Node) -> UnitRecord:
    """The node's record; an empty one for nodes inference never saw (e.g. inserted by a rewrite)."""
    return node.meta.get(KEY, _EMPTY)  # type: ignore[no-any-return]


def unit_of(node: fx.Node) -> UnitValue:
    return record(node).unit


def store(node: fx.Node, rec: UnitRecord) -> None:
    node.meta[KEY] = rec


def update(node: fx.Node, **changes: Any) -> UnitRecord:
    """Store a copy of the node's record with ``changes`` (a test or a pass amending one field)."""
    rec = replace(record(node), **changes)
    store(node, rec)
    return rec
