"""The oracle judges what the engine stores, at the tolerance it claims (issue 12, item 4).

A rule-engine bug that stores wrong gradient units, or an identity off by a relative 1e-5, must
each be a disagreement: a check that cannot fail is not a check.
"""

from __future__ import annotations

from typing import Any

import pytest
from unitcheck.models import build

from unitcheck import oracle
from unitcheck.cli import main
from unitcheck.infer import UnitPropagation
from unitcheck.oracle import interp, local
from unitcheck.record import record, update
from unitcheck.units import Unit


def _gct64() -> Any:
    model, inputs = build("gct")
    return oracle.prepare(model, inputs)[2]


def test_one_wrong_stored_gradient_unit_is_a_disagreement() -> None:
    ug = _gct64()
    assert oracle.verify_graph(ug, modes=("global",)).ok
    node = next(n for n in ug.graph.nodes if n.name.startswith("linear"))
    rec = record(node)
    update(node, grad_unit=rec.unit * (ug.loss_unit or Unit()))  # u(L) * u instead of u(L) / u
    res = oracle.verify_graph(ug, modes=("global",))
    assert [d.node for d in res.disagreements if d.mode == "grad"] == [node.name]
    assert res.grad_agreed == res.grad_checked - 1


def test_units_verify_fails_when_the_engine_inverts_every_gradient_unit(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    store = UnitPropagation._store

    def inverted(self: UnitPropagation, units: Any, loss_unit: Any) -> None:
        store(self, units, loss_unit)
        for n in self.traced.graph.nodes:
            g = record(n).grad_unit
            if isinstance(g, Unit) and not g.is_dimensionless:
                update(n, grad_unit=g.inverse())

    assert main(["units", "gct", "--verify"]) == 0
    monkeypatch.setattr(UnitPropagation, "_store", inverted)
    capsys.readouterr()
    assert main(["units", "gct", "--verify"]) == 1
    assert "disagreement: [grad]" in capsys.readouterr().out


@pytest.mark.parametrize("mode", ["global", "local"])
def test_a_value_off_by_a_relative_1e5_is_a_disagreement(monkeypatch, mode: str) -> None:  # type: ignore[no-untyped-def]
    ug = _gct64()
    target = next(n for n in ug.graph.nodes if n.name.startswith("linear"))
    assert oracle.verify_graph(ug, modes=(mode,)).ok

    def off(value: Any) -> Any:
        return value * (1 + 1e-5)

    if mode == "global":  # only the rescaled run (floors rescaled) is off
        run_node = interp.ScaledInterpreter.run_node

        def perturbed(self: interp.ScaledInterpreter, n: Any) -> Any:
            out = run_node(self, n)
            return off(out) if n is target and self.floor_factor is not None else out

        monkeypatch.setattr(interp.ScaledInterpreter, "run_node", perturbed)
    else:
        run_alone = local.run_alone

        def perturbed_alone(ug_: Any, node: Any, env: Any, g: Any, convert: Any = None) -> Any:
            out = run_alone(ug_, node, env, g, convert)
            return off(out) if node is target and g is not None and convert is None else out

        monkeypatch.setattr(local, "run_alone", perturbed_alone)
    res = oracle.verify_graph(ug, modes=(mode,))
    assert not res.ok
    assert target.name in {d.node for d in res.disagreements}


def test_complex_values_are_compared_in_both_parts() -> None:
    import torch

    from unitcheck.oracle.compare import close, ratio_varies

    a = torch.tensor([1.0 + 2.0j, 3.0 - 1.0j], dtype=torch.complex128)
    assert close(a, a.clone())[0]
    assert not close(a, a.real.to(torch.complex128))[0]  # same real parts, imaginary parts differ
    assert not ratio_varies(a * 2.5, a)
    assert ratio_varies(torch.complex(a.real * 2, a.imag * 3), a)
