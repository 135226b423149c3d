"""Neural units: characters of the rescaling group G = (R+)^K (SPEC 1).

A unit is a sparse map generator -> exponent with exact ``Fraction`` exponents; the empty map is
*dimensionless*. Units form an abelian group written multiplicatively, like pint's
``UnitsContainer``: ``u * v`` adds exponents, ``u / v`` subtracts them, ``u ** c`` scales them.

>>> w = Unit.parse("p:fc.weight")
>>> x = Unit.parse("in:x")
>>> str(w * x ** Fraction(1, 2))
'p:fc.weight · in:x^1/2'
>>> (w / w).is_dimensionless
True
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from fractions import Fraction

from .errors import UnitcheckError

__all__ = ["Unit", "DIMENSIONLESS", "OPAQUE_PREFIX", "UnitParseError"]

OPAQUE_PREFIX = "v:"
"""Generators born at a violation or an unknown op: the oracle does not check values they touch."""

_Exp = Fraction | int
_ONE = Fraction(1)


class UnitParseError(UnitcheckError, ValueError):
    """A unit string that does not follow ``"1"`` or ``"gen^exp * gen^exp ..."``."""


def _as_fraction(value: _Exp | float | str) -> Fraction:
    if isinstance(value, Fraction):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"unit exponent must be finite, got {value!r}")
        return Fraction(value).limit_denominator(1 << 16)
    return Fraction(value)


class Unit:
    """An immutable, hashable character chi_u(g) = prod_k g_k^u_k."""

    __slots__ = ("_items", "_hash")

    _items: tuple[tuple[str, Fraction], ...]
    _hash: int

    def __init__(self, exponents: Mapping[str, _Exp] | Iterable[tuple[str, _Exp]] = ()) -> None:
        pairs = exponents.items() if isinstance(exponents, Mapping) else exponents
        acc: dict[str, Fraction] = {}
        for gen, exp in pairs:
            if not isinstance(gen, str) or not gen:
                raise ValueError(f"generator names are non-empty strings, got {gen!r}")
            acc[gen] = acc.get(gen, Fraction(0)) + _as_fraction(exp)
        items = tuple(sorted((g, e) for g, e in acc.items() if e != 0))
        object.__setattr__(self, "_items", items)
        object.__setattr__(self, "_hash", hash(items))

    @classmethod
    def generator(cls, name: str) -> Unit:
        """The unit of one generator to the first power."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"generator names are non-empty strings, got {name!r}")
        return cls._from_sorted(((name, _ONE),))

    @classmethod
    def opaque(cls, name: str) -> Unit:
        """A fresh opaque generator for the output of a violation or an unknown op at ``name``."""
        return cls.generator(OPAQUE_PREFIX + name)

    @classmethod
    def _from_sorted(cls, items: tuple[tuple[str, Fraction], ...]) -> Unit:
        obj = cls.__new__(cls)
        object.__setattr__(obj, "_items", items)
        object.__setattr__(obj, "_hash", hash(items))
        return obj

    # -- algebra -------------------------------------------------------------------------
    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Unit is immutable")

    def __mul__(self, other: Unit) -> Unit:
        if not isinstance(other, Unit):
            return NotImplemented
        if not other._items:
            return self
        if not self._items:
            return other
        acc = dict(self._items)
        for g, e in other._items:
            acc[g] = acc.get(g, Fraction(0)) + e
        return Unit._from_sorted(tuple(sorted((g, e) for g, e in acc.items() if e != 0)))

    def __truediv__(self, other: Unit) -> Unit:
        if not isinstance(other, Unit):
            return NotImplemented
        return self * other.inverse()

    def __pow__(self, power: _Exp | float) -> Unit:
        p = _as_fraction(power)
        if p == 0 or not self._items:
            return DIMENSIONLESS
        return Unit._from_sorted(tuple((g, e * p) for g, e in self._items))

    def inverse(self) -> Unit:
        return Unit._from_sorted(tuple((g, -e) for g, e in self._items))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Unit) and self._items == other._items

    def __hash__(self) -> int:
        return self._hash

    # -- queries ---------------------------------------------------------------------------
    @property
    def is_dimensionless(self) -> bool:
        return not self._items

    @property
    def is_opaque(self) -> bool:
        """True when the unit involves a generator born at a violation or an unknown op."""
        return any(g.startswith(OPAQUE_PREFIX) for g, _ in self._items)

    def generators(self) -> tuple[str, ...]:
        return tuple(g for g, _ in self._items)

    def exponent(self, gen: str) -> Fraction:
        for g, e in self._items:
            if g == gen:
                return e
        return Fraction(0)

    def items(self) -> Iterator[tuple[str, Fraction]]:
        return iter(self._items)

    def __iter__(self) -> Iterator[str]:
        return (g for g, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return True  # a unit is a value, even when dimensionless

    def character(self, g: Mapping[str, float]) -> float:
        """chi_u(g) for a group element given as generator -> positive factor (missing = 1)."""
        out = 1.0
        for gen, e in self._items:
            factor = g.get(gen, 1.0)
            out *= factor ** float(e)
        return out

    # -- text ------------------------------------------------------------------------------
    def __str__(self) -> str:
        return self.format()

    def __repr__(self) -> str:
        return f"Unit({self.format(ascii=True)!r})"

    def format(self, ascii: bool = False) -> str:
        """``p:w^-1/2 · in:x``; ``1`` when dimensionless. ``ascii`` joins with `` * ``."""
        if not self._items:
            return "1"
        sep = " * " if ascii else " · "
        parts = []
        for g, e in self._items:
            parts.append(g if e == 1 else f"{g}^{e}")
        return sep.join(parts)

    def to_json(self) -> dict[str, str]:
        """Exponents as exact strings (``"-1/2"``): JSON has no rationals."""
        return {g: str(e) for g, e in self._items}

    @classmethod
    def from_json(cls, data: Mapping[str, str | int]) -> Unit:
        return cls({g: Fraction(str(e)) for g, e in data.items()})

    @classmethod
    def parse(cls, text: str) -> Unit:
        """Parse ``"1"``, ``"p:foo^-1/2 * in:x"``, ``"s:tau · p:w^2"``; raises UnitParseError."""
        if not isinstance(text, str):
            raise UnitParseError(f"a unit string is expected, got {type(text).__name__}")
        src = text.strip()
        if src in ("1", "", "dimensionless"):
            if src == "":
                raise UnitParseError("empty unit string (use '1' for dimensionless)")
            return DIMENSIONLESS
        acc: list[tuple[str, Fraction]] = []
        for raw in _SPLIT.split(src):
            term = raw.strip()
            if not term:
                raise UnitParseError(f"empty factor in unit {text!r}")
            m = _TERM.fullmatch(term)
            if m is None:
                raise UnitParseError(
                    f"cannot parse factor {term!r} in unit {text!r}: expected 'kind:name' "
                    "optionally followed by '^' and an exponent such as -1/2"
                )
            gen, exp = m.group("gen"), m.group("exp")
            if gen == "1" and exp is None:
                continue
            try:
                value = Fraction(exp) if exp is not None else Fraction(1)
            except (ValueError, ZeroDivisionError) as err:
                raise UnitParseError(f"bad exponent {exp!r} in unit {text!r}") from err
            acc.append((gen, value))
        return cls(acc)


_SPLIT = re.compile(r"\s*[*·]\s*")
_TERM = re.compile(r"(?P<gen>1|[A-Za-z_][\w.\-]*:[^\s*·^]+)(?:\^(?P<exp>[+-]?\d+(?:/\d+)?))?")

DIMENSIONLESS = Unit()
