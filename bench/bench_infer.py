"""Trace and infer the bundled GPT at several depths (issue 2's benchmark).

Prints trace (torch.export + decomposition) time, unit-inference time, microseconds per node and
inference/trace ratio, and checks the budget: inference <= 100 us/node, <= 1/5 of trace time, and
linear in depth (48-layer over 6-layer inference time between 6x and 10x).

    python bench/bench_infer.py [--depths 6 12 24 48] [--repeat 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from unitcheck.models import build

from unitcheck.infer import run_inference, trace_for_inference
from unitcheck.record import KEY


def measure(depth: int, repeat: int) -> dict[str, float]:
    model, inputs = build("gpt", n_layer=depth, n_embd=64, n_head=4)
    t0 = time.perf_counter()
    traced = trace_for_inference(model, inputs)
    t_trace = time.perf_counter() - t0
    times = []
    for _ in range(repeat):
        for n in traced.graph.nodes:  # fresh walk each time
            n.meta.pop(KEY, None)
        t0 = time.perf_counter()
        ug = run_inference(traced)
        times.append(time.perf_counter() - t0)
    t_infer = statistics.median(times)
    nodes = len(traced.graph.nodes)
    return {
        "depth": depth,
        "nodes": nodes,
        "trace_s": t_trace,
        "infer_s": t_infer,
        "us_per_node": 1e6 * t_infer / nodes,
        "infer_over_trace": t_infer / t_trace,
        "violations": len(ug.violations),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--depths", type=int, nargs="+", default=[6, 12, 24, 48])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    torch.set_num_threads(2)
    measure(2, 1)  # warm-up: first export pays for imports and caches
    rows = [measure(d, args.repeat) for d in args.depths]
    print(f"{'depth':>5} {'nodes':>6} {'trace s':>8} {'infer ms':>9} {'us/node':>8} {'infer/trace':>11}")
    for r in rows:
        print(f"{r['depth']:>5} {r['nodes']:>6} {r['trace_s']:>8.2f} {1e3 * r['infer_s']:>9.1f} "
              f"{r['us_per_node']:>8.1f} {r['infer_over_trace']:>11.3f}")
    growth = rows[-1]["infer_s"] / rows[0]["infer_s"]
    print(f"inference {rows[-1]['depth']}-layer / {rows[0]['depth']}-layer: {growth:.2f}x")
    ok = all(r["us_per_node"] <= 100 and r["infer_over_trace"] <= 0.2 for r in rows)
    ok = ok and (len(rows) < 2 or 6 <= growth <= 10 or rows[-1]["depth"] != 48 or rows[0]["depth"] != 6)
    print("budget: " + ("met" if ok else "NOT met"))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rows": rows, "growth": growth}, fh, indent=2)


if __name__ == "__main__":
    main()
