"""Experiments 1 and 2: learning-rate robustness (seed 000; seed 001 section 5.3) and the NVFP4
relative error (seed 001 Fig. 5).

Every model trains under the one shared recipe (common.py) over a learning-rate grid that starts
at 5 rates across 16x and is extended by factors of 2 until each model's best rate (fp32, and its
best under the UVI stop) lies strictly inside it. Emulated NVFP4, with the model's own recipe
(``te`` for the baselines, ``matched`` for the normalised models: a fixed scale matched to each
operand's known norm) and the output head in high precision, runs at the best fp32 rate and its
two neighbours on the grid (every rate on the full budget): enough for the relative error and the
shape of the NVFP4 curve at the optimum, at a third of the cost.

Each run goes to its last step with UVI measured (and validation evaluated) every tenth of the
budget; a run whose loss turns NaN is reported as diverged. The seed's stopped version is read
off the same run: the validation loss at the step where |UVI_res| first stays above 3 for two
measurements (identical to a run stopped there: same seed, same data order). Both versions are
reported; the verdicts rest on the unstopped one and say where the stopped one differs.

Relative error (loss_nvfp4 - loss_fp32) / loss_fp32 at each model's best fp32 rate, and there
again with the other recipe (is a gap the recipe's or the architecture's?). The GCT ablation (its
scalars as plain parameters) and the parity variant (RoPE, normalised SwiGLU gate, no biases)
run the fp32 grid and NVFP4 at their best rate.

    python bench/experiments/lr_robustness.py [--quick | --reduced]
"""

from __future__ import annotations

import os
from typing import Any

from common import (
    Bracket,
    Sizes,
    Store,
    bracket,
    budget,
    main,
    nvfp4_recipe,
    other_recipe,
    plt,
    runs_dir,
    save_fig,
    sizes_for,
    stopped_version,
    train_run,
)

MODELS = ["gpt", "ngpt", "gct", "llama", "qknorm"]  # the seed-001 pair and GCT first
EXTRA = ["gct-plain", "gct-rope-swiglu"]  # ablation and architecture-parity rows: fp32 grid only
BASE_LR = 2e-3
FACTORS = [0.25, 0.5, 1.0, 2.0, 4.0]
TOP_LR = BASE_LR * FACTORS[-1]  # the top of the seed's 16x range, which every model runs
UVI_STOP, UVI_PATIENCE = 3.0, 2
PROTOCOL = "issue17"  # stored with every entry: entries of an older protocol are rerun


def _key(label: str, prec: str, lr: float) -> str:
    return f"{label}|{prec}|{lr:g}"


def run(quick: bool) -> dict[str, Any]:
    sizes = sizes_for(quick)
    store = Store("lr_robustness", quick)
    grid = [BASE_LR * f for f in (FACTORS[1:4] if quick else FACTORS)]
    brackets: dict[str, Any] = {}
    every_rate = budget(quick) == "full"
    for label in MODELS + EXTRA:
        precs = ("fp32", "nvfp4") if label in MODELS and every_rate else ("fp32",)

        def losses(lr: float, label: str = label, precs: tuple[str, ...] = precs) -> dict[str, float | None]:
            out: dict[str, float | None] = {}
            for prec in precs:
                e = store.get_or_run(_key(label, prec, lr), lambda prec=prec: _train(label, prec, lr, nvfp4_recipe(label), sizes, quick),
                                     protocol=PROTOCOL)
                out[prec] = e["final_val_loss"]
                if prec == "fp32":
                    out["fp32 stopped"] = stopped_version(e, UVI_STOP, UVI_PATIENCE)[0]
            return out

        b = bracket(losses, grid, max_extra=1 if quick else 4)
        brackets[label] = _bracket_json(b)
        best = b.best.get("fp32")
        if best is None:
            continue
        rates = brackets[label]["rates"]
        i = rates.index(best)
        near = rates[max(0, i - 1):i + 2] if label in MODELS else [best]
        for lr in near:  # NVFP4, own recipe, at the best fp32 rate (and its neighbours)
            store.get_or_run(_key(label, "nvfp4", lr), lambda label=label, lr=lr: _train(label, "nvfp4", lr, nvfp4_recipe(label), sizes, quick),
                             protocol=PROTOCOL)
    for label in MODELS:  # and with the other recipe at the best fp32 rate
        lr = brackets[label]["best"].get("fp32")
        if lr is None:
            continue
        other = other_recipe(label)
        store.get_or_run(_key(label, f"nvfp4/{other}", lr),
                         lambda label=label, lr=lr, other=other: _train(label, "nvfp4", lr, other, sizes, quick, f"/{other}"),
                         protocol=PROTOCOL)
    store.set("brackets", brackets)
    summary = summarise(store)
    store.set("summary", summary)
    plot(store)
    return summary


def _bracket_json(b: Bracket) -> dict[str, Any]:
    return {"best": b.best, "inside": b.inside,
            "rates": sorted({lr for series in b.losses.values() for lr in series})}


