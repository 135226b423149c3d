"""The experiments at tiny size (slow set): every script runs and writes the fields the results
page needs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_run_all_quick(tmp_path: Path) -> None:
    env = {**os.environ, "UNITCHECK_RESULTS": str(tmp_path / "results")}
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "experiments" / "run_all.py"), "--quick"],
                          cwd=tmp_path, env=env, timeout=3000, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    q = tmp_path / "results" / "quick"
    lr = json.loads((q / "lr_robustness.json").read_text())
    assert len(lr["entries"]) == 55 and set(lr["summary"]) == {"gpt", "llama", "qknorm", "ngpt", "gct"}
    assert all("relative_error" in v for v in lr["summary"].values())
    swaps = {m: v["swap_recipe"] for m, v in lr["summary"].items()}  # each model with the other recipe
    assert swaps == {"gpt": "ngpt", "llama": "ngpt", "qknorm": "ngpt", "ngpt": "te", "gct": "te"}
    ptq = json.loads((q / "ptq.json").read_text())["entries"]
    assert all({"int8_increase", "nvfp4_increase", "kappa_scale"} <= set(v) for v in ptq.values())
    depth = json.loads((q / "depth.json").read_text())
    assert set(depth["tuned_lr"]) == {"gct", "gpt", "ngpt", "ngpt+proj"}
    fp = json.loads((q / "fingerprint.json").read_text())
    assert fp["summary"]["matches"] == fp["summary"]["generators"] > 0
    for name in ("gpt", "gct"):  # same roles at initialisation and trained
        assert fp["entries"][f"{name}|init"]["generators"] == fp["entries"][f"{name}|trained"]["generators"] > 0
    snr = json.loads((q / "snr_width.json").read_text())
    assert snr["ratios"] and all("eq5_ratio" in r for r in snr["ratios"])
    pinn = json.loads((q / "pinn.json").read_text())
    assert set(pinn["worst"]) == {"equal", "adaptive", "unit-aware"} and pinn["lint"]["equal"] == ["UC303"]
    vision = json.loads((q / "vision.json").read_text())["entries"]
    assert vision["gct"]["violations"] == 0 and vision["vit"]["violations"] > 0
    page = (q / "results.md").read_text()
    for section in ("Learning-rate robustness", "NVFP4 relative error", "Post-training", "Depth transfer",
                    "fingerprint", "SNR with width", "PINN", "Vision"):
        assert section in page
    plots = ["lr_robustness", "ptq", "depth", "fingerprint", "snr_width", "pinn", "vision"]
    assert all((q / f"{name}.png").stat().st_size > 1000 for name in plots)
    assert all(f"]({name}.png)" in page for name in plots)  # every plot is linked, beside the page
    assert len(vision["gct"]["train_curve"]) == 30
    spent = sum(v["seconds"] for name in plots for v in json.loads((q / f"{name}.json").read_text())["entries"].values())
    assert f"summed over entries): {spent / 60:.0f} min" in page  # compute survives resumes


def test_store_resumes_and_reruns_stale_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "bench" / "experiments"))
    import common

    monkeypatch.setattr(common, "RESULTS", str(tmp_path))
    calls: list[float] = []

    def job(lr: float) -> dict[str, float]:
        calls.append(lr)
        return {"lr": lr, "loss": 1.0 / lr}

    common.Store("demo", quick=False).get_or_run("a", lambda: job(1e-3), lr=1e-3)
    again = common.Store("demo", quick=False)  # a new process: reads the file back
    assert again.get_or_run("a", lambda: job(1e-3), lr=1e-3)["loss"] == pytest.approx(1e3)
    assert calls == [1e-3]  # resumed, not rerun
    assert again.get_or_run("a", lambda: job(2e-3), lr=2e-3)["lr"] == 2e-3  # other settings: rerun
    assert calls == [1e-3, 2e-3]
    assert json.loads((tmp_path / "demo.json").read_text())["entries"]["a"]["lr"] == 2e-3


def _experiments(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.syspath_prepend(str(ROOT / "bench" / "experiments"))
    import common

    return common


@pytest.mark.parametrize("optimum", [1e-4, 7e-4, 2e-3, 3e-3, 9e-3, 5e-2])
def test_bracket_extends_until_the_best_rate_is_inside(monkeypatch: pytest.MonkeyPatch, optimum: float) -> None:
    """Synthetic loss curves, parabolas in log(lr) with the minimum anywhere: the grid grows
    past whichever end holds the best rate until it is strictly inside."""
    import math

    common = _experiments(monkeypatch)
    calls: list[float] = []

    def run(lr: float) -> dict[str, float | None]:
        calls.append(lr)
        return {"fp32": 2.0 + (math.log(lr) - math.log(optimum)) ** 2}

    b = common.bracket(run, [1e-3, 2e-3, 4e-3], max_extra=8)
    rates = sorted(b.losses["fp32"])
    assert b.inside and rates[0] < b.best["fp32"] < rates[-1]
    assert abs(math.log2(b.best["fp32"] / optimum)) <= 0.5  # the grid point nearest the optimum
    assert len(calls) == len(set(calls))  # no rate run twice
    if optimum == 2e-3:
        assert rates == [1e-3, 2e-3, 4e-3]  # already bracketed: nothing extra


def test_bracket_counts_diverged_runs_as_worst_and_reports_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    common = _experiments(monkeypatch)

    def run(lr: float) -> dict[str, float | None]:
        # fp32 improves with the rate until it diverges above 8e-3; "stopped" keeps falling
        return {"fp32": None if lr > 8e-3 else 3.0 - lr * 100, "stopped": 3.0 - lr}

    b = common.bracket(run, [1e-3, 2e-3, 4e-3], max_extra=2)
    assert b.best["fp32"] == 8e-3 and 16e-3 in b.losses["fp32"] and b.losses["fp32"][16e-3] == float("inf")
    assert not b.inside  # "stopped" is best at the top of every grid: the budget ran out
    assert max(b.losses["stopped"]) == 16e-3  # two rates added, then it stops


def test_stopped_version_reads_the_loss_at_the_stop_step(monkeypatch: pytest.MonkeyPatch) -> None:
    common = _experiments(monkeypatch)
    entry = {"final_val_loss": 2.0, "diverged": False,
             "uvi_curve": [[10, 1.0], [20, 3.5], [30, 2.0], [40, 3.2], [50, 3.9], [60, 4.0]],
             "val_curve": [[10, 3.0], [20, 2.8], [30, 2.6], [40, 2.5], [50, 2.45], [60, 2.0]]}
    assert common.uvi_stop_point(entry) == 50  # two in a row above 3: 40 and 50, not 20
    assert common.stopped_version(entry) == (2.45, "uvi_stop at step 50")
    calm = {**entry, "uvi_curve": [[10, 1.0], [20, 3.5]]}
    assert common.stopped_version(calm) == (2.0, "completed")
