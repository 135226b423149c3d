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
    main = {"gpt", "llama", "qknorm", "ngpt", "gct"}
    assert set(lr["summary"]) == main | {"gct-plain", "gct-rope-swiglu"}
    assert all("relative_error" in v for v in lr["summary"].values())
    swaps = {m: v["swap_recipe"] for m, v in lr["summary"].items() if m in main}  # each with the other recipe
    assert swaps == {"gpt": "ngpt", "llama": "ngpt", "qknorm": "ngpt", "ngpt": "te", "gct": "te"}
    own = {m: v["nvfp4_recipe"] for m, v in lr["summary"].items()}
    assert own["gpt"] == "te" and own["ngpt"] == own["gct"] == own["gct-rope-swiglu"] == "matched"
    for label, b in lr["brackets"].items():  # NVFP4 at the best fp32 rate and its neighbours
        fp = sorted(v["lr"] for v in lr["entries"].values() if v["model"] == label and v["precision"] == "fp32")
        assert b["rates"] == fp and len(fp) >= 3
        i = fp.index(b["best"]["fp32"])
        near = set(fp[max(0, i - 1):i + 2]) if label in main else {fp[i]}
        assert near == {v["lr"] for v in lr["entries"].values() if v["model"] == label and v["precision"] == "nvfp4"}
    assert all(v["stopped"] in ("completed", "diverged") for v in lr["entries"].values())  # no run cut short
    assert all("uvi_curve" in v and "stopped_status" in v for v in lr["entries"].values())
    ptq = json.loads((q / "ptq.json").read_text())["entries"]
    assert all({"int8_increase", "nvfp4_increase", "kappa_scale"} <= set(v) for v in ptq.values())
    depth = json.loads((q / "depth.json").read_text())
    assert set(depth["tuned_lr"]) == set(depth["own_lr"]) == {"gct", "gpt", "ngpt", "ngpt+proj"}
    assert all(set(v) == {"2", "4"} for v in depth["own_lr"].values())  # each depth's own best rate
    fp = json.loads((q / "fingerprint.json").read_text())
    assert fp["summary"]["matches"] == fp["summary"]["generators"] > 0
    for name in ("gpt", "gct"):  # same roles at initialisation and trained
        assert fp["entries"][f"{name}|init"]["generators"] == fp["entries"][f"{name}|trained"]["generators"] > 0
    snr = json.loads((q / "snr_width.json").read_text())
    assert snr["ratios"] and all("eq5_ratio" in r and r["bwd_measured_ratio"] is not None for r in snr["ratios"])
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
    rt = json.loads((q / "rewrite_train.json").read_text())["entries"]  # issue 15: original and rewritten
    assert set(rt) == {f"{a}|{f}" for a in ("falcon", "mixtral", "bert") for f in ("original", "gct")}
    assert all(v["rewrite_exit"] == 0 and v["violations_after"] == 0 for k, v in rt.items() if k.endswith("|gct"))
    assert all(v["steps"] == v["steps_planned"] and v["final_val_loss"] is not None for v in rt.values())
    assert "Rewritten transformers models in training" in page
    stored = [*plots, "rewrite_train"]
    spent = sum(v["seconds"] for name in stored for v in json.loads((q / f"{name}.json").read_text())["entries"].values())
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


@pytest.mark.slow
def test_gpu_quick_runs_on_cpu_at_tiny_size(tmp_path: Path) -> None:
    """The GPU script's CPU smoke test: every (model, width) row with both losses and the SNR."""
    env = {**os.environ, "UNITCHECK_RESULTS": str(tmp_path / "results"), "DEVICE": "cpu", "WIDTHS": "32 64",
           "STEPS": "2", "PY": sys.executable}
    done = subprocess.run([str(ROOT / "bench" / "experiments" / "gpu_quick.sh"), "--layers", "1", "--seq", "16",
                           "--batch", "2"], env=env, timeout=1800, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((tmp_path / "results" / "gpu" / "gpu_quick.json").read_text())
    assert set(data["entries"]) == {f"{m}|{w}" for m in ("gpt", "ngpt", "gct") for w in (32, 64)}
    for v in data["entries"].values():
        assert v["hp_loss"] > 0 and v["nvfp4_loss"] > 0 and "snr_dot_db" in v and "relative_error" in v
    assert data["settings"]["device"] == "cpu"


def _committed(name: str, finished_key: str) -> list[dict]:  # type: ignore[type-arg]
    """The committed results of an experiment, every budget that has them finished (a run still
    in progress is committed without the key its end writes)."""
    found = []
    for sub in ("", "reduced"):
        path = ROOT / "docs" / "results" / sub / f"{name}.json"
        if path.exists():
            data = json.loads(path.read_text())
            if finished_key in data:
                found.append(data)
    return found


def test_committed_lr_grids_bracket_every_best_rate() -> None:
    """Issue 17: each model's best rate (fp32, every run to its end, and under the UVI stop) has a
    tried rate on both sides in the committed learning-rate results."""
    runs = _committed("lr_robustness", "brackets")
    if not runs:
        pytest.skip("no committed learning-rate results")
    for data in runs:
        for label, b in data["brackets"].items():
            rates = sorted(b["rates"])
            assert b["inside"], label
            for series in ("fp32", "fp32 stopped"):
                assert rates[0] < b["best"][series] < rates[-1], (label, series, rates)
            s = data["summary"][label]
            assert rates[0] < s["best_lr"] < rates[-1]


def test_committed_depth_rates_are_bracketed_at_every_depth() -> None:
    runs = _committed("depth", "own_lr")
    if not runs:
        pytest.skip("no committed depth results")
    for data in runs:
        for label, by_depth in data["own_lr"].items():
            for depth, o in by_depth.items():
                rates = sorted(o["rates"])
                assert o["inside"] and rates[0] < o["best"] < rates[-1], (label, depth, rates)
            assert data["tuned_lr"][label] == by_depth[min(by_depth, key=int)]["best"]
