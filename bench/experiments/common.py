"""Shared pieces of the experiments: a resumable JSON store, training with a fixed recipe, and
the sizes of the full and quick modes."""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from unitcheck.fsutil import atomic_write_text
from unitcheck.plotting import pyplot, save_figure

RESULTS = os.environ.get("UNITCHECK_RESULTS", os.path.join(os.path.dirname(__file__), "..", "..", "docs", "results"))


@dataclass(frozen=True)
class Sizes:
    n_layer: int
    n_embd: int
    n_head: int
    seq_len: int
    batch_size: int
    steps: int
    eval_batches: int


FULL = Sizes(n_layer=4, n_embd=128, n_head=4, seq_len=128, batch_size=32, steps=300, eval_batches=10)
QUICK = Sizes(n_layer=2, n_embd=32, n_head=2, seq_len=32, batch_size=8, steps=12, eval_batches=2)


class Store:
    """results/<name>.json: one entry per key; finished keys are skipped on a rerun (resumable)."""

    def __init__(self, name: str, quick: bool) -> None:
        base = os.path.abspath(RESULTS)
        self.dir = os.path.join(base, "quick") if quick else base
        os.makedirs(self.dir, exist_ok=True)
        self.path = os.path.join(self.dir, f"{name}.json")
        self.name = name
        self.data: dict[str, Any] = {"experiment": name, "quick": quick, "entries": {}}
        if os.path.exists(self.path):
            with open(self.path) as fh:
                self.data = json.load(fh)

    def get_or_run(self, key: str, fn: Callable[[], dict[str, Any]], **expect: Any) -> dict[str, Any]:
        """The stored entry, unless it is missing or was made with other settings (``expect``)."""
        old = self.data["entries"].get(key)
        if old is not None and all(old.get(k) == v for k, v in expect.items()):
            return old  # type: ignore[no-any-return]
        t0 = time.perf_counter()
        value = fn()
        value["seconds"] = round(time.perf_counter() - t0, 2)
        self.data["entries"][key] = value
        self.save()
        print(f"[{self.name}] {key}: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                                 for k, v in value.items() if not isinstance(v, (list, dict))), flush=True)
        return value

    def set(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.save()

    def save(self) -> None:
        atomic_write_text(self.path, json.dumps(self.data, indent=2) + "\n")

    def png(self, stem: str) -> str:
        return os.path.join(self.dir, f"{stem}.png")


def config(model: str, sizes: Sizes, out_dir: str = "runs/unused", **overrides: Any) -> Any:
    """The training configuration of every experiment run at these sizes."""
    from unitcheck.train import TrainConfig

    base = dict(model=model, n_layer=sizes.n_layer, n_embd=sizes.n_embd, n_head=sizes.n_head,
                seq_len=sizes.seq_len, batch_size=sizes.batch_size, steps=sizes.steps,
                eval_interval=max(1, sizes.steps // 3), eval_batches=sizes.eval_batches,
                checkpoint_interval=sizes.steps, out_dir=out_dir,
                overwrite=True)  # an unfinished run of an entry is run again from the start
    return TrainConfig(**{**base, **overrides})


def train_run(model: str, sizes: Sizes, out_dir: str, **overrides: Any) -> tuple[dict[str, Any], Any]:
    """(metrics, trained module)."""
    from unitcheck.train import train

    res = train(config(model, sizes, out_dir, **overrides))
    metrics = {"final_val_loss": res.final_val_loss, "final_train_loss": res.final_train_loss,
               "steps": res.steps, "stopped": res.stopped, "ms_per_step": 1e3 * res.step_seconds}
    return metrics, res.model


def runs_dir(quick: bool) -> str:
    return os.path.join("runs", "experiments_quick" if quick else "experiments")


plt = pyplot
save_fig = save_figure


def main(run: Callable[[bool], Any]) -> None:
    """Command line of one experiment: ``python bench/experiments/X.py [--quick]``."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="the small sizes used by the tests")
    print(run(ap.parse_args().quick))


def _completed(run_dir: str, sizes: Sizes) -> bool:
    from unitcheck.train.checkpoint import load_checkpoint

    path = os.path.join(run_dir, "ckpt.pt")
    return os.path.exists(path) and int(load_checkpoint(path)["step"]) + 1 >= sizes.steps


def untrained(model: str, sizes: Sizes) -> Any:
    """A bundled model at the experiment's size, as training would start it (same vocabulary and
    configuration as ``trained``)."""
    from unitcheck.train.data import load_corpus
    from unitcheck.train.loop import build_model

    cfg = config(model, sizes)
    return build_model(cfg, load_corpus(cfg.tokenizer, cfg.corpus).vocab_size)


def trained(model: str, sizes: Sizes, quick: bool, **overrides: Any) -> Any:
    """A model trained at the base recipe for the full budget: the learning-rate experiment's fp32
    run at the base rate when it ran to the end (so experiments share runs), else a fresh run
    without the UVI stop."""
    import torch

    from unitcheck.train.checkpoint import load_checkpoint
    from unitcheck.train.config import TrainConfig
    from unitcheck.train.data import load_corpus
    from unitcheck.train.loop import build_model

    out = os.path.join(runs_dir(quick), "lr", f"{model}_fp32_{2e-3:g}")
    if overrides or not _completed(out, sizes):  # a run the UVI threshold stopped is not "trained"
        out = os.path.join(runs_dir(quick), "trained", model + "".join(f"_{k}{v}" for k, v in sorted(overrides.items())))
        if not os.path.exists(os.path.join(out, "ckpt.pt")):
            _, m = train_run(model, sizes, out, **overrides)
            return m
    with open(os.path.join(out, "config.json")) as fh:
        cfg = TrainConfig(**json.load(fh))
    m = build_model(cfg, load_corpus(cfg.tokenizer, cfg.corpus).vocab_size)
    m.load_state_dict(load_checkpoint(os.path.join(out, "ckpt.pt"))["model"])
    del torch
    return m


def val_batch(sizes: Sizes, batch: int | None = None, seed: int = 5) -> tuple[Any, Any]:
    from unitcheck.train.data import Batcher, load_corpus

    corpus = load_corpus("char")
    return Batcher(corpus.val, sizes.seq_len, batch or sizes.batch_size, seed=seed).next()
