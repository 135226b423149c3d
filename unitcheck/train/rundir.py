"""A run directory that never lies: its ``config.json`` and checkpoint describe the run its
``metrics.jsonl`` logs.

Deciding what to do with ``--out-dir`` reads and changes nothing (``plan_run``); the directory is
changed only once every check has passed (``prepare``):
- a new run refuses a directory that holds a run unless ``--overwrite``;
- ``--resume`` refuses a configuration other than the run's, except the fields that may change
  on resume (``MAY_CHANGE``: ``--steps`` extends a run; devices, intervals and time limits);
- resuming a finished run changes nothing and says so;
- temporary files of interrupted writes are removed when a run starts.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
from dataclasses import dataclass, field
from typing import Any

from ..errors import UnitcheckError, UsageError
from ..fsutil import atomic_write_text
from ..validate import InputError, read_json
from .checkpoint import CHECKPOINT, CheckpointError, check_training_state, load_checkpoint
from .config import TrainConfig

__all__ = ["RunDirError", "RunPlan", "plan_run", "prepare", "config_diff", "read_run_config",
           "read_metrics", "METRICS", "CONFIG", "RUN_FILES", "MAY_CHANGE"]

METRICS = "metrics.jsonl"
CONFIG = "config.json"
RUN_FILES = (CHECKPOINT, METRICS, CONFIG)

MAY_CHANGE = ("steps", "device", "max_seconds", "log_interval", "eval_interval", "eval_batches",
              "checkpoint_interval", "uvi_interval", "uvi_stop", "uvi_patience", "inject_nan_at",
              "resume", "overwrite", "out_dir")
"""Fields a resumed run may change: the length of the run, where it runs, and what is logged or
measured on the way; none of them changes the steps already taken."""


class RunDirError(UnitcheckError, ValueError):
    """A run directory that holds another run, a different configuration, or damaged files."""


@dataclass
class RunPlan:
    start: int = 0
    state: dict[str, Any] | None = None
    finished: bool = False
    remove: list[str] = field(default_factory=list)
    note: str | None = None


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def config_diff(recorded: dict[str, Any], current: TrainConfig) -> list[str]:
    """``--lr 0.002 -> 0.003`` for every field that differs and may not change on resume."""
    out = []
    for f in dataclasses.fields(current):
        if f.name in MAY_CHANGE:
            continue
        was, now = recorded.get(f.name, f.default), getattr(current, f.name)
        if was != now:
            out.append(f"{_flag(f.name)} {was!r} -> {now!r}")
    return out


def config_from_json(data: Any, path: str) -> TrainConfig:
    """A TrainConfig from a run's config.json, each field checked."""
    if not isinstance(data, dict):
        raise RunDirError(f"{path} holds a JSON {type(data).__name__}, not a run configuration")
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise RunDirError(f"{path}: unknown field(s) {', '.join(unknown)}: not a configuration of "
                          "this unitcheck's train")
    try:
        cfg = TrainConfig(**data)
        cfg.validate()
    except UsageError as err:
        raise RunDirError(f"{path}: {err}") from None
    return cfg


def read_run_config(run_dir: str) -> TrainConfig:
    path = os.path.join(run_dir, CONFIG)
    try:
        data = read_json(path, "the configuration unitcheck train writes")
    except InputError as err:
        raise RunDirError(str(err)) from None
    return config_from_json(data, path)


def _recorded(run_dir: str, state: dict[str, Any] | None) -> tuple[dict[str, Any] | None, str]:
    """The configuration the run was trained with: the checkpoint's, else config.json's."""
    if state is not None and isinstance(state.get("config"), dict):
        return state["config"], os.path.join(run_dir, CHECKPOINT)
    if os.path.exists(os.path.join(run_dir, CONFIG)):
        return read_run_config(run_dir).to_json(), os.path.join(run_dir, CONFIG)
    return None, ""


