from fractions import Fraction

import pytest

from unitcheck.units import DIMENSIONLESS, Unit, UnitParseError


def test_algebra_is_an_abelian_group() -> None:
    w, x = Unit.parse("p:w"), Unit.parse("in:x")
    assert w * x == x * w
    assert (w * x) / x == w
    assert (w / w).is_dimensionless
    assert w ** Fraction(1, 2) * w ** Fraction(1, 2) == w
    assert (w * x).inverse() * w * x == DIMENSIONLESS
    assert w**0 == DIMENSIONLESS


def test_exact_exponents_and_sparse_storage() -> None:
    u = Unit.parse("p:w^-1/2 * in:x")
    assert u.exponent("p:w") == Fraction(-1, 2)
    assert u.exponent("p:missing") == 0
    assert len(u * Unit.parse("p:w^1/2")) == 1


def test_format_and_parse_round_trip() -> None:
    u = Unit.parse("p:h.0.attn.c_attn.weight^-1/2 · in:x")
    assert str(u) == "in:x · p:h.0.attn.c_attn.weight^-1/2"
    assert Unit.parse(str(u)) == u
    assert Unit.parse(u.format(ascii=True)) == u
    assert str(DIMENSIONLESS) == "1"
    assert Unit.from_json(u.to_json()) == u


def test_hashable_and_immutable() -> None:
    a, b = Unit.parse("p:a * p:b"), Unit.parse("p:b · p:a")
    assert hash(a) == hash(b) and {a: 1}[b] == 1
    with pytest.raises(AttributeError):
        a.x = 1  # type: ignore[attr-defined]


def test_character() -> None:
    u = Unit.parse("p:w^2 * in:x^-1/2")
    assert u.character({"p:w": 3.0, "in:x": 4.0}) == pytest.approx(9.0 / 2.0)
    assert u.is_opaque is False and Unit.parse("v:add_3").is_opaque


@pytest.mark.parametrize("bad", ["", "p:w^", "w", "p:w^x", "p:w ** 2", "p:w^1/0", "*"])
def test_parse_errors_are_clear_value_errors(bad: str) -> None:
    with pytest.raises(ValueError) as err:
        Unit.parse(bad)
    assert isinstance(err.value, UnitParseError)
    assert str(err.value)
