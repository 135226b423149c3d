"""Where one model's training step spends its time beyond another's: ``torch.profiler`` self CPU
time per op, averaged per step, for two bundled models at the same size, and their difference
(issue 17: what GCT's step costs over gpt's). Compiled kernels are summed under one row.

    python bench/profile_step.py [--models gpt gct:scalars=scaled] [--steps 6] [--rounds 2] [--top 12]
                                 [--threads 1]
"""

from __future__ import annotations

import argparse
import collections

import torch
from bench_train import training_step  # bench/ is on the path when this script runs
from torch.profiler import ProfilerActivity, profile

from unitcheck.train.config import TrainConfig
from unitcheck.train.data import load_corpus

COMPILED = "compiled kernels (torch.compile)"


def op_times(name: str, cfg: TrainConfig, corpus, steps: int) -> collections.Counter[str]:  # type: ignore[no-untyped-def]
    """Milliseconds of self CPU time per op and step, after three warm-up steps."""
    batcher, train = training_step(name, cfg, corpus)

    def step() -> None:
        train(*batcher.next())

    for _ in range(3):
        step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    out: collections.Counter[str] = collections.Counter()
    for e in prof.key_averages():
        if e.key.startswith("Torch-Compiled Region"):
            continue  # a region's total, its kernels counted below
        out[COMPILED if "CompiledFxGraph" in e.key else e.key] += e.self_cpu_time_total / steps / 1e3
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs=2, default=["gpt", "gct:scalars=scaled"])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1, help="torch threads; self CPU time sums them")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = TrainConfig(n_layer=args.n_layer, n_embd=args.n_embd, seq_len=128, batch_size=32, precision="fp32")
    corpus = load_corpus("char")
    base, other = args.models
    a: collections.Counter[str] = collections.Counter()
    b: collections.Counter[str] = collections.Counter()
    for _ in range(args.rounds):  # interleaved, so machine noise hits both alike
        a.update(op_times(base, cfg, corpus, args.steps))
        b.update(op_times(other, cfg, corpus, args.steps))
    r = args.rounds
    total_a, total_b = sum(a.values()) / r, sum(b.values()) / r
    print(f"{args.n_layer} layers, width {args.n_embd}, batch 32x128, {args.threads} thread(s), {r} rounds x {args.steps} steps")
    print(f"self CPU ms/step: {base} {total_a:.1f}, {other} {total_b:.1f} ({total_b / total_a:.2f}x)")
    print(f"{'op':<52} {base[:10]:>10} {other[:10]:>10} {'diff':>8}")
    keys = sorted(set(a) | set(b), key=lambda k: -abs(b[k] - a[k]))[: args.top]
    for k in keys:
        print(f"{k[:52]:<52} {a[k] / r:>10.2f} {b[k] / r:>10.2f} {(b[k] - a[k]) / r:>+8.2f}")


if __name__ == "__main__":
    main()
