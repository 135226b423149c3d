"""Experiment 6: dot-product SNR with width (seed 001, section 3.4). Trained gpt and the
normalised models (ngpt, gct) at several widths: measured dot-product SNR and rho_s under NVFP4,
and the SNR ratio Eq. 5 predicts from the measured rho_s, (1 + D rho_norm) / (1 + D rho_gpt),
against the measured ratio; the three regimes are set by D against 1/rho.

    python bench/experiments/snr_width.py [--quick]
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from typing import Any

from common import FULL, QUICK, Store, main, plt, save_fig, trained, val_batch

MODELS = ["gpt", "ngpt", "gct"]


def run(quick: bool) -> dict[str, Any]:
    from unitcheck.diagnose.capture import capture
    from unitcheck.diagnose.snr import layer_rows

    sizes = QUICK if quick else FULL
    widths = [32, 64] if quick else [64, 128, 256]
    store = Store("snr_width", quick)
    for width in widths:
        for name in MODELS:
            def job(name: str = name, width: int = width) -> dict[str, Any]:
                s = replace(sizes, n_embd=width)
                model = trained(name, s, quick, n_embd=width)
                cap = capture(model, val_batch(s, batch=4))
                rows = [r for r in layer_rows(cap.linears, cap.values, "te")  # one quantiser for all
                        if r["D"] == width]  # the GEMMs that reduce over the model width
                return {"model": name, "width": width,
                        "snr_dot_db": statistics.mean(r["snr_dot_db"] for r in rows),
                        "snr_products_db": statistics.mean(r["snr_products_db"] for r in rows),
                        "gain_db": statistics.mean(r["averaging_gain_db"] for r in rows),
                        "rho_s": statistics.mean(r["rho_s"] for r in rows),
                        "rho_n": statistics.mean(r["rho_n"] for r in rows)}

            store.get_or_run(f"{name}|{width}", job)
    e = store.data["entries"]
    ratios = []
    for width in widths:
        g = e[f"gpt|{width}"]
        for name in ("ngpt", "gct"):
            n = e[f"{name}|{width}"]
            measured = 10 ** ((n["snr_dot_db"] - g["snr_dot_db"]) / 10)
            predicted = (1 + width * n["rho_s"]) / (1 + width * g["rho_s"])
            ratios.append({"model": name, "width": width, "measured_ratio": measured,
                           "eq5_ratio": predicted, "1/rho_model": 1 / n["rho_s"] if n["rho_s"] > 0 else math.inf,
                           "1/rho_gpt": 1 / g["rho_s"] if g["rho_s"] > 0 else math.inf})
    store.set("ratios", ratios)
    plot(store, widths)
    return {"entries": e, "ratios": ratios}


def plot(store: Store, widths: list[int]) -> str:
    """Left: measured SNR per model. Right: the ratio to gpt, measured (points) against Eq. 5 from
    the measured rho_s (crosses), and Eq. 5's curve over D with the widest width's rho_s (dotted)."""
    e = store.data["entries"]
    fig, (ax, bx) = plt().subplots(1, 2, figsize=(10, 4))
    for i, name in enumerate(MODELS):
        ax.plot(widths, [e[f"{name}|{w}"]["snr_dot_db"] for w in widths], "-o", color=f"C{i}", label=name)
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
    bx.set_ylabel("SNR ratio to gpt")
    bx.set_title("ratio: measured vs Eq. 5 (dotted: Eq. 5 over D)")
    for a in (ax, bx):
        a.set_xscale("log", base=2)
        a.set_xlabel("width D")
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    return save_fig(fig, store.png("snr_width"))


if __name__ == "__main__":
    main(run)
