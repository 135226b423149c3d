"""The training loop: learning, exact resume after SIGKILL, atomic checkpoints, NaN stop, DDP."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from unitcheck.cli import main
from unitcheck.train import NonFiniteLoss, TrainConfig, train
from unitcheck.train.checkpoint import load_checkpoint, save_checkpoint
from unitcheck.train.data import load_corpus

TINY = dict(n_layer=2, n_embd=32, n_head=2, seq_len=32, batch_size=8, eval_batches=2, seed=3)


def losses(run: Path) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["train_loss"]) for r in rows]


def test_corpus_is_shakespeare_and_split_deterministically() -> None:
    a, b = load_corpus("char"), load_corpus("char")
    assert a.name == "shakespeare" and torch.equal(a.val, b.val)
    assert a.decode(a.encode("To be, or not to be")) == "To be, or not to be"
    assert load_corpus("byte").vocab_size == 256


def test_tiny_model_learns(tmp_path: Path) -> None:
    cfg = TrainConfig(model="gpt", steps=60, lr=3e-3, warmup=5, eval_interval=60, out_dir=str(tmp_path), **TINY)
    res = train(cfg)
    vocab = load_corpus("char").vocab_size
    first = res.history[0]["train_loss"]
    assert abs(first - math.log(vocab)) < 0.5  # starts near ln(vocab)
    assert res.final_val_loss < first - 1.0  # a clear margin


def _train_cmd(out: Path, steps: int, extra: list[str] | None = None) -> list[str]:
    return [sys.executable, "-m", "unitcheck", "train", "--model", "gpt", "--n-layer", "2", "--n-embd", "32",
            "--n-head", "2", "--seq-len", "32", "--batch-size", "8", "--steps", str(steps), "--eval-interval",
            "10", "--eval-batches", "2", "--checkpoint-interval", "5", "--seed", "3", "--out-dir", str(out),
            *(extra or [])]


def test_resume_after_sigkill_reproduces_the_uninterrupted_run(tmp_path: Path) -> None:
    full, killed = tmp_path / "full", tmp_path / "killed"
    subprocess.run(_train_cmd(full, 40), check=True, capture_output=True, timeout=300)
    proc = subprocess.Popen(_train_cmd(killed, 40), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt = killed / "ckpt.pt"
    deadline = time.time() + 120
    while time.time() < deadline:  # kill once a mid-run checkpoint exists
        if ckpt.exists() and load_checkpoint(str(ckpt))["step"] >= 14:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    step = load_checkpoint(str(ckpt))["step"]
    assert 14 <= step < 39, "the kill must land mid-training"
    subprocess.run(_train_cmd(killed, 40, ["--resume"]), check=True, capture_output=True, timeout=300)
    a, b = dict(losses(full)), dict(losses(killed))
    assert sorted(b) == list(range(40))  # no duplicated or missing steps after the resume
    assert all(a[s] == b[s] for s in range(40)), [(s, a[s], b[s]) for s in range(40) if a[s] != b[s]][:3]


def test_interrupted_checkpoint_write_keeps_the_previous_one(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "ckpt.pt"
    save_checkpoint(str(path), {"step": 1, "w": torch.ones(3)})

    def dying_save(obj, f, *a, **k):  # type: ignore[no-untyped-def]
        with open(f, "wb") as fh:
            fh.write(b"partial")
        raise KeyboardInterrupt("killed mid-write")

    monkeypatch.setattr(torch, "save", dying_save)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(str(path), {"step": 2, "w": torch.zeros(3)})
    monkeypatch.undo()
    assert load_checkpoint(str(path))["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]


def test_nan_stops_with_exit_1_and_keeps_a_loadable_checkpoint(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    argv = _train_cmd(tmp_path, 20, ["--inject-nan-at", "12"])[3:]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 1 and "non-finite loss (nan) at step 12" in err and err.count("\n") == 1
    state = load_checkpoint(str(tmp_path / "ckpt.pt"))
    assert state["step"] == 9 and all(torch.isfinite(v).all() for v in state["model"].values())
    with pytest.raises(NonFiniteLoss):
        train(TrainConfig(model="gpt", steps=3, inject_nan_at=0, out_dir=str(tmp_path / "b"), **TINY))


def test_torchrun_two_processes_match_one(tmp_path: Path) -> None:
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    assert torchrun is not None
    script = str(Path(__file__).with_name("ddp_script.py"))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([torchrun, "--standalone", "--nproc_per_node=2", script, str(tmp_path / "ddp")],
                   check=True, capture_output=True, timeout=600, env=env)
    subprocess.run([sys.executable, script, str(tmp_path / "single")], check=True, capture_output=True,
                   timeout=600, env=env)
    r0 = torch.load(tmp_path / "ddp" / "rank0.pt", weights_only=True)
    r1 = torch.load(tmp_path / "ddp" / "rank1.pt", weights_only=True)
    assert all(torch.equal(r0[k], r1[k]) for k in r0)  # identical across ranks
    single = dict(losses(tmp_path / "single"))
    ddp = dict(losses(tmp_path / "ddp"))
    assert sorted(ddp) == sorted(single)
    assert all(abs(ddp[s] - single[s]) < 1e-5 * abs(single[s]) for s in single)
    r_single = torch.load(tmp_path / "single" / "rank0.pt", weights_only=True)
    assert all(torch.allclose(r0[k], r_single[k], rtol=1e-4, atol=1e-6) for k in r0)
