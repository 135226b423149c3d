"""The bundled training loop (nanoGPT-style), single process or under torchrun.

>>> result = train(TrainConfig(model="gct", steps=200, out_dir="runs/gct"))   # doctest: +SKIP
>>> result.final_val_loss                                                       # doctest: +SKIP
1.93
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..errors import UnitcheckError, UsageError
from ..fsutil import atomic_write_text
from .checkpoint import CHECKPOINT, load_checkpoint, save_checkpoint
from .config import TrainConfig
from .data import Batcher, Corpus, load_corpus
from .distributed import Dist, setup, teardown
from .schedule import lr_factor

__all__ = ["train", "TrainResult", "NonFiniteLoss", "build_model", "evaluate", "METRICS"]

METRICS = "metrics.jsonl"


class NonFiniteLoss(UnitcheckError, RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept (exit code 1)."""

    exit_code = 1


@dataclass
class TrainResult:
    out_dir: str
    steps: int
    final_train_loss: float
    final_val_loss: float
    tokens_per_s: float
    step_seconds: float
    stopped: str = "completed"
    history: list[dict[str, Any]] = field(default_factory=list, repr=False)
    model: nn.Module | None = field(default=None, repr=False)


def _device(cfg: TrainConfig, d: Dist) -> torch.device:
    if cfg.device == "auto":
        return torch.device(f"cuda:{d.local_rank}" if torch.cuda.is_available() else "cpu")
    return torch.device(cfg.device)


def build_model(cfg: TrainConfig, vocab_size: int) -> nn.Module:
    """The model spec resolved by the one loader; a bundled model at the run's size and seed."""
    from ..loader import bundled_fields, load_model, parse_sets

    sets = parse_sets([s for s in cfg.model_set.split(",") if s]) if cfg.model_set else {}
    fields = bundled_fields(cfg.model)
    if fields is not None:
        wanted = dict(vocab_size=vocab_size, block_size=cfg.seq_len, n_layer=cfg.n_layer,
                      n_head=cfg.n_head, n_embd=cfg.n_embd, n_kv_head=cfg.n_head)
        sets = {**{k: v for k, v in wanted.items() if k in fields}, "seed": cfg.seed, **sets}
    return load_model(cfg.model, sets).model  # type: ignore[no-any-return]


def _optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    other = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": other, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2))


_TE_BACKEND: dict[str, bool] = {"on": False}


def _autocast(cfg: TrainConfig, device: torch.device) -> Any:
    if cfg.precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    if cfg.precision in ("nvfp4", "fp8") and _TE_BACKEND["on"]:
        from ..quant import te_backend

        return te_backend.autocast("fp8" if cfg.precision == "fp8" else cfg.nvfp4_recipe)
    return contextlib.nullcontext()


def _loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = model(x, y)
    return out[1] if isinstance(out, (tuple, list)) else out


@torch.no_grad()
def evaluate(model: nn.Module, corpus: Corpus, cfg: TrainConfig, device: torch.device,
             d: Dist | None = None) -> float:
    """Mean validation loss over ``eval_batches`` windows drawn from a fixed seed, so passes are
    comparable and do not touch the training RNG."""
    d = d or Dist()
    was = model.training
    model.eval()
    batcher = Batcher(corpus.val, cfg.seq_len, cfg.batch_size, seed=cfg.seed + 1, rank=d.rank, world=d.world)
    total = 0.0
    for _ in range(cfg.eval_batches):
        x, y = batcher.next()
        with _autocast(cfg, device):
            total += float(_loss(model, x.to(device), y.to(device)))
    model.train(was)
    return d.mean(total / cfg.eval_batches)


def _truncate_metrics(path: str, last_step: int) -> None:
    if not os.path.exists(path):
        return
    keep = []
    with open(path) as fh:
        for line in fh:
            try:
                if json.loads(line)["step"] <= last_step:
                    keep.append(line)
            except (json.JSONDecodeError, KeyError):
                continue  # a line cut by a kill
    atomic_write_text(path, "".join(keep))


