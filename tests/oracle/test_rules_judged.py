"""The oracle must catch wrong rules: a wrong unit, a false violation, a missed violation."""

from __future__ import annotations

import pytest
import torch
import unitcheck.rules  # noqa: F401  (the built-in rules, to be patched)
from torch import nn
from unitcheck.models import build

from unitcheck import oracle, registry
from unitcheck.rulectx import RuleContext
from unitcheck.values import UnitValue

aten = torch.ops.aten


@pytest.fixture
def patched_rule():  # type: ignore[no-untyped-def]
    """Temporarily replace the rule for one target."""
    saved: dict = {}

    def patch(target, fn):  # type: ignore[no-untyped-def]
        key = target if target in registry._RULES else target.overloadpacket
        saved.setdefault(key, registry._RULES[key])
        registry._RULES[key] = fn

    yield patch
    registry._RULES.update(saved)


def test_wrong_unit_from_a_rule_is_a_disagreement(patched_rule) -> None:  # type: ignore[no-untyped-def]
    def gelu_as_homogeneous(ctx: RuleContext) -> UnitValue:  # wrong: gelu is not degree 1
        return ctx.u(ctx.args[0])

    patched_rule(aten.gelu.default, gelu_as_homogeneous)
    model, inputs = build("gpt")
    res = oracle.verify(model, inputs, modes=("local",))
    bad = [d for d in res.disagreements if d.mode == "local"]
    assert bad and all("gelu" in d.node for d in bad)
    assert res.checked > res.agreed


def test_false_violation_is_not_confirmed(patched_rule) -> None:  # type: ignore[no-untyped-def]
    original = registry.lookup(aten.linear.default)

    def linear_always_violates(ctx: RuleContext) -> UnitValue:
        original(ctx)
        return ctx.violation("UC101", "pretend mismatch", {})

    patched_rule(aten.linear.default, linear_always_violates)
    model, inputs = build("gct")
    res = oracle.verify(model, inputs, modes=("local",))
    assert res.violations > 0 and res.confirmed < res.violations
    assert any(d.mode == "violation" for d in res.disagreements)


def test_missed_violation_fails_the_global_check(patched_rule) -> None:  # type: ignore[no-untyped-def]
    def silent_add(ctx: RuleContext) -> UnitValue:  # wrong: ignores the mismatch
        return ctx.u(ctx.args[0])

    patched_rule(aten.add.Tensor, silent_add)
    model, inputs = build("gpt")
    res = oracle.verify(model, inputs)
    assert not res.ok
    assert any(d.mode in ("local", "global") for d in res.disagreements)


def test_oracle_refuses_meta_models() -> None:
    with torch.device("meta"):
        m = nn.Linear(4, 4)
    with pytest.raises(oracle.OracleError, match="needs real values"):
        oracle.verify(m, torch.randn(2, 4))


def test_close_handles_masks() -> None:
    a = torch.tensor([1.0, float("-inf"), -3e38])
    assert oracle.close(a, a.clone())[0]
    assert not oracle.close(a, torch.tensor([1.0, float("inf"), -3e38]))[0]
    assert not oracle.close(a, torch.tensor([1.1, float("-inf"), -3e38]))[0]
