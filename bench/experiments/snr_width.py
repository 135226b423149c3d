"""Experiment 6: dot-product SNR with width (seed 001, section 3.4). gpt and the normalised models
(ngpt, gct) trained briefly at widths up to 1024: measured dot-product SNR and rho_s under NVFP4,
forward (fprop: x . w over the GEMM's input width) and backward (dgrad: dy . w over its output
width), and the SNR ratio Eq. 5 predicts from the measured rho_s, (1 + D rho_norm) / (1 + D rho_gpt),
against the measured ratio. Seed 001's advantage needs the premise rho_gpt << rho_norm and
appears for D >> 1/rho (about 755 in its measurements), hence widths to 1024.

One quantiser for every model (Transformer Engine's forward scaling, round-to-nearest), so that
the SNR compares the operands, not the recipes. Short training (the shared recipe, the same steps
at every width) keeps width 1024 affordable on a CPU; each model trains at its best rate from the
learning-rate experiment of the same budget (2e-3 where that has not run): at one common rate
nGPT, whose best rate is several times the others', would be measured barely trained.

    python bench/experiments/snr_width.py [--quick | --reduced]
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import torch
from common import QUICK, Sizes, Store, budget, main, plt, save_fig, trained, val_batch
from torch import nn

MODELS = ["gpt", "ngpt", "gct"]
WIDTHS = {"quick": [32, 64], "reduced": [64, 128, 256, 512, 1024], "full": [64, 128, 256, 512, 1024]}
PROTOCOL = "issue17"


def sizes(quick: bool, width: int) -> Sizes:
    """Two (reduced) or four (full) layers, heads of 64 (32 below width 128), a short run."""
    b = budget(quick)
    if b == "quick":
        return Sizes(n_layer=QUICK.n_layer, n_embd=width, n_head=2, seq_len=QUICK.seq_len,
                     batch_size=QUICK.batch_size, steps=QUICK.steps, eval_batches=QUICK.eval_batches)
    heads = max(2, width // 64)
    if b == "reduced":
        return Sizes(n_layer=2, n_embd=width, n_head=heads, seq_len=64, batch_size=8, steps=60, eval_batches=2)
    return Sizes(n_layer=4, n_embd=width, n_head=heads, seq_len=128, batch_size=16, steps=150, eval_batches=4)


def best_rate(name: str, quick: bool) -> float:
    """The model's best fp32 rate in the learning-rate experiment of this budget (every run to its
    end), else 2e-3."""
    import json
    import os

    path = os.path.join(Store("lr_robustness", quick).dir, "lr_robustness.json")
    if not os.path.exists(path):
        return 2e-3
    with open(path) as fh:
        entries = json.load(fh)["entries"].values()
    fp = {v["lr"]: v["final_val_loss"] for v in entries if v["model"] == name and v["precision"] == "fp32"
          and v["final_val_loss"] is not None}
    return min(fp, key=lambda lr: fp[lr]) if fp else 2e-3


def backward_rows(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], width: int) -> list[dict[str, Any]]:
    """dgrad SNR of every linear whose output width is the model width: dx = dy W sums over it."""
    from unitcheck.diagnose.snr import linear_snr

    grads: dict[str, torch.Tensor] = {}
    hooks = []
    for name, mod in model.named_modules():
        if isinstance(mod, nn.Linear) and mod.out_features == width:
            def hook(_m: nn.Module, _gin: Any, gout: tuple[torch.Tensor, ...], name: str = name) -> None:
                grads[name] = gout[0].detach()
            hooks.append(mod.register_full_backward_hook(hook))
    model.train()
    model.zero_grad(set_to_none=True)
    out = model(*batch)
    (out[1] if isinstance(out, (tuple, list)) else out).backward()
    for h in hooks:
        h.remove()
    rows = []
    for name, gy in grads.items():
        w = model.get_submodule(name).weight.detach()  # (N, K): dgrad is gy (T, N) @ W
        rows.append({"module": name, **linear_snr(gy, w.t(), "te")})
    model.zero_grad(set_to_none=True)
    return rows


def run(quick: bool) -> dict[str, Any]:
    from unitcheck.diagnose.capture import capture
    from unitcheck.diagnose.snr import layer_rows

    widths = WIDTHS[budget(quick)]
    store = Store("snr_width", quick)
    for width in widths:
        for name in MODELS:
            lr = best_rate(name, quick)

            def job(name: str = name, width: int = width, lr: float = lr) -> dict[str, Any]:
                s = sizes(quick, width)
                model = trained(name, s, quick, n_embd=width, n_head=s.n_head, steps=s.steps, lr=lr)
                batch = val_batch(s, batch=4)
                cap = capture(model, batch)
                fwd = [r for r in layer_rows(cap.linears, cap.values, "te")  # one quantiser for all
                       if r["D"] == width]  # the GEMMs that reduce over the model width
                bwd = backward_rows(model, batch, width)
                return {"model": name, "width": width, "protocol": PROTOCOL, "steps": s.steps, "lr": lr,
                        "n_layer": s.n_layer, "n_head": s.n_head,
                        "snr_dot_db": statistics.mean(r["snr_dot_db"] for r in fwd),
                        "snr_products_db": statistics.mean(r["snr_products_db"] for r in fwd),
                        "gain_db": statistics.mean(r["averaging_gain_db"] for r in fwd),
                        "rho_s": statistics.mean(r["rho_s"] for r in fwd),
                        "rho_n": statistics.mean(r["rho_n"] for r in fwd),
                        "bwd_snr_dot_db": statistics.mean(r["snr_dot_db"] for r in bwd) if bwd else None,
                        "bwd_rho_s": statistics.mean(r["rho_s"] for r in bwd) if bwd else None,
                        "bwd_gemms": len(bwd)}

            store.get_or_run(f"{name}|{width}", job, protocol=PROTOCOL, lr=lr)
    e = store.data["entries"]
    ratios = []
    for width in widths:
        g = e[f"gpt|{width}"]
        for name in ("ngpt", "gct"):
            n = e[f"{name}|{width}"]
            measured = 10 ** ((n["snr_dot_db"] - g["snr_dot_db"]) / 10)
            predicted = (1 + width * n["rho_s"]) / (1 + width * g["rho_s"])
            bwd = (10 ** ((n["bwd_snr_dot_db"] - g["bwd_snr_dot_db"]) / 10)
                   if n.get("bwd_snr_dot_db") is not None and g.get("bwd_snr_dot_db") is not None else None)
            ratios.append({"model": name, "width": width, "measured_ratio": measured,
                           "eq5_ratio": predicted, "1/rho_model": 1 / n["rho_s"] if n["rho_s"] > 0 else math.inf,
                           "1/rho_gpt": 1 / g["rho_s"] if g["rho_s"] > 0 else math.inf,
                           "bwd_measured_ratio": bwd})
    store.set("ratios", ratios)
    store.set("widths", widths)
    plot(store, widths)
    return {"entries": e, "ratios": ratios}


def plot(store: Store, widths: list[int]) -> str:
    """Left: measured SNR per model (solid fprop, dashed dgrad). Right: the fprop ratio to gpt,
    measured (points) against Eq. 5 from the measured rho_s (crosses), and Eq. 5's curve over D
    with the widest width's rho_s (dotted)."""
    e = store.data["entries"]
    fig, (ax, bx) = plt().subplots(1, 2, figsize=(10, 4))
    for i, name in enumerate(MODELS):
        ax.plot(widths, [e[f"{name}|{w}"]["snr_dot_db"] for w in widths], "-o", color=f"C{i}", label=f"{name} fprop")
        bwd = [(w, e[f"{name}|{w}"].get("bwd_snr_dot_db")) for w in widths]
        bwd = [(w, v) for w, v in bwd if v is not None]
        if bwd:
            ax.plot(*zip(*bwd), "--s", ms=4, color=f"C{i}", label=f"{name} dgrad")
    ax.set_ylabel("dot-product SNR under NVFP4 (dB)")
    ax.set_title("measured SNR")
    top = e[f"gpt|{widths[-1]}"]["rho_s"]
    grid = [2.0 ** k for k in range(4, 15)]
    for i, name in enumerate(MODELS[1:], start=1):
        rows = [r for r in store.data["ratios"] if r["model"] == name]
        bx.plot([r["width"] for r in rows], [r["measured_ratio"] for r in rows], "-o", color=f"C{i}", label=f"{name} measured")
        bx.plot([r["width"] for r in rows], [r["eq5_ratio"] for r in rows], "x", ms=9, color=f"C{i}", label=f"{name} Eq. 5")
        rho = e[f"{name}|{widths[-1]}"]["rho_s"]
        bx.plot(grid, [(1 + d * rho) / (1 + d * top) for d in grid], ":", color=f"C{i}")
    bx.axhline(1.0, color="0.5", lw=0.8)
    bx.set_yscale("log")
    bx.set_ylabel("fprop SNR ratio to gpt")
    bx.set_title("ratio: measured vs Eq. 5 (dotted: Eq. 5 over D)")
    for a in (ax, bx):
        a.set_xscale("log", base=2)
        a.set_xlabel("width D")
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    return save_fig(fig, store.png("snr_width"))


if __name__ == "__main__":
    main(run)
