"""Rule tests are data: a fixture model per rule family and a golden snapshot of its diagnostics.
The oracle judges each fixture too, so a snapshot cannot freeze a wrong rule."""

from __future__ import annotations

import pytest

from unitcheck import oracle
from unitcheck.codes import CODES
from unitcheck.infer import infer_units

from ..conftest import assert_snapshot, violation_summary
from .fixtures import FIXTURES, INPUT_UNITS


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_fixture_snapshot(name: str) -> None:
    model, inputs = FIXTURES[name]()
    ug = infer_units(model, inputs, input_units=INPUT_UNITS.get(name))
    data = {
        "violations": violation_summary(ug.violations),
        "notes": [n.rule for n in ug.notes],
        "loss_unit": None if ug.loss_unit is None else str(ug.loss_unit),
        "coverage": round(ug.coverage, 4),
    }
    assert_snapshot(f"rule_{name}", data)


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_fixture_is_judged_by_the_oracle(name: str) -> None:
    model, inputs = FIXTURES[name]()
    res = oracle.verify(model, inputs, input_units=INPUT_UNITS.get(name))
    assert res.disagreements == [], [str(d) for d in res.disagreements]
    assert res.violations == res.confirmed and not res.unexercised


@pytest.mark.parametrize("name", sorted(n for n in FIXTURES if "unknown_op" not in n))
def test_every_op_of_a_fixture_has_a_rule(name: str) -> None:
    model, inputs = FIXTURES[name]()
    assert not infer_units(model, inputs, input_units=INPUT_UNITS.get(name)).unknown_ops


def test_every_error_code_has_a_fixture() -> None:
    snapshot_text = " ".join(FIXTURES)
    for code, info in CODES.items():
        if info.opt_in or code == "UC903":
            continue
        assert code.lower() in snapshot_text, f"no fixture exercises {code}"
