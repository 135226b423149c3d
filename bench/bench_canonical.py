"""GCT's compiled kernels alone: C and the residual update, forward and backward, per call
(issue 17: where GCT's step time goes). Inputs stay hot in cache, so these are lower bounds of
what the kernels cost inside a training step.

    python bench/bench_canonical.py [--calls 50] [--rounds 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import torch

from unitcheck.canonical import (
    CANONICAL_EPS,
    _canonical_backward,
    _canonical_forward,
    _update_backward,
    _update_forward,
)
from unitcheck.compiled import call_compiled

Case = tuple[str, tuple[int, ...], Callable[..., Any], tuple[Any, ...]]


def _cases() -> list[Case]:
    g = torch.Generator().manual_seed(0)
    out: list[Case] = []
    for shape in [(32, 128, 128), (32, 128, 512)]:
        h, u, grad = (torch.randn(shape, generator=g) for _ in range(3))
        alpha = torch.tensor(0.5)
        y, ss = call_compiled(_canonical_forward, h, CANONICAL_EPS)
        kept = call_compiled(_update_forward, h, u, alpha, CANONICAL_EPS)
        out += [("C forward", shape, _canonical_forward, (h, CANONICAL_EPS)),
                ("C backward", shape, _canonical_backward, (grad, y, ss, CANONICAL_EPS)),
                ("update forward", shape, _update_forward, (h, u, alpha, CANONICAL_EPS)),
                ("update backward", shape, _update_backward, (grad, *kept, h, u, alpha, CANONICAL_EPS, True))]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cases = _cases()
    best: dict[int, float] = {}
    for _ in range(args.rounds):  # interleaved, the best round kept
        for i, (_, _, fn, inputs) in enumerate(cases):
            call_compiled(fn, *inputs)
            t = time.process_time()
            for _ in range(args.calls):
                call_compiled(fn, *inputs)
            best[i] = min(best.get(i, float("inf")), (time.process_time() - t) / args.calls * 1e3)
    print(f"{args.threads} thread(s), CPU time, best of {args.rounds} rounds x {args.calls} calls")
    print(f"{'kernel':<18}{'shape':<18}{'ms/call':>8}")
    for i, (name, shape, _, _) in enumerate(cases):
        print(f"{name:<18}{' x '.join(map(str, shape)):<18}{best[i]:8.3f}")


if __name__ == "__main__":
    main()
