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
from .checkpoint import CHECKPOINT, CheckpointError, save_checkpoint
from .config import TrainConfig
from .data import Batcher, Corpus, load_corpus
from .distributed import Dist, setup, teardown
from .rundir import METRICS, RunPlan, plan_run, prepare, read_metrics
from .schedule import lr_factor

__all__ = ["train", "TrainResult", "NonFiniteLoss", "build_model", "evaluate", "METRICS"]



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


def _model_sets(cfg: TrainConfig, vocab_size: int) -> dict[str, Any]:
    from ..loader import bundled_fields, parse_sets

    sets = parse_sets([s for s in cfg.model_set.split(",") if s]) if cfg.model_set else {}
    fields = bundled_fields(cfg.model)
    if fields is not None:
        wanted = dict(vocab_size=vocab_size, block_size=cfg.seq_len, n_layer=cfg.n_layer,
                      n_head=cfg.n_head, n_embd=cfg.n_embd, n_kv_head=cfg.n_head)
        sets = {**{k: v for k, v in wanted.items() if k in fields}, "seed": cfg.seed, **sets}
    return sets


def build_model(cfg: TrainConfig, vocab_size: int) -> nn.Module:
    """The model spec resolved by the one loader; a bundled model at the run's size and seed."""
    from ..loader import load_model

    return load_model(cfg.model, _model_sets(cfg, vocab_size)).model  # type: ignore[no-any-return]


def check_fits(cfg: TrainConfig, vocab_size: int) -> None:
    """Refuse a bundled model whose training state cannot fit in memory, measured on the meta
    device before anything is allocated: weights, gradients and AdamW's two moments (4 copies),
    plus the logits and residual stream of one batch (a lower bound on the activations)."""
    from ..loader import ModelSpecError, bundled_fields, load_model
    from ..resources import check_fits as fits
    from ..resources import module_bytes

    if bundled_fields(cfg.model) is None:
        return
    state = torch.get_rng_state()
    try:
        weights = module_bytes(load_model(cfg.model, _model_sets(cfg, vocab_size), device="meta").model)
    except ModelSpecError:
        return  # the real build says why
    finally:
        torch.set_rng_state(state)
    acts = cfg.batch_size * cfg.seq_len * 4 * (3 * vocab_size + 8 * cfg.n_embd * cfg.n_layer)
    fits(4 * weights + acts, f"training {cfg.model} at --n-layer {cfg.n_layer} --n-embd {cfg.n_embd} "
         f"--seq-len {cfg.seq_len} --batch-size {cfg.batch_size}",
         "reduce --seq-len, --batch-size, --n-embd or --n-layer")


def _forward_fails(model: nn.Module, ids: torch.Tensor, device: torch.device) -> Exception | None:
    """The exception one no-grad forward on ``ids`` (inputs and targets) raises, if any; the RNG
    and the model's mode are left as they were."""
    devices = [device.index or 0] if device.type == "cuda" else []
    was = model.training
    model.eval()
    x = ids.unsqueeze(0).to(device)
    try:
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            _loss(model, x, x)
        return None
    except UnitcheckError:
        raise
    except Exception as err:
        from ..resources import ResourceError, is_out_of_memory

        if is_out_of_memory(err):
            raise ResourceError(f"out of memory on one window of {ids.numel()} tokens; reduce --seq-len or "
                                "the model's size") from None
        return err
    finally:
        model.train(was)


def _largest(ok: Callable[[int], bool], low: int, high: int) -> int:
    """The largest n in [low, high) with ok(n), given ok(low) and not ok(high)."""
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if ok(mid) else (low, mid)
    return low


