"""Run directories that never lie (issue 13): a resumed run keeps its configuration, a finished
run stays as it is, a new run does not mix with an old one, temporary files do not pile up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from unitcheck.cli import main
from unitcheck.train import TrainConfig, train
from unitcheck.train.checkpoint import load_checkpoint

from ..user_files import TINY_TRAIN, copy_tree, snapshot


def train_cli(capsys: pytest.CaptureFixture[str], out: Path, steps: int, *extra: str) -> tuple[int, str, str]:
    code = main(["train", *TINY_TRAIN, "--steps", str(steps), "--out-dir", str(out), *extra])
    o, e = capsys.readouterr()
    return code, o, e


def steps_logged(run: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture
def run(tmp_path: Path, run_template: Path) -> Path:
    """A finished two-step run of TINY_TRAIN."""
    return copy_tree(run_template, tmp_path / "run")


@pytest.mark.parametrize("change", [["--lr", "0.01"], ["--seed", "4"], ["--n-layer", "2"],
                                    ["--precision", "bf16"], ["--model", "llama"]])
def test_resume_with_another_configuration_is_refused(run: Path, capsys: pytest.CaptureFixture[str],
                                                      change: list[str]) -> None:
    before = snapshot(run)
    code, _, err = train_cli(capsys, run, 4, "--resume", *change)
    assert code == 2 and change[0] in err and err.count("\n") == 1
    assert snapshot(run) == before  # config.json still says what the checkpoint is


def test_resume_may_extend_the_run(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = train_cli(capsys, run, 4, "--resume", "--eval-interval", "1")
    assert code == 0 and "resumed from" in out and "at step 2" in out
    assert steps_logged(run) == [0, 1, 2, 3]
    assert json.loads((run / "config.json").read_text())["steps"] == 4
    assert load_checkpoint(str(run / "ckpt.pt"))["step"] == 3


@pytest.mark.parametrize("steps", [2, 1])
def test_resuming_a_finished_run_says_so_and_changes_nothing(run: Path, capsys: pytest.CaptureFixture[str],
                                                             steps: int) -> None:
    before = snapshot(run)
    code, out, err = train_cli(capsys, run, steps, "--resume")
    assert code == 0 and err == ""
    assert "already finished at step 2" in out and "nan" not in out
    assert snapshot(run) == before


def test_a_new_run_into_a_run_directory_needs_overwrite(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(run)
    code, _, err = train_cli(capsys, run, 3, "--seed", "4")
    assert code == 2 and "--overwrite" in err and snapshot(run) == before
    code, _, _ = train_cli(capsys, run, 3, "--seed", "4", "--overwrite")
    assert code == 0 and steps_logged(run) == [0, 1, 2]
    assert load_checkpoint(str(run / "ckpt.pt"))["config"]["seed"] == 4
    assert json.loads((run / "config.json").read_text())["seed"] == 4


class Killed(Exception):
    pass


def _kill_at(step: int):  # type: ignore[no-untyped-def]
    def on_step(s: int, _rec: dict[str, object]) -> None:
        if s == step:
            raise Killed
    return on_step


def test_an_overwritten_run_killed_early_never_resumes_the_old_checkpoint(run: Path) -> None:
    """The old code kept the previous run's checkpoint: killed before its first checkpoint and
    resumed, the new run continued the old one under the new configuration (a mixed directory)."""
    base = dict(model="gpt", n_layer=1, n_embd=16, n_head=2, seq_len=16, batch_size=4, eval_interval=2,
                eval_batches=1, out_dir=str(run), steps=3, seed=4)
    with pytest.raises(Killed):
        train(TrainConfig(**base, checkpoint_interval=10, overwrite=True), on_step=_kill_at(0))
    assert not (run / "ckpt.pt").exists()
    res = train(TrainConfig(**base, checkpoint_interval=10, resume=True))
    assert res.steps == 3 and steps_logged(run) == [0, 1, 2]
    assert load_checkpoint(str(run / "ckpt.pt"))["config"]["seed"] == 4


def test_stale_temporaries_are_removed_when_a_run_starts(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stale = [run / ".ckpt.pt.x1y2z3.tmp", run / ".metrics.jsonl.abc.tmp"]
    stale[0].write_bytes(b"\0" * 5_000_000)
    stale[1].write_text("{")
    mine = run / ".notes.tmp"
    mine.write_text("not unitcheck's")
    code, _, _ = train_cli(capsys, run, 3, "--resume")
    assert code == 0 and not any(p.exists() for p in stale) and mine.exists()


def test_a_checkpoint_of_another_shape_is_refused_before_loading(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = load_checkpoint(str(run / "ckpt.pt"))
    state["model"]["transformer.wte.weight"] = torch.zeros(3, 3)
    torch.save(state, run / "ckpt.pt")
    before = snapshot(run)
    code, _, err = train_cli(capsys, run, 4, "--resume")
    assert code == 2 and "does not fit the model" in err and "transformer.wte.weight" in err
    assert err.count("\n") == 1 and snapshot(run) == before
