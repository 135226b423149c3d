"""Experiments 1 and 2: learning-rate robustness (seed 000; seed 001 section 5.3) and the NVFP4
relative error (seed 001 Fig. 5).

Five models over a 16x learning-rate range (5 rates), in fp32 and in emulated NVFP4 (``ngpt``
recipe for the normalised models, ``te`` for the others), same data order, budget and recipe per
row; the UVI early stop as in the seed. Relative error (loss_nvfp4 - loss_fp32) / loss_fp32 at each
model's best fp32 rate.

    python bench/experiments/lr_robustness.py [--quick]
"""

from __future__ import annotations

import os
from typing import Any

from common import FULL, QUICK, Store, main, plt, runs_dir, save_fig, train_run

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

                def job(model: str = model, prec: str = prec, lr: float = lr, recipe: str = recipe) -> dict[str, Any]:
                    out = os.path.join(runs_dir(quick), "lr", f"{model}_{prec}_{lr:g}")
                    metrics, _ = train_run(model, sizes, out, lr=lr, precision=prec, nvfp4_recipe=recipe,
                                           uvi_interval=max(1, sizes.steps // 10), uvi_stop=3.0,
                                           uvi_patience=2, seed=1337)
                    return {**metrics, "model": model, "precision": prec, "lr": lr, "recipe": recipe}

                store.get_or_run(key, job)
    summary = summarise(store)
    store.set("summary", summary)
    plot(store)
    return summary


def summarise(store: Store) -> dict[str, Any]:
    e = store.data["entries"]
    out: dict[str, Any] = {}
    for model in MODELS:
        fp = {v["lr"]: v["final_val_loss"] for v in e.values() if v["model"] == model and v["precision"] == "fp32"}
        nv = {v["lr"]: v["final_val_loss"] for v in e.values() if v["model"] == model and v["precision"] == "nvfp4"}
        if not fp:
            continue
        best_lr = min(fp, key=lambda k: fp[k])
        out[model] = {
            "best_lr": best_lr,
            "best_fp32": fp[best_lr],
            "spread_fp32": max(fp.values()) - min(fp.values()),
            "spread_nvfp4": (max(nv.values()) - min(nv.values())) if nv else None,
            "nvfp4_at_best": nv.get(best_lr),
            "relative_error": (nv[best_lr] - fp[best_lr]) / fp[best_lr] if best_lr in nv else None,
            "early_stopped": sum(1 for v in e.values() if v["model"] == model and v["stopped"] != "completed"),
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
    stopped = [(v["lr"], v["final_val_loss"]) for v in store.data["entries"].values() if v["stopped"] != "completed"]
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
