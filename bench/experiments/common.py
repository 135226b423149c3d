"""Shared pieces of the experiments: a resumable JSON store, the compared models and the one
optimisation recipe they all train with, learning-rate grids that bracket the optimum, and the
sizes of the full, reduced and quick budgets.

The recipe (issue 17): AdamW (0.9, 0.95), gradient clip 1, cosine decay to 0.1x, a linear warm-up
over the first 5% of the steps, and no weight decay, for every model. Weight decay is zero because
it is not one knob across these architectures: nGPT renormalises its matrices after every step
(decay then only nudges the step size) and GCT's matrices feed canonicalisers (decay becomes a
rising effective rate), while the baselines at 300 steps would shrink by at most 6% at lr 2e-3. The
short warm-up protects the baselines' first Adam steps and is harmless to the normalised models
(seed 001 trains nGPT without one). nGPT still renormalises its weights (its architecture).
"""

from __future__ import annotations

import argparse
import json
import math
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
REDUCED = Sizes(n_layer=2, n_embd=64, n_head=2, seq_len=64, batch_size=16, steps=200, eval_batches=5)
QUICK = Sizes(n_layer=2, n_embd=32, n_head=2, seq_len=32, batch_size=8, steps=12, eval_batches=2)
BUDGETS = {"full": FULL, "reduced": REDUCED, "quick": QUICK}

_SETTINGS = {"budget": os.environ.get("UNITCHECK_BUDGET", "full"), "device": os.environ.get("UNITCHECK_DEVICE", "cpu")}


def set_budget(budget: str) -> None:
    """``full`` (docs/results/), ``reduced`` (docs/results/reduced/: the same protocol at a
    fraction of the compute) or ``quick`` (tests)."""
    if budget not in BUDGETS:
        raise ValueError(f"unknown budget {budget!r}")
    _SETTINGS["budget"] = budget


def set_device(device: str) -> None:
    """Where the runs train: ``cpu`` (fp32), or ``cuda`` (the fp32 rows in bf16 autocast; NVFP4
    through Transformer Engine where it is installed and supports the GPU)."""
    _SETTINGS["device"] = device


def device() -> str:
    return _SETTINGS["device"]


def budget(quick: bool) -> str:
    return "quick" if quick else _SETTINGS["budget"]


def sizes_for(quick: bool) -> Sizes:
    return BUDGETS[budget(quick)]


# label -> (bundled model, its config fields); the experiments name rows by label
MODELS: dict[str, tuple[str, str]] = {
    "gpt": ("gpt", ""),
    "llama": ("llama", ""),
    "qknorm": ("qknorm", ""),
    "ngpt": ("ngpt", ""),  # every GEMM input normalised (seed 001)
    "ngpt-official": ("ngpt", "gemm_inputs=official"),
    "ngpt+proj": ("ngpt", "project=true"),
    "gct": ("gct", "scalars=scaled"),  # nGPT's effective-rate form for alpha and the gains
    "gct-plain": ("gct", ""),  # ablation: the scalars as plain parameters
    "gct-rope-swiglu": ("gct", "scalars=scaled,pos=rope,mlp=swiglu,bias=false"),  # parity with ngpt
}
NORMALISED = {"ngpt", "ngpt-official", "ngpt+proj", "gct", "gct-plain", "gct-rope-swiglu"}
WARMUP_FRACTION = 0.05
RECIPE: dict[str, Any] = {"recipe": "shared", "weight_decay": 0.0, "schedule": "cosine", "min_lr_ratio": 0.1,
                          "beta1": 0.9, "beta2": 0.95, "grad_clip": 1.0}


def nvfp4_recipe(label: str) -> str:
    """Each model's own NVFP4 recipe: Transformer Engine's for the baselines; for the normalised
    models a fixed scale matched to each operand's declared norm (per-tensor where none is)."""
    return "matched" if label in NORMALISED else "te"


