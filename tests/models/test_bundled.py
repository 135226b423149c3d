"""Golden snapshots of the bundled models' violations, the oracle, and the fingerprint."""

from __future__ import annotations

import pytest
from unitcheck.models import build, names

from unitcheck import oracle
from unitcheck.infer import infer_units

from ..conftest import assert_snapshot, violation_summary


@pytest.mark.parametrize("name", names())
def test_violations_snapshot(name: str) -> None:
    model, inputs = build(name)
    ug = infer_units(model, inputs)
    assert ug.coverage == 1.0
    assert_snapshot(f"bundled_{name}", violation_summary(ug.violations))


def test_gpt_reports_the_ten_expected_interfaces() -> None:
    model, inputs = build("gpt", n_layer=2)
    rules = [v.rule for v in infer_units(model, inputs).violations]
    per_layer = ["UC201", "UC102", "UC202", "UC102"]
    assert rules == ["UC101", *per_layer, *per_layer, "UC301"]


@pytest.mark.parametrize("name", ["gct", "ngpt"])
def test_normalised_models_are_clean(name: str) -> None:
    model, inputs = build(name, n_layer=3)
    assert infer_units(model, inputs).violations == []


@pytest.mark.parametrize("name", names())
def test_oracle_agrees_everywhere(name: str) -> None:
    model, inputs = build(name)
    res = oracle.verify(model, inputs, with_fingerprint=True)
    assert res.disagreements == []
    assert res.checked == res.agreed and res.checked > 0
    assert res.violations == res.confirmed
    assert res.checked + res.violations == res.float_nodes  # every float node checked
    assert res.global_checked == res.global_agreed and res.global_checked > 0
    assert res.fingerprint is not None and all(r.match for r in res.fingerprint)
    if name in ("gct", "ngpt"):
        # no violation anywhere: the global mode and the gradient law reach every float node
        assert res.violations == 0
        assert res.grad_checked == res.grad_agreed == res.global_checked


def test_fingerprint_separates_gauge_from_non_gauge() -> None:
    model, inputs = build("gct")
    rows = oracle.fingerprint(model, inputs)
    assert rows and all(r.predicted_gauge for r in rows)
    assert max(r.measured for r in rows) < 1e-9
    model, inputs = build("gpt")
    rows = oracle.fingerprint(model, inputs)
    assert rows and not any(r.predicted_gauge for r in rows)
    assert min(r.measured for r in rows) > 1e-5


@pytest.mark.parametrize("name", ["gpt", "llama", "qknorm", "ngpt", "gct"])
def test_language_models_take_sliced_batches(name: str) -> None:
    """A window cut from a longer batch is not contiguous: the loss must still run, eagerly and traced."""
    model, (x, y) = build(name)
    wide_x, wide_y = x.repeat(1, 2), y.repeat(1, 2)
    sliced = (wide_x[:, : x.shape[1]], wide_y[:, : y.shape[1]])
    assert not sliced[1].is_contiguous()
    assert float(model(*sliced)[1]) == pytest.approx(float(model(x, y)[1]))
    rows = oracle.fingerprint(model, sliced, redraw=False)
    assert all(r.match for r in rows) and (rows or name == "ngpt")  # ngpt has no free radial generator
