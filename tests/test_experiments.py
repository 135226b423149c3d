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