def check_window_and_vocabulary(model: nn.Module, cfg: TrainConfig, corpus: Corpus, device: torch.device) -> None:
    """Before the first step: the model takes windows of ``--seq-len`` tokens and every token id
    of the corpus. Each is probed (a window of token 0 of growing length, a short window of one
    id), and a model that refuses gets a one-line error naming the flag that fixes it, instead
    of an IndexError or an assertion inside its forward."""
    short = min(cfg.seq_len, 8)
    if _forward_fails(model, torch.zeros(short, dtype=torch.long), device) is not None:
        return  # it fails on anything: check_language_model says why
    if _forward_fails(model, torch.zeros(cfg.seq_len, dtype=torch.long), device) is not None:
        most = _largest(lambda n: _forward_fails(model, torch.zeros(n, dtype=torch.long), device) is None,
                        short, cfg.seq_len)
        raise UsageError(f"--seq-len {cfg.seq_len} is longer than --model {cfg.model} accepts (it fails on "
                         f"windows of more than {most} tokens): use --seq-len {most} or less")
    top = corpus.vocab_size - 1
    if _forward_fails(model, torch.full((short,), top, dtype=torch.long), device) is None:
        return
    size = _largest(lambda t: _forward_fails(model, torch.full((short,), t, dtype=torch.long), device) is None,
                    0, top) + 1
    source = f"the {corpus.name} corpus" if corpus.name != "data" else f"--data {cfg.data}"
    if corpus.tokenizer == "byte" and _char_vocab(cfg) <= size:
        fix = "--tokenizer char"
    elif cfg.model.startswith("hf:"):
        fix = f"--model-set vocab_size={corpus.vocab_size}"
    else:
        fix = "a model with a larger vocabulary or --data FILE with fewer distinct characters"
    raise UsageError(f"--model {cfg.model} has a vocabulary of {size} tokens, smaller than the "
                     f"{corpus.vocab_size} of {source} ({corpus.tokenizer} tokens): use {fix}")


def _char_vocab(cfg: TrainConfig) -> int:
    return load_corpus("char", cfg.corpus, data=cfg.data or None).vocab_size


def check_language_model(model: nn.Module, cfg: TrainConfig, corpus: Corpus, device: torch.device) -> None:
    """One forward pass on a window of the corpus, RNG untouched: the loop trains a model whose
    ``forward(idx, targets)`` returns the loss or ``(logits, loss)``; anything else is refused
    here rather than failing inside the first step."""
    n = min(cfg.seq_len, len(corpus.train) - 1)
    x, y = corpus.train[:n].unsqueeze(0).to(device), corpus.train[1:n + 1].unsqueeze(0).to(device)
    need = f"--model {cfg.model} is not a language model the loop can train"
    check_window_and_vocabulary(model, cfg, corpus, device)
    devices = [device.index or 0] if device.type == "cuda" else []
    was = model.training
    model.eval()
    try:
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            out = _loss(model, x, y)
    except UnitcheckError:
        raise
    except Exception as err:
        from ..resources import ResourceError, is_out_of_memory

        if is_out_of_memory(err):
            raise ResourceError(f"--model {cfg.model}: out of memory on one window of --seq-len "
                                f"{cfg.seq_len}; reduce --seq-len or the model's size") from None
        first = (str(err).strip().splitlines() or [""])[0][:200]
        raise UsageError(f"{need}: forward(idx, targets) on {n} tokens of the {corpus.tokenizer} corpus "
                         f"(vocabulary {corpus.vocab_size}) raised {type(err).__name__}: {first}") from None
    finally:
        model.train(was)
    if not (isinstance(out, torch.Tensor) and out.numel() == 1 and out.is_floating_point()):
        what = f"a tensor of shape {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
        raise UsageError(f"{need}: forward(idx, targets) returned {what}, not a scalar loss "
                         "(or (logits, loss))")


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


def _takes_labels(model: nn.Module) -> bool:
    """A transformers-style ``forward(input_ids, ..., labels=...)`` (also a rewrite of one)."""
    import inspect

    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False
    return "input_ids" in params and "labels" in params


def _loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The loss of ``forward(idx, targets)`` returning the loss or ``(logits, loss)``, or of a
    transformers-style ``forward(input_ids=x, labels=x)`` (which shifts the labels itself); the
    loss is the output's ``loss`` or its first scalar."""
    if _takes_labels(getattr(model, "module", model)):  # DDP wraps the model
        out = model(input_ids=x, labels=x)
    else:
        out = model(x, y)
    if getattr(out, "loss", None) is not None:
        return out.loss  # type: ignore[no-any-return]
    if isinstance(out, (tuple, list)):
        return next((o for o in out if isinstance(o, torch.Tensor) and o.numel() == 1 and o.is_floating_point()),
                    out[-1])
    return out  # type: ignore[no-any-return]


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
    cfg.check_device()
    cfg = cfg.effective()
    d = setup("cuda" if cfg.device.startswith("cuda") or (cfg.device == "auto" and torch.cuda.is_available()) else "cpu")
    try:
        return _train(cfg, d, on_step)
    finally:
        teardown(d)


