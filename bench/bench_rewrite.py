"""Rewrite time of the bundled gpt at several depths (issue 6): trace (dynamic shapes), unit
inference, the GCT rules and code generation, with the trace share shown separately.

    python bench/bench_rewrite.py [--depths 6 12 24 48]
"""

from __future__ import annotations

import argparse
import time

import torch
from unitcheck.models import build

from unitcheck.rewrite.api import rewrite


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--depths", type=int, nargs="+", default=[6, 12, 24, 48])
    args = ap.parse_args()
    torch.set_num_threads(2)
    rewrite(*build("gpt", n_layer=2))  # warm-up
    rows = []
    for d in args.depths:
        model, inputs = build("gpt", n_layer=d)
        t0 = time.perf_counter()
        res = rewrite(model, inputs)
        total = time.perf_counter() - t0
        rows.append((d, res.gct.residuals_rewritten, total, res.gct.traced.trace_seconds))
    print(f"{'depth':>5} {'residuals':>9} {'rewrite s':>10} {'of which trace s':>17} {'s per layer':>12}")
    for d, r, t, tr in rows:
        print(f"{d:>5} {r:>9} {t:>10.2f} {tr:>17.2f} {t / d:>12.3f}")
    if len(rows) > 1:
        growth = rows[-1][2] / rows[0][2]
        print(f"{rows[-1][0]}-layer / {rows[0][0]}-layer: {growth:.1f}x for {rows[-1][0] / rows[0][0]:.0f}x the layers")
    worst = max(t for d, _, t, _ in rows if d == max(args.depths))
    print("budget (<= 5 s at the deepest): " + ("met" if worst <= 5 else "NOT met"))


if __name__ == "__main__":
    main()