def other_recipe(label: str) -> str:
    """The recipe swapped in to ask whether a gap is the recipe's or the architecture's: seed
    001's fixed unit scale for the baselines, Transformer Engine's for the normalised models."""
    return "te" if label in NORMALISED else "ngpt"


class Store:
    """results/<name>.json (results/reduced/, results/quick/ for those budgets): one entry per
    key; finished keys are skipped on a rerun (resumable)."""

    def __init__(self, name: str, quick: bool, subdir: str | None = None) -> None:
        base = os.path.abspath(RESULTS)
        b = budget(quick)
        self.dir = base if b == "full" else os.path.join(base, b)
        if subdir is not None:  # a separate family of results (the GPU run)
            self.dir = os.path.join(base, subdir)
        os.makedirs(self.dir, exist_ok=True)
        self.path = os.path.join(self.dir, f"{name}.json")
        self.name = name
        self.data: dict[str, Any] = {"experiment": name, "quick": quick, "budget": b, "entries": {}}
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


def config(label: str, sizes: Sizes, out_dir: str = "runs/unused", **overrides: Any) -> Any:
    """The training configuration of every experiment run at these sizes: the model a label
    names, the shared recipe, and on a GPU bf16 in place of fp32."""
    from unitcheck.train import TrainConfig

    model, model_set = MODELS.get(label, (label, ""))
    extra = overrides.pop("model_set", "")
    base = dict(model=model, model_set=",".join(x for x in (model_set, extra) if x),
                n_layer=sizes.n_layer, n_embd=sizes.n_embd, n_head=sizes.n_head,
                seq_len=sizes.seq_len, batch_size=sizes.batch_size, steps=sizes.steps,
                warmup=max(1, round(WARMUP_FRACTION * sizes.steps)), **RECIPE,
                eval_interval=max(1, sizes.steps // 3), eval_batches=sizes.eval_batches,
                checkpoint_interval=sizes.steps, out_dir=out_dir, device=device(),
                overwrite=True)  # an unfinished run of an entry is run again from the start
    cfg = {**base, **overrides}
    if device().startswith("cuda") and cfg.get("precision", "fp32") == "fp32":
        cfg["precision"] = "bf16"
    return TrainConfig(**cfg)


def train_run(label: str, sizes: Sizes, out_dir: str, **overrides: Any) -> tuple[dict[str, Any], Any]:
    """(metrics, trained module or None). A run whose loss turns NaN or infinite is reported as
    diverged (with the step), not raised; the validation and UVI curves come with the metrics."""
    from unitcheck.train import train
    from unitcheck.train.loop import NonFiniteLoss

    rows: list[dict[str, Any]] = []
    try:
        res = train(config(label, sizes, out_dir, **overrides), on_step=lambda _s, rec: rows.append(rec))
    except NonFiniteLoss:
        return {"final_val_loss": None, "final_train_loss": None, "steps": len(rows), "stopped": "diverged",
                "diverged": True, "ms_per_step": None, **_curves(rows)}, None
    metrics = {"final_val_loss": res.final_val_loss, "final_train_loss": res.final_train_loss,
               "steps": res.steps, "stopped": res.stopped, "diverged": False,
               "ms_per_step": 1e3 * res.step_seconds, **_curves(rows)}
    return metrics, res.model


def _curves(rows: list[dict[str, Any]]) -> dict[str, list[list[float]]]:
    """[step, value] pairs: validation loss and the largest |UVI_res| where they were measured."""
    return {"val_curve": [[r["step"] + 1, r["val_loss"]] for r in rows if "val_loss" in r],
            "uvi_curve": [[r["step"] + 1, r["uvi_res_max"]] for r in rows if r.get("uvi_res_max") is not None]}


def uvi_stop_point(entry: dict[str, Any], threshold: float = 3.0, patience: int = 2) -> int | None:
    """The step at which the seed's UVI stop (|UVI_res| above ``threshold`` for ``patience``
    consecutive measurements) would have ended this run, or None if it never fires."""
    above = 0
    for step, value in entry.get("uvi_curve", []):
        above = above + 1 if value > threshold else 0
        if above >= patience:
            return int(step)
    return None


def stopped_version(entry: dict[str, Any], threshold: float = 3.0, patience: int = 2) -> tuple[float | None, str]:
    """(final loss, status) of the run as the UVI stop would have left it: the validation loss
    measured at the stop step (runs evaluate wherever UVI is measured), else the run's own end."""
    stop = uvi_stop_point(entry, threshold, patience)
    if stop is None:
        return entry.get("final_val_loss"), "diverged" if entry.get("diverged") else "completed"
    at = [v for s, v in entry.get("val_curve", []) if s == stop]
    return (at[0] if at else None), f"uvi_stop at step {stop}"


@dataclass
class Bracket:
    """Losses by rate for each series, the best rate of each, and whether every best rate lies
    strictly inside the grid (the rates tried on both sides of it)."""

    losses: dict[str, dict[float, float]]
    best: dict[str, float]
    inside: bool


def _best(series: dict[float, float]) -> float | None:
    finite = {lr: v for lr, v in series.items() if v is not None and math.isfinite(v)}
    return min(finite, key=lambda lr: (finite[lr], lr)) if finite else None


def bracket(run: Callable[[float], dict[str, float | None]], grid: list[float], factor: float = 2.0,
            max_extra: int = 4) -> Bracket:
    """Run ``run(lr)`` (loss per series; None or inf for a diverged run) on ``grid``, then extend
    the grid by ``factor`` past whichever end holds some series' best rate, until every series'
    best rate has a tried rate on both sides, or ``max_extra`` rates were added. A series whose
    every run diverged extends the grid downwards."""
    losses: dict[str, dict[float, float]] = {}

    def add(lr: float) -> None:
        for name, value in run(lr).items():
            losses.setdefault(name, {})[lr] = math.inf if value is None else float(value)

    for lr in sorted(set(grid)):
        add(lr)
    for _ in range(max_extra + 1):
        rates = sorted({lr for series in losses.values() for lr in series})
        best = {name: _best(series) for name, series in losses.items()}
        low = [name for name, b in best.items() if b is None or b <= rates[0]]
        high = [name for name, b in best.items() if b is not None and b >= rates[-1]]
        if not low and not high:
            return Bracket(losses, {k: v for k, v in best.items() if v is not None}, True)
        if _ == max_extra:
            break
        add(rates[0] / factor if low else rates[-1] * factor)
    best = {name: _best(series) for name, series in losses.items()}
    return Bracket(losses, {k: v for k, v in best.items() if v is not None}, False)


def runs_dir(quick: bool) -> str:
    b = budget(quick)
    return os.path.join("runs", "experiments" if b == "full" else f"experiments_{b}")


plt = pyplot
save_fig = save_figure


def main(run: Callable[[bool], Any]) -> None:
    """Command line of one experiment: ``python bench/experiments/X.py [--quick | --reduced]``."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="the small sizes used by the tests")
    ap.add_argument("--reduced", action="store_true", help="the reduced budget (results/reduced/)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    args = ap.parse_args()
    if args.reduced:
        set_budget("reduced")
    set_device(args.device)
    print(run(args.quick))


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
    without the UVI stop. On the CPU in fp32 either way (measurements run there, whatever device
    trained it)."""
    import torch

    from unitcheck.train.checkpoint import load_checkpoint
    from unitcheck.train.config import TrainConfig
    from unitcheck.train.data import load_corpus
    from unitcheck.train.loop import build_model

    out = os.path.join(runs_dir(quick), "lr", f"{model}_fp32_{2e-3:g}")
    if overrides or not _completed(out, sizes):  # a run that did not finish is not "trained"
        out = os.path.join(runs_dir(quick), "trained", model + "".join(f"_{k}{v}" for k, v in sorted(overrides.items())))
        if not os.path.exists(os.path.join(out, "ckpt.pt")):
            _, m = train_run(model, sizes, out, **overrides)
            if m is None:
                raise RuntimeError(f"{model} diverged while training for a measurement ({out})")
            return m.float().cpu()
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