class _Progress:
    """A rich progress bar on a terminal, plain log lines otherwise; rank 0 only."""

    def __init__(self, cfg: TrainConfig, start: int, enabled: bool) -> None:
        self.cfg, self.enabled = cfg, enabled
        self.bar: Any = None
        if enabled and sys.stdout.isatty():
            from rich.progress import (
                BarColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                                TextColumn("{task.completed}/{task.total}"),
                                TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                                TimeRemainingColumn(), transient=False)
            self.task = self.bar.add_task(cfg.model, total=cfg.steps, completed=start, info="")
            self.bar.start()

    def update(self, step: int, rec: dict[str, Any]) -> None:
        if not self.enabled:
            return
        info = f"loss {rec['train_loss']:.3f}" + (f" val {rec['val_loss']:.3f}" if "val_loss" in rec else "")
        info += f" {rec['tokens_per_s']:.0f} tok/s"
        if self.bar is not None:
            self.bar.update(self.task, completed=step + 1, info=info)
        elif (step + 1) % self.cfg.log_interval == 0 or "val_loss" in rec or step + 1 == self.cfg.steps:
            print(f"step {step + 1}/{self.cfg.steps} {info} lr {rec['lr']:.2e}", flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def train(cfg: TrainConfig, on_step: Callable[[int, dict[str, Any]], None] | None = None) -> TrainResult:
    """Train ``cfg.model`` on the bundled corpus; writes metrics.jsonl and checkpoints."""
    cfg.validate()
    cfg = cfg.effective()
    d = setup("cuda" if cfg.device.startswith("cuda") or (cfg.device == "auto" and torch.cuda.is_available()) else "cpu")
    try:
        return _train(cfg, d, on_step)
    finally:
        teardown(d)


def _train(cfg: TrainConfig, d: Dist, on_step: Callable[[int, dict[str, Any]], None] | None) -> TrainResult:
    device = _device(cfg, d)
    torch.manual_seed(cfg.seed)
    corpus = load_corpus(cfg.tokenizer, cfg.corpus)
    model = build_model(cfg, corpus.vocab_size).to(device)
    model.train()
    if cfg.precision in ("nvfp4", "fp8"):
        from ..quant import te_backend
        from ..quant.substitute import substitute_nvfp4

        if cfg.precision == "fp8":  # Hopper: Transformer Engine's FP8 current-scaling recipe
            ok, why = te_backend.fp8_availability()
            if not ok:
                raise UsageError(f"--precision fp8 needs Transformer Engine on an FP8 GPU: {why}")
        report = substitute_nvfp4(model, recipe="te" if cfg.precision == "fp8" else cfg.nvfp4_recipe,
                                  keep_last=cfg.keep_last, backend="te" if cfg.precision == "fp8" else "auto")
        _TE_BACKEND["on"] = report.backend == "transformer_engine"
        if d.main:
            print(report.summary(), flush=True)
    opt = _optimizer(model, cfg)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s, cfg.steps, cfg.schedule, cfg.warmup, cfg.min_lr_ratio, cfg.decay_fraction))
    batcher = Batcher(corpus.train, cfg.seq_len, cfg.batch_size, seed=cfg.seed, rank=d.rank, world=d.world)
    os.makedirs(cfg.out_dir, exist_ok=True)
    ckpt_path = os.path.join(cfg.out_dir, CHECKPOINT)
    metrics_path = os.path.join(cfg.out_dir, METRICS)
    start = 0
    if cfg.resume and os.path.exists(ckpt_path):
        state = load_checkpoint(ckpt_path)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"])
        batcher.restore(state["data"])
        start = int(state["step"]) + 1
        if d.main:
            _truncate_metrics(metrics_path, start - 1)
            print(f"resumed from {ckpt_path} at step {start}", flush=True)
    elif d.main:
        if cfg.resume:
            print(f"no checkpoint at {ckpt_path}: starting from step 0", flush=True)
        if os.path.exists(metrics_path):
            os.remove(metrics_path)
    if d.main:
        atomic_write_text(os.path.join(cfg.out_dir, "config.json"), json.dumps(cfg.to_json(), indent=2) + "\n")
    net: nn.Module = nn.parallel.DistributedDataParallel(model) if d.enabled else model
    normalise = getattr(model, "normalize_weights", None) if cfg.normalised() else None
    tokens = cfg.batch_size * cfg.seq_len
    history: list[dict[str, Any]] = []
    progress = _Progress(cfg, start, d.main)
    uvi_monitor = _uvi_monitor(cfg, model, corpus, device) if cfg.uvi_interval > 0 else None
    stopped = "completed"
    t_start = time.perf_counter()
    last_val = float("nan")
    rec: dict[str, Any] = {}
    step = start - 1
    metrics_fh = open(metrics_path, "a") if d.main else None  # noqa: SIM115 (kept open for the run)
    try:
        for step in range(start, cfg.steps):
            t0 = time.perf_counter()
            x, y = (t.to(device) for t in batcher.next())
            with _autocast(cfg, device):
                loss = _loss(net, x, y)
            if step == cfg.inject_nan_at:
                loss = loss * float("nan")
            loss_value = d.mean(float(loss.detach()))
            if not math.isfinite(loss_value):
                raise NonFiniteLoss(
                    f"non-finite loss ({loss_value}) at step {step}; stopped, the last good checkpoint "
                    f"is {ckpt_path if os.path.exists(ckpt_path) else 'none (no checkpoint written yet)'}"
                )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            params = [p for p in model.parameters() if p.grad is not None]
            if cfg.grad_clip > 0:
                grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip))
            else:
                grad_norm = float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params])))  # type: ignore[union-attr]
            lr = opt.param_groups[0]["lr"]
            opt.step()
            sched.step()
            if normalise is not None:
                normalise()
            dt = time.perf_counter() - t0
            rec = {"step": step, "train_loss": loss_value, "lr": lr, "tokens_per_s": tokens / dt,
                   "grad_norm": grad_norm, "step_seconds": dt}
            last = step + 1 == cfg.steps
            out_of_time = cfg.max_seconds > 0 and time.perf_counter() - t_start > cfg.max_seconds
            if (step + 1) % cfg.eval_interval == 0 or last or out_of_time:
                last_val = evaluate(net, corpus, cfg, device, d)
                rec["val_loss"] = last_val
            if uvi_monitor is not None and (step + 1) % cfg.uvi_interval == 0:
                rec.update(uvi_monitor.measure())
                if uvi_monitor.should_stop():
                    stopped = f"uvi_stop: |UVI| above {cfg.uvi_stop} for {cfg.uvi_patience} measurements"
            history.append(rec)
            if metrics_fh is not None:
                metrics_fh.write(json.dumps(rec) + "\n")
                metrics_fh.flush()
            if d.main and ((step + 1) % cfg.checkpoint_interval == 0 or last or out_of_time or stopped != "completed"):
                _save(ckpt_path, model, opt, sched, batcher, step, cfg, corpus)
            progress.update(step, rec)
            if on_step is not None:
                on_step(step, rec)
            if out_of_time:
                stopped = f"max_seconds ({cfg.max_seconds:g} s) reached at step {step + 1}"
            if stopped != "completed":
                break
    finally:
        progress.close()
        if metrics_fh is not None:
            metrics_fh.close()
    if math.isnan(last_val):
        last_val = evaluate(net, corpus, cfg, device, d)
    step_times = [h["step_seconds"] for h in history[len(history) // 5:]] or [float("nan")]
    step_s = sorted(step_times)[len(step_times) // 2]
    return TrainResult(cfg.out_dir, step + 1, rec.get("train_loss", float("nan")), last_val,
                       tokens / step_s if step_s == step_s else float("nan"), step_s, stopped, history, model)


def _save(path: str, model: nn.Module, opt: torch.optim.Optimizer, sched: Any, batcher: Batcher,
          step: int, cfg: TrainConfig, corpus: Corpus) -> None:
    save_checkpoint(path, {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "rng": torch.get_rng_state(),
        "data": batcher.state(),
        "step": step,
        "config": cfg.to_json(),
        "vocab": corpus.vocab if corpus.tokenizer == "char" else None,
    })


def _uvi_monitor(cfg: TrainConfig, model: nn.Module, corpus: Corpus, device: torch.device) -> Any:
    from ..diagnose.monitor import UVIMonitor

    return UVIMonitor(model, corpus, cfg, device)