def plan_run(cfg: TrainConfig) -> RunPlan:
    """What the run will do with ``cfg.out_dir``; reads files, changes none. Raises RunDirError
    (or CheckpointError) for every directory it must not touch."""
    out = cfg.out_dir
    if os.path.exists(out) and not os.path.isdir(out):
        raise RunDirError(f"--out-dir {out} exists and is not a directory")
    present = [f for f in RUN_FILES if os.path.exists(os.path.join(out, f))]
    ckpt = os.path.join(out, CHECKPOINT)
    if cfg.overwrite:
        return RunPlan(remove=present)
    if not cfg.resume:
        if present:
            raise RunDirError(f"--out-dir {out} already holds a run ({', '.join(present)}): pass --resume "
                              "to continue it, --overwrite to replace it, or choose another --out-dir")
        return RunPlan()
    state = None
    if os.path.exists(ckpt):
        state = load_checkpoint(ckpt)
        check_training_state(state, ckpt)
    recorded, source = _recorded(out, state)
    if recorded is not None:
        diff = config_diff(recorded, cfg)
        if diff:
            raise RunDirError(
                f"--resume: the run in {out} was trained with another configuration ({source}): "
                f"{', '.join(diff)}; resume with the run's values, or start a new run (another "
                "--out-dir, or --overwrite); only --steps (to extend the run), --device and the "
                "logging, evaluation, checkpoint, UVI and time-limit flags may change on resume")
    if state is None:
        return RunPlan(remove=present, note=f"no checkpoint at {ckpt}: starting from step 0")
    start = int(state["step"]) + 1
    return RunPlan(start=start, state=state, finished=start >= cfg.steps)


def _stale(out: str) -> list[str]:
    """Temporary files that interrupted atomic writes of the run's files left behind."""
    found: list[str] = []
    for name in RUN_FILES:
        found += glob.glob(os.path.join(glob.escape(out), f".{glob.escape(name)}.*.tmp"))
    return found


def prepare(cfg: TrainConfig, plan: RunPlan) -> None:
    """Make the directory say what this run is (main process only, after every check passed):
    remove what ``--overwrite`` replaces and stale temporary files, keep the metrics up to the
    checkpoint, record the configuration."""
    out = cfg.out_dir
    os.makedirs(out, exist_ok=True)
    for path in _stale(out) + [os.path.join(out, f) for f in plan.remove]:
        if os.path.exists(path):
            os.remove(path)
    if plan.state is not None:
        _truncate_metrics(os.path.join(out, METRICS), plan.start - 1)
    atomic_write_text(os.path.join(out, CONFIG), json.dumps(cfg.to_json(), indent=2) + "\n")


def _truncate_metrics(path: str, last_step: int) -> None:
    """Drop logged steps past the checkpoint (the run repeats them) and lines a kill cut."""
    if not os.path.exists(path):
        return
    keep = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            step = row.get("step") if isinstance(row, dict) else None
            if isinstance(step, int) and not isinstance(step, bool) and step <= last_step:
                keep.append(line if line.endswith("\n") else line + "\n")
    atomic_write_text(path, "".join(keep))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def read_metrics(run_dir: str) -> list[dict[str, Any]]:
    """The rows of a run's metrics.jsonl, each with an integer ``step`` and a numeric
    ``train_loss`` (``val_loss`` numeric where present). A last line cut by a kill is skipped;
    any other bad line is an error naming the file and the line."""
    path = os.path.join(run_dir, METRICS)
    if not os.path.isfile(path):
        raise RunDirError(f"{run_dir} has no {METRICS} (is it a run directory?)")
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except UnicodeDecodeError as err:
        raise RunDirError(f"{path} is not UTF-8 text (byte {err.start}): not a metrics file of unitcheck train") from None
    rows = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines):
                continue  # the last line of a killed run
            raise RunDirError(f"{path} line {i} is not JSON: not a metrics file of unitcheck train") from None
        if not isinstance(row, dict):
            raise RunDirError(f"{path} line {i}: expected an object with step and train_loss")
        step = row.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise RunDirError(f"{path} line {i}: 'step' must be a non-negative integer, got {step!r}")
        for key in ("train_loss", "val_loss"):
            if (key == "train_loss" or key in row) and not _number(row.get(key)):
                raise RunDirError(f"{path} line {i}: {key!r} must be a number, got {row.get(key)!r}")
        rows.append(row)
    if not rows:
        raise RunDirError(f"{path} holds no logged step")
    return rows


def checkpoint_for(run_dir: str, cfg: TrainConfig) -> dict[str, Any]:
    """A run directory's checkpoint, checked against its config.json before anything loads it."""
    path = os.path.join(run_dir, CHECKPOINT)
    state = load_checkpoint(path)
    if not isinstance(state.get("model"), dict):
        raise CheckpointError(f"{path} holds no model state: not a checkpoint of unitcheck train")
    recorded = state.get("config")
    if isinstance(recorded, dict):
        diff = config_diff(recorded, cfg)
        if diff:
            raise RunDirError(f"{path} does not belong to {os.path.join(run_dir, CONFIG)}: {', '.join(diff)}")
    return state
