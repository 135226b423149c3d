"""Experiment 4: depth transfer (seed 000). At a fixed token budget, each depth trains at the rate
tuned at the smallest depth (the seed's protocol: does the rate transfer?) and at its own best
rate (does the architecture get deeper better, given its rate?); gct against gpt, ngpt, and ngpt
plus the GCT projection, all under the shared recipe (common.py).

Both tunings bracket the optimum: the grid (1, 2, 4)e-3 at the smallest depth, and around the
tuned rate at every other depth, is extended by factors of 2 until the best rate lies strictly
inside the rates tried.

    python bench/experiments/depth.py [--quick | --reduced]
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from common import Store, bracket, budget, main, plt, runs_dir, save_fig, sizes_for, train_run

MODELS = ["gct", "gpt", "ngpt", "ngpt+proj"]
TUNE = [1e-3, 2e-3, 4e-3]
PROTOCOL = "issue17"


def depths_for(quick: bool) -> list[int]:
    return {"quick": [2, 4], "reduced": [2, 4, 8]}.get(budget(quick), [2, 4, 8, 16])


def _run(label: str, depth: int, lr: float, quick: bool) -> dict[str, Any]:
    sizes = sizes_for(quick)
    out = os.path.join(runs_dir(quick), "depth", f"{label.replace('+', '_')}_{depth}_{lr:g}")
    metrics, _ = train_run(label, replace(sizes, n_layer=depth), out, lr=lr)
    metrics.pop("uvi_curve", None)
    return {**metrics, "model": label, "depth": depth, "lr": lr, "protocol": PROTOCOL}


def run(quick: bool) -> dict[str, Any]:
    store = Store("depth", quick)
    depths = depths_for(quick)
    extra = 1 if quick else 4
    tuned: dict[str, float] = {}
    own: dict[str, dict[str, Any]] = {}
    for label in MODELS:
        def at(depth: int, lr: float, label: str = label) -> dict[str, float | None]:
            e = store.get_or_run(f"{label}|{depth}|{lr:g}", lambda: _run(label, depth, lr, quick), protocol=PROTOCOL)
            return {"loss": e["final_val_loss"]}

        b = bracket(lambda lr, label=label: at(depths[0], lr, label), TUNE[:2] if quick else TUNE, max_extra=extra)
        tuned[label] = b.best["loss"]
        own[label] = {str(depths[0]): {"best": b.best["loss"], "inside": b.inside, "rates": sorted(b.losses["loss"])}}
        for d in depths[1:]:
            lr0 = tuned[label]
            grid = [lr0] if quick else [lr0 / 2, lr0, lr0 * 2]
            b = bracket(lambda lr, label=label, d=d: at(d, lr, label), grid, max_extra=extra)
            own[label][str(d)] = {"best": b.best["loss"], "inside": b.inside, "rates": sorted(b.losses["loss"])}
    store.set("tuned_lr", tuned)
    store.set("own_lr", own)
    plot(store, depths)
    return store.data["entries"]


def loss_at(store: Store | dict[str, Any], label: str, depth: int, lr: float) -> float | None:
    e = (store.data if isinstance(store, Store) else store)["entries"].get(f"{label}|{depth}|{lr:g}")
    return e["final_val_loss"] if e else None


def plot(store: Store, depths: list[int]) -> str:
    """Solid: at the rate tuned at the smallest depth; dashed: at each depth's own best rate."""
    p = plt()
    fig, ax = p.subplots(figsize=(6.5, 4))
    for i, label in enumerate(MODELS):
        lr0 = store.data["tuned_lr"].get(label)
        pts = [(d, loss_at(store, label, d, lr0)) for d in depths] if lr0 else []
        pts = [(d, v) for d, v in pts if v is not None]
        if pts:
            ax.plot(*zip(*pts), "-o", color=f"C{i}", label=f"{label} (rate tuned at L={depths[0]})")
        own = store.data.get("own_lr", {}).get(label, {})
        pts = [(d, loss_at(store, label, d, own[str(d)]["best"])) for d in depths if str(d) in own]
        pts = [(d, v) for d, v in pts if v is not None]
        if pts:
            ax.plot(*zip(*pts), "--s", color=f"C{i}", ms=4, label=f"{label} (own best rate)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("depth (layers)")
    ax.set_ylabel("final validation loss")
    ax.set_title("depth at a fixed budget", fontsize=10)
    ax.legend(loc="best", fontsize=7)
    ax.grid(alpha=0.3)
    return save_fig(fig, store.png("depth"))


if __name__ == "__main__":
    main(run)
