import pytest
import torch
from torch import nn

import unitcheck
from unitcheck.declarations import resolve_declarations, undeclare
from unitcheck.infer import infer_units
from unitcheck.record import unit_of
from unitcheck.units import Unit


class Scaled(nn.Module):
    __units__ = {"gain": "1"}

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.gain = nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.gain * x) + self.fc(x)


def test_class_attribute_declares_dimensionless_gain() -> None:
    m = Scaled()
    decls = resolve_declarations(m)
    assert decls["gain"] == Unit()
    ug = infer_units(m, torch.randn(2, 4), input_units={"x": "1"})
    # gain is dimensionless and x is declared dimensionless: tanh is fine
    assert not [v for v in ug.violations if v.rule == "UC202"]


def test_precedence_call_over_class_over_globs() -> None:
    m = Scaled()
    decls = resolve_declarations(m, {"*": "s:glob"})
    assert decls["fc.weight"] == Unit.parse("s:glob")
    assert decls["gain"] == Unit()  # class attribute beats the glob
    unitcheck.declare(m, {"fc.*": "s:module"})
    unitcheck.declare(m.fc.bias, "s:param")
    try:
        decls = resolve_declarations(m, {"*": "s:glob"})
        assert decls["fc.weight"] == Unit.parse("s:module")
        assert decls["fc.bias"] == Unit.parse("s:param")
    finally:
        undeclare(m)
        undeclare(m.fc.bias)
    assert resolve_declarations(m)["gain"] == Unit()
    assert "fc.bias" not in resolve_declarations(m)


def test_declared_unit_reaches_the_graph() -> None:
    m = nn.Linear(3, 3, bias=False)
    unitcheck.declare(m.weight, "s:w^2")
    try:
        ug = infer_units(m, torch.randn(2, 3))
        lin = next(n for n in ug.graph.nodes if n.name == "linear")
        assert unit_of(lin) == Unit.parse("in:input * s:w^2")
    finally:
        undeclare(m.weight)


@pytest.mark.parametrize("bad", ["p:w^", "", 3.5, "weight"])
def test_bad_declarations_raise_value_error(bad: object) -> None:
    with pytest.raises(ValueError):
        unitcheck.declare(nn.Linear(2, 2).weight, bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        resolve_declarations(nn.Linear(2, 2), {"*": bad})  # type: ignore[dict-item]
