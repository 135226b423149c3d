"""NVFP4 costs (issue 5), measured side by side in one run:

1. fake-quantise a 4096x4096 fp32 tensor: our eager path, our compiled path, torchao's
   ``NVFP4Tensor.to_nvfp4`` + ``dequantize``, and ``x.clone()`` as the memory-bound floor;
2. the training-step time in emulated nvfp4 relative to fp32, per model and recipe: gpt with
   ``te`` and ``ngpt``, ngpt and gct (as the experiments train it) with ``matched``; every
   configuration interleaved in rounds, the output head in high precision as training runs it;
3. with ``--kernels``, each compiled kernel of the quantiser on one (4096, 512) activation, with
   its operand in cache (warm) and after 64 MB were written (cold, as in a training step).

    python bench/bench_nvfp4.py [--repeat 5] [--skip-train] [--threads 2] [--rounds 3] [--steps 10]
                                [--kernels]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch


def timeit(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm-up (and compilation)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def quantiser(repeat: int) -> None:
    """Fake-quantise one 4096 x 4096 tensor through each path."""
    from unitcheck.quant.nvfp4 import fake_quantize, fake_quantize_fast

    x = torch.randn(4096, 4096, generator=torch.Generator().manual_seed(0))
    rows: list[tuple[str, float]] = [
        ("unitcheck eager fake_quantize", timeit(lambda: fake_quantize(x), repeat)),
        ("unitcheck compiled fake_quantize", timeit(lambda: fake_quantize_fast(x), repeat)),
    ]
    try:
        from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale

        def tao() -> torch.Tensor:
            t = NVFP4Tensor.to_nvfp4(x, per_tensor_scale=per_tensor_amax_to_scale(x.abs().amax()))
            return t.dequantize(torch.float32)

        rows.append(("torchao to_nvfp4 + dequantize", timeit(tao, repeat)))
    except ImportError:
        print("torchao not installed: skipped")
    rows.append(("x.clone()", timeit(lambda: x.clone(), repeat)))
    print("fake-quantise 4096x4096 fp32 (median of", repeat, "runs)")
    for name, t in rows:
        print(f"  {name:<34} {1e3 * t:>9.1f} ms")
    table = dict(rows)
    if "torchao to_nvfp4 + dequantize" in table:
        speedup = table["torchao to_nvfp4 + dequantize"] / table["unitcheck compiled fake_quantize"]
        print(f"  compiled vs torchao: {speedup:.1f}x faster ({'meets' if speedup >= 10 else 'misses'} the 10x goal)")


def kernels(repeat: int) -> None:
    """The quantiser's compiled kernels one by one, warm and cold, beside a clone of the operand
    (the memory floor): in a training step an operand is rarely still in cache."""
    from unitcheck.compiled import call_compiled
    from unitcheck.quant import nvfp4 as q

    flush = torch.empty(64 << 20, dtype=torch.uint8)
    x = torch.randn(4096, 512, generator=torch.Generator().manual_seed(0))
    rows, cols = x.reshape(4096, 32, 16), x.reshape(256, 16, 512)
    bound, seed = q._bound(1.0, x.device), torch.tensor(7, dtype=torch.int32)
    enc_r, dec_r = call_compiled(q._scales_rows, rows, True, bound)
    turned = call_compiled(q._rht_cols, cols)
    enc_c, dec_c = call_compiled(q._scales_cols, turned, True, bound)
    cases: list[tuple[str, Callable[[], object]]] = [
        ("block scales, 1x16 rows", lambda: call_compiled(q._scales_rows, rows, True, bound)),
        ("block scales, 16x1 columns", lambda: call_compiled(q._scales_cols, turned, True, bound)),
        ("Hadamard transform, columns", lambda: call_compiled(q._rht_cols, cols)),
        ("rounding, nearest", lambda: call_compiled(q._apply, rows, enc_r, dec_r, None)),
        ("rounding, stochastic", lambda: call_compiled(q._apply, turned, enc_c, dec_c, seed)),
        ("x.clone()", lambda: x.clone()),
    ]

    def cold(fn: Callable[[], object]) -> float:
        flush.add_(1)  # 64 MB written: the operand is out of every cache
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    print(f"quantiser kernels on a (4096, 512) float32 operand, {torch.get_num_threads()} thread(s), median of {repeat}")
    for name, fn in cases:
        warm = timeit(fn, repeat)
        flushed = statistics.median(cold(fn) for _ in range(repeat))
        print(f"  {name:<30} warm {1e3 * warm:6.3f} ms   cold {1e3 * flushed:6.3f} ms")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--skip-quantiser", action="store_true")
    ap.add_argument("--kernels", action="store_true", help="time the quantiser's kernels one by one, warm and cold")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall", help="cpu: process CPU time (see bench_train.py)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--width", type=int, nargs="+", default=[128],
                    help="model widths, each measured in its own block (the quantiser's work grows with the "
                         "width, the GEMMs' with its square)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    if not args.skip_quantiser:
        quantiser(args.repeat)
    if args.kernels:
        kernels(max(args.repeat, 20))
    if not args.skip_train:
        from bench_train import step_times  # type: ignore[import-not-found]

        from unitcheck.train.config import TrainConfig
        from unitcheck.train.data import load_corpus

        corpus = load_corpus("char")
        runs = [("gpt", "fp32", ""), ("gpt", "nvfp4", "te"), ("gpt", "nvfp4", "ngpt"),
                ("ngpt", "fp32", ""), ("ngpt", "nvfp4", "matched"),
                ("gct:scalars=scaled", "fp32", ""), ("gct:scalars=scaled", "nvfp4", "matched")]
        for width in args.width:
            res: dict[tuple[str, str, str], list[float]] = {r: [] for r in runs}
            for _ in range(args.rounds):
                for model, prec, recipe in runs:
                    cfg = TrainConfig(n_layer=4, n_embd=width, n_head=max(4, width // 64), seq_len=128,
                                      batch_size=32, precision=prec, nvfp4_recipe=recipe or "te")
                    res[(model, prec, recipe)] += step_times(model, cfg, args.steps, corpus, args.clock)
            med = {k: statistics.median(v) for k, v in res.items()}
            print(f"training step (4 layers, width {width}, batch 32x128, {args.threads} thread(s), {args.rounds} "
                  f"rounds x {args.steps} steps, head in high precision)")
            for (model, prec, recipe), v in med.items():
                ratio = v / med[(model, "fp32", "")]
                goal = "" if prec == "fp32" else f"  ({'meets' if ratio <= 1.3 else 'misses'} the 1.3x goal)"
                print(f"  {model:<20} {prec + (' ' + recipe if recipe else ''):<14} {1e3 * v:>8.1f} ms/step  "
                      f"{ratio:.2f}x fp32{goal}")

if __name__ == "__main__":
    main()
