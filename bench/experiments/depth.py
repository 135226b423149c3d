"""Experiment 4: depth transfer (seed 000). At a fixed token budget, depths 2..16 at the learning
rate tuned at the smallest depth; gct against gpt, ngpt, and ngpt plus the GCT projection.

    python bench/experiments/depth.py [--quick]
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from common import FULL, QUICK, Store, main, plt, runs_dir, save_fig, train_run

MODELS = {"gct": ("gct", ""), "gpt": ("gpt", ""), "ngpt": ("ngpt", ""), "ngpt+proj": ("ngpt", "project=true")}
TUNE = [1e-3, 2e-3, 4e-3]


def _run(label: str, depth: int, lr: float, quick: bool) -> dict[str, Any]:
    sizes = QUICK if quick else FULL
    model, extra = MODELS[label]
    out = os.path.join(runs_dir(quick), "depth", f"{label.replace('+', '_')}_{depth}_{lr:g}")
    metrics, _ = train_run(model, replace(sizes, n_layer=depth), out, lr=lr, model_set=extra)
    return {**metrics, "model": label, "depth": depth, "lr": lr}


def run(quick: bool) -> dict[str, Any]:
    store = Store("depth", quick)
    depths = [2, 4] if quick else [2, 4, 8, 16]
    best: dict[str, float] = {}
    for label in MODELS:
        tuned = {lr: store.get_or_run(f"tune|{label}|{lr:g}", lambda label=label, lr=lr: _run(label, depths[0], lr, quick))
                 for lr in (TUNE[:2] if quick else TUNE)}
        best[label] = min(tuned, key=lambda k: tuned[k]["final_val_loss"])
        for d in depths:
            store.get_or_run(f"{label}|{d}", lambda label=label, d=d: _run(label, d, best[label], quick), lr=best[label])
    store.set("tuned_lr", best)
    plot(store, depths)
    return store.data["entries"]


def plot(store: Store, depths: list[int]) -> str:
    p = plt()
    fig, ax = p.subplots(figsize=(6, 4))
    for i, label in enumerate(MODELS):
        pts = [(d, store.data["entries"][f"{label}|{d}"]["final_val_loss"]) for d in depths
               if f"{label}|{d}" in store.data["entries"]]
        ax.plot(*zip(*pts), "-o", color=f"C{i}", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("depth (layers)")
    ax.set_ylabel("final validation loss")
    ax.set_title("depth at a fixed budget (lr tuned at the smallest depth)", fontsize=10)
    ax.legend(loc="center left", fontsize=8)
    ax.grid(alpha=0.3)
    return save_fig(fig, store.png("depth"))


if __name__ == "__main__":
    main(run)