def _train(label: str, prec: str, lr: float, recipe: str, sizes: Sizes, quick: bool, tag: str = "") -> dict[str, Any]:
    out = os.path.join(runs_dir(quick), "lr", f"{label.replace('+', '_')}_{prec}{tag.replace('/', '_')}_{lr:g}")
    interval = max(1, sizes.steps // 10)
    metrics, _ = train_run(label, sizes, out, lr=lr, precision=prec, nvfp4_recipe=recipe,
                           uvi_interval=interval, eval_interval=interval, uvi_stop=0.0, seed=1337)
    entry = {**metrics, "model": label, "precision": prec + tag, "lr": lr, "recipe": recipe, "protocol": PROTOCOL}
    loss, status = stopped_version(entry, UVI_STOP, UVI_PATIENCE)
    entry["stopped_loss"], entry["stopped_status"] = loss, status
    return entry


def _series(store: Store, label: str, prec: str, stopped: bool = False) -> dict[float, float | None]:
    """Final loss by rate (None: diverged); the UVI-stopped version's loss with ``stopped``."""
    return {v["lr"]: (v["stopped_loss"] if stopped else v["final_val_loss"]) for v in store.data["entries"].values()
            if v["model"] == label and v["precision"] == prec}


def _finite(series: dict[float, float | None]) -> dict[float, float]:
    return {lr: v for lr, v in series.items() if v is not None}


def summarise(store: Store) -> dict[str, Any]:
    e = store.data["entries"]
    out: dict[str, Any] = {}
    for label in MODELS + EXTRA:
        fp = _finite(_series(store, label, "fp32"))
        if not fp:
            continue
        nv = _finite(_series(store, label, "nvfp4"))
        st = _finite(_series(store, label, "fp32", stopped=True))
        best = min(fp, key=lambda k: fp[k])
        best_st = min(st, key=lambda k: st[k]) if st else None
        top = TOP_LR
        swap = [v for v in e.values() if v["model"] == label and v["precision"].startswith("nvfp4/") and v["lr"] == best]
        swap_loss = swap[0]["final_val_loss"] if swap else None
        out[label] = {
            "best_lr": best,
            "best_fp32": fp[best],
            "best_lr_stopped": best_st,
            "rates": sorted(_series(store, label, "fp32")),
            "diverged": sorted(lr for lr, v in _series(store, label, "fp32").items() if v is None),
            "uvi_stops": sorted(v["lr"] for v in e.values() if v["model"] == label and v["precision"] == "fp32"
                                and v["stopped_status"].startswith("uvi_stop")),
            "spread_fp32": max(fp.values()) - min(fp.values()),
            "spread_fp32_stopped": (max(st.values()) - min(st.values())) if st else None,
            "penalty_top": (fp[top] - fp[best]) if top in fp else None,  # None: diverged or not run
            "penalty_top_stopped": (st[top] - st[best_st]) if best_st is not None and top in st else None,
            "nvfp4_recipe": nvfp4_recipe(label),
            "nvfp4_at_best": nv.get(best),
            "relative_error": (nv[best] - fp[best]) / fp[best] if best in nv else None,
            "swap_recipe": swap[0]["recipe"] if swap else None,
            "swap_loss": swap_loss,
            "swap_relative_error": (swap_loss - fp[best]) / fp[best] if swap_loss is not None else None,
            "spread_nvfp4": (max(nv.values()) - min(nv.values())) if len(nv) > 1 else None,
        }
    return out


def plot(store: Store) -> str:
    """Left: every run to its end (diverged runs marked at the top); right: the same grid under
    the UVI stop (stopped runs at their stop-time loss, crosses)."""
    p = plt()
    fig, axes = p.subplots(1, 2, figsize=(12, 4.4), sharey=True)
    for i, label in enumerate(MODELS + EXTRA):
        for stopped, ax in ((False, axes[0]), (True, axes[1])):
            for prec, style in (("fp32", "-o"), ("nvfp4", "--s")):
                pts = sorted((lr, v) for lr, v in _series(store, label, prec, stopped).items() if v is not None)
                if pts and (prec == "fp32" or label in MODELS):
                    ax.plot(*zip(*pts), style, color=f"C{i}", label=f"{label} {prec}", ms=4)
    cut = [(v["lr"], v["stopped_loss"]) for v in store.data["entries"].values()
           if v["precision"] in ("fp32", "nvfp4") and v["stopped_status"].startswith("uvi_stop") and v["stopped_loss"] is not None]
    if cut:
        axes[1].scatter(*zip(*cut), marker="x", s=50, color="k", zorder=3, label="stopped by UVI")
    for ax, title in zip(axes, ("every run to its last step", "with the seed's UVI stop")):
        ax.set_xscale("log")
        ax.set_xlabel("peak learning rate")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("final validation loss (nats/char)")
    axes[0].legend(fontsize=6, ncol=2)
    fig.suptitle("learning-rate robustness (solid fp32, dashed NVFP4, own recipe)")
    return save_fig(fig, store.png("lr_robustness"))


if __name__ == "__main__":
    main(run)
