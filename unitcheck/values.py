"""What a graph value can be, unit-wise (SPEC 1 and 2).

- :class:`~unitcheck.units.Unit`: a unitful (or dimensionless) float tensor;
- :data:`INDEX`: integer/bool tensors, shapes, masks: no unit, never rescaled;
- :data:`POLY`: polymorphic constants (0, +-inf, the dtype's extreme finite values) that are
  equivariant under any scaling, such as an additive attention mask;
- :class:`Var`: a learnable parameter (or buffer) whose unit is not bound yet. It flows through
  unit-transparent ops and is bound by its first constraint (unification, union-find);
- :class:`Literal`: a Python scalar argument (``x * 0.5``, ``var + 1e-5``);
- a tuple of the above for multi-output ops.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal as TLiteral
from typing import TypeAlias

from .units import Unit

__all__ = ["INDEX", "POLY", "Index", "Poly", "Var", "Literal", "UnitValue", "is_poly_number"]


class Index:
    """Singleton kind for integer/bool data: never rescaled."""

    _inst: Index | None = None

    def __new__(cls) -> Index:
        if cls._inst is None:
            cls._inst = super().__new__(cls)
        return cls._inst

    def __repr__(self) -> str:
        return "INDEX"

    def __str__(self) -> str:
        return "index"


class Poly:
    """Singleton kind for constants equivariant under any scaling (0, +-inf, finfo extremes)."""

    _inst: Poly | None = None

    def __new__(cls) -> Poly:
        if cls._inst is None:
            cls._inst = super().__new__(cls)
        return cls._inst

    def __repr__(self) -> str:
        return "POLY"

    def __str__(self) -> str:
        return "polymorphic"


INDEX = Index()
POLY = Poly()

_EXTREME = 1e30  # masking code uses finfo(dtype).min/max in place of -inf; anything this large acts alike


def is_poly_number(x: float) -> bool:
    """0, +-inf and the dtype-extreme finite values masking code uses are scale-polymorphic."""
    return x == 0 or math.isinf(x) or abs(x) >= _EXTREME


@dataclass(frozen=True)
class Literal:
    """A Python scalar argument; dimensionless, but additions of it are judged by its size."""

    value: float

    @property
    def is_poly(self) -> bool:
        return is_poly_number(self.value)


@dataclass(eq=False)
class Var:
    """An unbound unit variable for a learnable parameter or a buffer (SPEC 2).

    Union-find: ``find()`` gives the representative; the representative holds the binding.
    """

    names: list[str]
    kind: TLiteral["param", "buffer"]
    parent: Var | None = None
    bound: Unit | None = None
    bound_at: str | None = None  # node name of the binding constraint
    how: str | None = None  # "combine", "pin", "nonlinear", "default"

    def find(self) -> Var:
        root = self
        while root.parent is not None:
            root = root.parent
        node = self
        while node.parent is not None and node.parent is not root:  # path compression
            nxt = node.parent
            node.parent = root
            node = nxt
        return root

    def bind(self, unit: Unit, at: str | None, how: str) -> None:
        """Bind this variable's class to ``unit`` (``at``: the node that bound it)."""
        root = self.find()
        root.bound, root.bound_at, root.how = unit, at, how

    @staticmethod
    def unify(variables: Sequence[Var]) -> Var:
        """Merge the classes of unbound variables; the first one's root represents them all."""
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

    def resolved(self) -> Unit | Var:
        root = self.find()
        return root.bound if root.bound is not None else root

    def generator_name(self) -> str:
        return "p:" + "&".join(self.find().names)

    def __str__(self) -> str:
        """What a message shows: the generator the parameter gets unless a constraint binds it."""
        root = self.find()
        return str(root.bound) if root.bound is not None else root.generator_name()

    def __repr__(self) -> str:
        root = self.find()
        state = f"={root.bound}" if root.bound is not None else ""
        return f"Var({'&'.join(root.names)}{state})"


UnitValue: TypeAlias = "Unit | Index | Poly | Var | Literal | tuple[UnitValue, ...] | None"
