"""GCT's compiled kernels alone: C and the residual update, forward and backward, per call
(issue 17: where GCT's step time goes), and the attention's per-head query gain, forward and
backward through autograd, as C then a product and as one kernel each way. Inputs stay hot in
cache, so these are lower bounds of what the kernels cost inside a training step.

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
    canonical,
)
from unitcheck.compiled import call_compiled

Case = tuple[str, tuple[int, ...], Callable[[], Any]]


def _kernel(fn: Callable[..., Any], *inputs: Any) -> Callable[[], Any]:
    return lambda: call_compiled(fn, *inputs)


def _query_gain(fused: bool, g: torch.Generator) -> Callable[[], Any]:
    """C(q) times a gain per head and its backward, q a head-major view of a (32, 128, 3 x 128)
    projection as GCT's attention reads it."""
    qkv = torch.randn(32, 128, 3 * 128, generator=g, requires_grad=True)
    gain = torch.ones(4, requires_grad=True)

    def step() -> None:
        q = qkv[..., :128].view(32, 128, 4, 32).transpose(1, 2)
        y = canonical(q, gain=gain.view(1, -1, 1, 1)) if fused else canonical(q) * gain.view(1, -1, 1, 1)
        y.backward(torch.ones_like(y))

    return step


def _cases() -> list[Case]:
    g = torch.Generator().manual_seed(0)
    out: list[Case] = []
    for shape in [(32, 128, 128), (32, 128, 512)]:
        h, u, grad = (torch.randn(shape, generator=g) for _ in range(3))
        alpha = torch.tensor(0.5)
        y, ss = call_compiled(_canonical_forward, h, CANONICAL_EPS)
        kept = call_compiled(_update_forward, h, u, alpha, CANONICAL_EPS)
        out += [("C forward", shape, _kernel(_canonical_forward, h, CANONICAL_EPS)),
                ("C backward", shape, _kernel(_canonical_backward, grad, y, ss, CANONICAL_EPS)),
                ("update forward", shape, _kernel(_update_forward, h, u, alpha, CANONICAL_EPS)),
                ("update backward", shape, _kernel(_update_backward, grad, *kept, h, u, alpha, CANONICAL_EPS, True))]
    out += [("C, then gain", (32, 4, 128, 32), _query_gain(False, g)),
            ("C with gain", (32, 4, 128, 32), _query_gain(True, g))]
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
        for i, (_, _, call) in enumerate(cases):
            call()
            t = time.process_time()
            for _ in range(args.calls):
                call()
            best[i] = min(best.get(i, float("inf")), (time.process_time() - t) / args.calls * 1e3)
    print(f"{args.threads} thread(s), CPU time, best of {args.rounds} rounds x {args.calls} calls")
    print(f"{'kernel':<18}{'shape':<18}{'ms/call':>8}")
    for i, (name, shape, _) in enumerate(cases):
        print(f"{name:<18}{' x '.join(map(str, shape)):<18}{best[i]:8.3f}")


if __name__ == "__main__":
    main()
