"""A pytest helper (registered as a pytest plugin) that fails a test on new unit violations.

>>> from unitcheck.testing import assert_no_new_violations          # doctest: +SKIP
>>> assert_no_new_violations(model, (idx, targets), baseline="unitcheck-baseline.json")  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

__all__ = ["assert_no_new_violations", "UnitViolationError", "same_computation"]


class UnitViolationError(AssertionError):
    """New unit violations were found."""


def assert_no_new_violations(
    model: Any, example_inputs: Any, baseline: str | None = None, fail_on: str = "error", **lint_kw: Any
) -> Any:
    """Lint ``model``; raise UnitViolationError listing the violations not in ``baseline``."""
    from .linter import lint

    report = lint(model, example_inputs, **lint_kw)
    if baseline is not None:
        from .baseline import apply_baseline

        report, _ = apply_baseline(report, baseline)
    if report.count_at_least(fail_on):
        lines = [f"{v.rule} {v.module or '<root>'} ({v.node}): {v.message}" for v in report.violations]
        raise UnitViolationError(f"{len(lines)} new unit violation(s):\n  " + "\n  ".join(lines))
    return report


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "unitcheck: tests that assert unit consistency of a model")


def same_computation(original: Any, generated: Any, example_inputs: Any, training: bool = False,
                     seed: int = 0) -> bool:
    """Do two models compute the same outputs, gradients and buffer updates bit for bit (one
    step, same seed)? Raises AssertionError listing what differs."""
    from .rewrite.equal import differences

    diffs = differences(original, generated, example_inputs, training, seed)
    if diffs:
        raise AssertionError("the models differ:\n  " + "\n  ".join(diffs))
    return True
