"""``unitcheck plot RUN_DIR...``: loss curves of one or several runs in one PNG."""

from __future__ import annotations

import os

from ..errors import UsageError
from ..plotting import pyplot, save_figure
from .rundir import read_metrics

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

__all__ = ["read_metrics", "plot_runs"]


def _check_out(out: str) -> None:
    """``--out`` replaces a PNG, never another file (a run's metrics.jsonl given by mistake)."""
    if os.path.isdir(out):
        raise UsageError(f"--out {out} is a directory: give the PNG file to write")
    if os.path.isfile(out):
        with open(out, "rb") as fh:
            if fh.read(8) != PNG_MAGIC:
                raise UsageError(f"--out {out} exists and is not a PNG: choose another path")


def plot_runs(run_dirs: list[str], out: str, title: str | None = None) -> str:
    """Every run's metrics are read (and checked) before the figure is drawn or ``out`` written."""
    runs = [(os.path.basename(os.path.normpath(run)), read_metrics(run)) for run in run_dirs]
    _check_out(out)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, (label, rows) in enumerate(runs):
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
