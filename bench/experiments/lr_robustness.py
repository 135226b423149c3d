"""Experiments 1 and 2: learning-rate robustness (seed 000; seed 001 section 5.3) and the NVFP4
relative error (seed 001 Fig. 5).

Five models over a 16x learning-rate range (5 rates), in fp32 and in emulated NVFP4 (``ngpt``
recipe for the normalised models, ``te`` for the others), same data order, budget and recipe per
row; the UVI early stop as in the seed. Relative error (loss_nvfp4 - loss_fp32) / loss_fp32 at each
model's best fp32 rate among those where both runs completed, and there again with the other
recipe (is a gap the recipe's or the architecture's?).

    python bench/experiments/lr_robustness.py [--quick]
"""

from __future__ import annotations

import os
from typing import Any

from common import FULL, QUICK, Sizes, Store, main, plt, runs_dir, save_fig, train_run

MODELS = ["gpt", "llama", "qknorm", "ngpt", "gct"]
NORMALISED = {"ngpt", "gct"}
BASE_LR = 2e-3
FACTORS = [0.25, 0.5, 1.0, 2.0, 4.0]


def run(quick: bool) -> dict[str, Any]:
    sizes = QUICK if quick else FULL
    store = Store("lr_robustness", quick)
    for model in MODELS:
        for prec in ("fp32", "nvfp4"):
            for f in FACTORS:
                lr = BASE_LR * f
                key = f"{model}|{prec}|{lr:g}"
                recipe = "ngpt" if model in NORMALISED else "te"
                store.get_or_run(key, lambda model=model, prec=prec, lr=lr, recipe=recipe: _train(model, prec, lr, recipe, sizes, quick))
    for model in MODELS:  # the other recipe at the model's rate: is a gap the recipe or the architecture?
        lr = paired_lr(store, model)
        other = "te" if model in NORMALISED else "ngpt"
        if lr is not None:
            store.get_or_run(f"{model}|nvfp4/{other}|{lr:g}",
                             lambda model=model, lr=lr, other=other: _train(model, "nvfp4", lr, other, sizes, quick, f"/{other}"))
    summary = summarise(store)
    store.set("summary", summary)
    plot(store)
    return summary


def _train(model: str, prec: str, lr: float, recipe: str, sizes: Sizes, quick: bool, tag: str = "") -> dict[str, Any]:
    out = os.path.join(runs_dir(quick), "lr", f"{model}_{prec}{tag.replace('/', '_')}_{lr:g}")
    metrics, _ = train_run(model, sizes, out, lr=lr, precision=prec, nvfp4_recipe=recipe,
                           uvi_interval=max(1, sizes.steps // 10), uvi_stop=3.0, uvi_patience=2, seed=1337)
    return {**metrics, "model": model, "precision": prec + tag, "lr": lr, "recipe": recipe}


def _completed(store: Store, model: str, prec: str) -> dict[float, float]:
    return {v["lr"]: v["final_val_loss"] for v in store.data["entries"].values()
            if v["model"] == model and v["precision"] == prec and v["stopped"] == "completed"}


def paired_lr(store: Store, model: str) -> float | None:
    """The best fp32 rate among those where the fp32 and the NVFP4 run both ran to the end: a run
    the UVI threshold stopped is not a loss to compare."""
    fp, nv = _completed(store, model, "fp32"), _completed(store, model, "nvfp4")
    both = [lr for lr in fp if lr in nv]
    return min(both, key=lambda lr: fp[lr]) if both else None


def summarise(store: Store) -> dict[str, Any]:
    e = store.data["entries"]
    out: dict[str, Any] = {}
    for model in MODELS:
        fp = {v["lr"]: v["final_val_loss"] for v in e.values() if v["model"] == model and v["precision"] == "fp32"}
        nv = {v["lr"]: v["final_val_loss"] for v in e.values() if v["model"] == model and v["precision"] == "nvfp4"}
        if not fp:
            continue
        best_lr = min(fp, key=lambda k: fp[k])
        pair = paired_lr(store, model)
        swap = [v for v in e.values() if v["model"] == model and v["precision"].startswith("nvfp4/") and v["lr"] == pair]
        out[model] = {
            "paired_lr": pair,
            "fp32_at_pair": fp.get(pair) if pair is not None else None,
            "nvfp4_at_pair": nv.get(pair) if pair is not None else None,
            "swap_recipe": swap[0]["recipe"] if swap else None,
            "swap_loss": swap[0]["final_val_loss"] if swap else None,
            "swap_relative_error": (swap[0]["final_val_loss"] - fp[pair]) / fp[pair] if swap and pair is not None else None,
            "best_lr": best_lr,
            "best_fp32": fp[best_lr],
            "spread_fp32": max(fp.values()) - min(fp.values()),
            "spread_nvfp4": (max(nv.values()) - min(nv.values())) if nv else None,
            "nvfp4_at_best": nv.get(best_lr),
            "relative_error": (nv[pair] - fp[pair]) / fp[pair] if pair is not None else None,
            "early_stopped": sum(1 for v in e.values() if v["model"] == model and v["precision"] in ("fp32", "nvfp4")
                                 and v["stopped"] != "completed"),
        }
    return out


def plot(store: Store) -> str:
    p = plt()
    fig, ax = p.subplots(figsize=(7, 4.2))
    for i, model in enumerate(MODELS):
        for prec, style in (("fp32", "-o"), ("nvfp4", "--s")):
            pts = sorted((v["lr"], v["final_val_loss"]) for v in store.data["entries"].values()
                         if v["model"] == model and v["precision"] == prec)
            if pts:
                ax.plot(*zip(*pts), style, color=f"C{i}", label=f"{model} {prec}", ms=4)
    stopped = [(v["lr"], v["final_val_loss"]) for v in store.data["entries"].values()
               if v["stopped"] != "completed" and v["precision"] in ("fp32", "nvfp4")]
    if stopped:
        ax.scatter(*zip(*stopped), marker="x", s=50, color="k", zorder=3, label="stopped by UVI")
    ax.set_xscale("log")
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel("final validation loss (nats/char)")
    ax.set_title("learning-rate robustness (solid fp32, dashed NVFP4)")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    return save_fig(fig, store.png("lr_robustness"))


if __name__ == "__main__":
    main(run)