def _finished(cfg: TrainConfig, plan: RunPlan) -> TrainResult:
    """A resumed run that has nothing left to do: its last logged losses, nothing written."""
    try:
        rows = read_metrics(cfg.out_dir)
    except UnitcheckError:
        rows = []
    train_loss = next((r["train_loss"] for r in reversed(rows)), float("nan"))
    val_loss = next((r["val_loss"] for r in reversed(rows) if "val_loss" in r), float("nan"))
    return TrainResult(cfg.out_dir, plan.start, train_loss, val_loss, float("nan"), float("nan"),
                       "already finished")


def _restore(plan: RunPlan, path: str, model: nn.Module, opt: torch.optim.Optimizer, sched: Any,
             batcher: Batcher) -> None:
    """Load a checkpoint whose configuration matched: its tensors must fit the model."""
    from ..validate import state_dict_mismatch

    state = plan.state
    assert state is not None
    mismatch = state_dict_mismatch(model.state_dict(), state["model"])
    if mismatch:
        raise CheckpointError(f"{path} does not fit the model of this run: {mismatch}; start the run "
                              "over with --overwrite or resume with the run's --model")
    try:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"])
        batcher.restore(state["data"])
    except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as err:
        first = (str(err).strip().splitlines() or [""])[0][:200]
        raise CheckpointError(f"{path} cannot be restored ({type(err).__name__}: {first}); start the "
                              "run over with --overwrite") from None


def _train(cfg: TrainConfig, d: Dist, on_step: Callable[[int, dict[str, Any]], None] | None) -> TrainResult:
    device = _device(cfg, d)
    plan = plan_run(cfg)  # reads the run directory, changes nothing
    d.barrier()  # every process has read the directory before the main one changes it
    if plan.finished:
        return _finished(cfg, plan)
    torch.manual_seed(cfg.seed)
    corpus = load_corpus(cfg.tokenizer, cfg.corpus, data=cfg.data or None)
    if cfg.seq_len + 1 >= len(corpus.val):
        raise UsageError(f"--seq-len {cfg.seq_len} is longer than the validation split of the {corpus.name} "
                         f"corpus ({len(corpus.val)} tokens): use a smaller --seq-len")
    batcher = Batcher(corpus.train, cfg.seq_len, cfg.batch_size, seed=cfg.seed, rank=d.rank, world=d.world)
    check_fits(cfg, corpus.vocab_size)
    model = build_model(cfg, corpus.vocab_size).to(device)
    check_language_model(model, cfg, corpus, device)
    model.train()
    if cfg.precision in ("nvfp4", "fp8"):
        from ..quant import te_backend
        from ..quant.substitute import substitute_nvfp4

        if cfg.precision == "fp8":  # Hopper: Transformer Engine's FP8 current-scaling recipe
            ok, why = te_backend.fp8_availability()
            if not ok:
                raise UsageError(f"--precision fp8 needs Transformer Engine on an FP8 GPU: {why}")
        report = substitute_nvfp4(model, recipe="te" if cfg.precision == "fp8" else cfg.nvfp4_recipe,
                                  keep_last=cfg.keep_last, backend="te" if cfg.precision == "fp8" else "auto",
                                  quantise_head=cfg.quantise_head)
        _TE_BACKEND["on"] = report.backend == "transformer_engine"
        if d.main:
            print(report.summary(), flush=True)
    opt = _optimizer(model, cfg)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s, cfg.steps, cfg.schedule, cfg.warmup, cfg.min_lr_ratio, cfg.decay_fraction))
    ckpt_path = os.path.join(cfg.out_dir, CHECKPOINT)
    metrics_path = os.path.join(cfg.out_dir, METRICS)
    start = plan.start
    if plan.state is not None:
        _restore(plan, ckpt_path, model, opt, sched, batcher)
    if d.main:
        prepare(cfg, plan)
        if plan.state is not None:
            print(f"resumed from {ckpt_path} at step {start}", flush=True)
        elif plan.note:
            print(plan.note, flush=True)
    net: nn.Module = nn.parallel.DistributedDataParallel(model) if d.enabled else model
    normalise = getattr(model, "normalize_weights", None) if cfg.renormalises() else None
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

