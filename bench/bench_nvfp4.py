"""NVFP4 costs (issue 5), measured side by side in one run:

1. fake-quantise a 4096x4096 fp32 tensor: our eager path, our compiled path, torchao's
   ``NVFP4Tensor.to_nvfp4`` + ``dequantize``, and ``x.clone()`` as the memory-bound floor;
2. the training-step time of the bundled gpt in nvfp4 (emulated) relative to fp32.

    python bench/bench_nvfp4.py [--repeat 5] [--skip-train]
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--skip-train", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(2)
    from unitcheck.quant.nvfp4 import fake_quantize, fake_quantize_fast

    x = torch.randn(4096, 4096, generator=torch.Generator().manual_seed(0))
    rows: list[tuple[str, float]] = [
        ("unitcheck eager fake_quantize", timeit(lambda: fake_quantize(x), args.repeat)),
        ("unitcheck compiled fake_quantize", timeit(lambda: fake_quantize_fast(x), args.repeat)),
    ]
    try:
        from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale

        def tao() -> torch.Tensor:
            t = NVFP4Tensor.to_nvfp4(x, per_tensor_scale=per_tensor_amax_to_scale(x.abs().amax()))
            return t.dequantize(torch.float32)

        rows.append(("torchao to_nvfp4 + dequantize", timeit(tao, args.repeat)))
    except ImportError:
        print("torchao not installed: skipped")
    rows.append(("x.clone()", timeit(lambda: x.clone(), args.repeat)))
    print("fake-quantise 4096x4096 fp32 (median of", args.repeat, "runs)")
    for name, t in rows:
        print(f"  {name:<34} {1e3 * t:>9.1f} ms")
    table = dict(rows)
    if "torchao to_nvfp4 + dequantize" in table:
        speedup = table["torchao to_nvfp4 + dequantize"] / table["unitcheck compiled fake_quantize"]
        print(f"  compiled vs torchao: {speedup:.1f}x faster ({'meets' if speedup >= 10 else 'misses'} the 10x goal)")
    if not args.skip_train:
        from bench_train import step_times  # type: ignore[import-not-found]

        from unitcheck.train.config import TrainConfig
        from unitcheck.train.data import load_corpus

        corpus = load_corpus("char")
        res: dict[str, list[float]] = {"fp32": [], "nvfp4 te": [], "nvfp4 ngpt": []}
        for _ in range(3):
            for key in res:
                prec, _, recipe = key.partition(" ")
                cfg = TrainConfig(n_layer=4, n_embd=128, seq_len=128, batch_size=32, precision=prec,
                                  nvfp4_recipe=recipe or "te")
                res[key] += step_times("gpt", cfg, 10, corpus)
        med = {k: statistics.median(v) for k, v in res.items()}
        print("gpt training step (4 layers, width 128, batch 32x128)")
        for k, v in med.items():
            print(f"  {k:<11} {1e3 * v:>8.1f} ms/step  {v / med['fp32']:.2f}x fp32")
        for k in ("nvfp4 te", "nvfp4 ngpt"):
            ratio = med[k] / med["fp32"]
            print(f"  {k} / fp32: {ratio:.2f}x ({'meets' if ratio <= 1.6 else 'misses'} the 1.6x goal)")


if __name__ == "__main__":
    main()
