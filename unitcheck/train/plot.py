"""``unitcheck plot RUN_DIR...``: loss curves of one or several runs in one PNG."""

from __future__ import annotations

import json
import os
from typing import Any

from ..plotting import pyplot, save_figure

__all__ = ["read_metrics", "plot_runs"]


def read_metrics(run_dir: str) -> list[dict[str, Any]]:
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{run_dir} has no metrics.jsonl (is it a run directory?)")
    rows = []
    with open(path) as fh:
        for line in fh:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def plot_runs(run_dirs: list[str], out: str, title: str | None = None) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, run in enumerate(run_dirs):
        rows = read_metrics(run)
        label = os.path.basename(os.path.normpath(run))
        colour = f"C{i % 10}"
        steps = [r["step"] + 1 for r in rows]
        ax.plot(steps, [r["train_loss"] for r in rows], color=colour, alpha=0.35, lw=0.8)
        val = [(r["step"] + 1, r["val_loss"]) for r in rows if "val_loss" in r]
        if val:
            ax.plot(*zip(*val), color=colour, marker="o", ms=3, lw=1.6, label=f"{label} (val)")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per token)")
    ax.set_title(title or "training (faint) and validation loss")
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, out)
