"""PNG plots of diagnostics: UVI heatmap, per-layer SNR bars for two models, flatness curves,
and the fingerprint table."""

from __future__ import annotations

import os
from typing import Any

from ..plotting import pyplot, save_figure

__all__ = ["plot_all"]


def uvi_heatmap(diag: dict[str, Any], path: str, title: str) -> str:
    plt = pyplot()
    rows = diag["uvi_attn"]
    layers = 1 + max((r["layer"] for r in rows), default=0)
    heads = 1 + max((r["head"] for r in rows), default=0)
    grid = [[0.0] * heads for _ in range(layers)]
    for r in rows:
        grid[r["layer"]][r["head"]] = r["uvi"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), gridspec_kw={"width_ratios": [heads + 2, 4]})
    im = axes[0].imshow(grid, cmap="coolwarm", vmin=-3, vmax=3, aspect="auto")
    axes[0].set_xlabel("head")
    axes[0].set_ylabel("layer")
    axes[0].set_title("UVI_attn")
    fig.colorbar(im, ax=axes[0])
    res = diag["uvi_res"]
    axes[1].barh([r["index"] for r in res], [r["uvi"] for r in res], color="C1")
    axes[1].axvline(0, color="k", lw=0.8)
    axes[1].set_title("UVI_res per residual add")
    axes[1].invert_yaxis()
    fig.suptitle(title)
    return save_figure(fig, path)


def snr_bars(diags: dict[str, dict[str, Any]], path: str) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 3.8))
    width = 0.8 / max(1, len(diags))
    for i, (name, d) in enumerate(diags.items()):
        vals = [r["snr_dot_db"] for r in d["snr"]]
        ax.bar([j + i * width for j in range(len(vals))], vals, width, label=f"{name} dot product")
        ax.plot([j + i * width for j in range(len(vals))], [r["snr_products_db"] for r in d["snr"]],
                "k_", ms=8)
    ax.set_xlabel("linear layer (in graph order); ticks: element-product SNR")
    ax.set_ylabel("SNR under NVFP4 (dB)")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    return save_figure(fig, path)


def flatness_curves(diags: dict[str, dict[str, Any]], path: str) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for name, d in diags.items():
        ax.plot([r["alpha"] for r in d["flatness"]], [r["increase"] for r in d["flatness"]], "o-", label=name)
    ax.set_xlabel("noise scale alpha (x ||W||_F / sqrt(n))")
    ax.set_ylabel("loss increase (nats)")
    ax.legend()
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def fingerprint_table(diag: dict[str, Any], path: str, title: str) -> str:
    plt = pyplot()
    rows = diag.get("fingerprint", [])
    cells = [[r["generator"].replace("p:", ""), "gauge" if r["predicted_gauge"] else "radial",
              f"{r['measured']:.1e}", "yes" if r["match"] else "NO"] for r in rows] or [["(no generator)", "", "", ""]]
    fig, ax = plt.subplots(figsize=(8, 0.3 * len(cells) + 1))
    ax.axis("off")
    table = ax.table(cellText=cells, colLabels=["generator", "predicted", "|D_g L| rel.", "match"], loc="center")
    table.auto_set_font_size(False)
    table.set_fontsize(7)
    ax.set_title(title)
    return save_figure(fig, path)


def plot_all(diags: dict[str, dict[str, Any]], out_dir: str) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    files = []
    for name, d in diags.items():
        files.append(uvi_heatmap(d, os.path.join(out_dir, f"uvi_{name}.png"), f"UVI: {name}"))
        if d.get("fingerprint") is not None:
            files.append(fingerprint_table(d, os.path.join(out_dir, f"fingerprint_{name}.png"), f"fingerprint: {name}"))
    files.append(snr_bars(diags, os.path.join(out_dir, "snr.png")))
    if any(d.get("flatness") for d in diags.values()):
        files.append(flatness_curves(diags, os.path.join(out_dir, "flatness.png")))
    return files
