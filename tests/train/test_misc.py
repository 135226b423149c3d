"""Schedules, the pydoc fallback corpus, loss-curve plots and the pytest helper."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from unitcheck.models import build

from unitcheck.cli import main
from unitcheck.testing import UnitViolationError, assert_no_new_violations
from unitcheck.train.data import load_corpus
from unitcheck.train.schedule import lr_factor


def test_schedules() -> None:
    cos = [lr_factor(s, 100, "cosine", 10, 0.1, 0.2) for s in range(100)]
    assert cos[0] == pytest.approx(0.1) and cos[9] == pytest.approx(1.0)
    assert cos[-1] == pytest.approx(0.1, abs=1e-3) and all(a >= b for a, b in zip(cos[10:], cos[11:]))
    wsd = [lr_factor(s, 100, "wsd", 0, 0.1, 0.2) for s in range(101)]
    assert wsd[0] == wsd[79] == 1.0 and wsd[100] == pytest.approx(0.1) and wsd[90] < 1.0
    with pytest.raises(ValueError):
        lr_factor(0, 10, "triangle", 0, 0.1, 0.2)


def test_pydoc_fallback_corpus() -> None:
    c = load_corpus("char", source="pydoc")
    assert c.name == "pydoc" and len(c.train) > 100_000 and c.vocab_size > 50


def test_plot_writes_a_png(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    for name, losses in (("a", [4.0, 3.0, 2.5]), ("b", [4.1, 3.5, 3.0])):
        run = tmp_path / name
        run.mkdir()
        lines = [json.dumps({"step": i, "train_loss": v, **({"val_loss": v} if i == 2 else {})}) for i, v in enumerate(losses)]
        (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "loss.png"
    assert main(["plot", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["plot", str(tmp_path / "missing"), "--out", str(out)]) == 2


def test_pytest_helper(tmp_path: Path) -> None:
    assert_no_new_violations(*build("gct"))
    with pytest.raises(UnitViolationError, match="UC201"):
        assert_no_new_violations(*build("gpt"))
    baseline = tmp_path / "b.json"
    main(["lint", "gpt", "--write-baseline", str(baseline), "--format", "json"])
    assert_no_new_violations(*build("gpt"), baseline=str(baseline))
