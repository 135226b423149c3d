"""Training-step time of the bundled models at one width and depth, in one run, relative to gpt
(issue 4). Models are interleaved in rounds so machine noise hits them alike. A model may carry
config fields after a colon: ``gct:scalars=scaled`` is the gct the experiments train.

    python bench/bench_train.py [--steps 12] [--rounds 3] [--n-layer 4] [--n-embd 128] [--precision fp32]
                                [--threads 2] [--models gpt gct gct:scalars=scaled]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from unitcheck.train.config import TrainConfig
from unitcheck.train.data import Batcher, load_corpus
from unitcheck.train.loop import _loss, _optimizer, build_model

MODELS = ["gpt", "llama", "qknorm", "ngpt", "gct"]


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def training_step(name: str, cfg: TrainConfig, corpus) -> tuple[Batcher, Callable[[torch.Tensor, torch.Tensor], None]]:  # type: ignore[no-untyped-def]
    """The model ``name`` (config fields after a colon) built as the training loop builds it, its
    batches, and one optimiser step on a batch."""
    model_name, _, sets = name.partition(":")
    cfg = TrainConfig(**{**cfg.to_json(), "model": model_name, "model_set": sets}).effective()
    torch.manual_seed(0)
    model = build_model(cfg, corpus.vocab_size)
    if cfg.precision == "nvfp4":
        from unitcheck.quant.substitute import substitute_nvfp4

        substitute_nvfp4(model, recipe=cfg.nvfp4_recipe, quantise_head=cfg.quantise_head)
    opt = _optimizer(model, cfg)
    normalise = getattr(model, "normalize_weights", None) if cfg.renormalises() else None

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        loss = _loss(model, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if normalise is not None:
            normalise()

    return Batcher(corpus.train, cfg.seq_len, cfg.batch_size, seed=0), step


def step_times(name: str, cfg: TrainConfig, steps: int, corpus, clock: str = "wall") -> list[float]:  # type: ignore[no-untyped-def]
    """Seconds per training step; ``clock="cpu"`` counts the process's CPU time, which other jobs
    on a shared machine do not inflate (with one torch thread it is the step's own work)."""
    tick = CLOCKS[clock]
    batcher, step = training_step(name, cfg, corpus)
    times = []
    for i in range(steps + 2):
        x, y = batcher.next()
        t0 = tick()
        step(x, y)
        if i >= 2:  # warm-up steps excluded
            times.append(tick() - t0)
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall", help="cpu: process CPU time, for a "
                    "machine shared with other jobs (use with --threads 1)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (1 on a loaded machine: 2 threads "
                    "competing with other jobs for 2 cores stall each other)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = TrainConfig(n_layer=args.n_layer, n_embd=args.n_embd, seq_len=args.seq_len,
                      batch_size=args.batch_size, precision=args.precision)
    corpus = load_corpus("char")
    samples: dict[str, list[float]] = {m: [] for m in args.models}
    for _ in range(args.rounds):
        for m in args.models:
            samples[m] += step_times(m, cfg, args.steps, corpus, args.clock)
    med = {m: statistics.median(v) for m, v in samples.items()}
    base = med.get("gpt", next(iter(med.values())))
    print(f"{args.n_layer} layers, width {args.n_embd}, batch {args.batch_size}x{args.seq_len}, {args.precision}, "
          f"{args.rounds} rounds x {args.steps} steps, {args.clock} clock")
    low = {m: min(v) for m, v in samples.items()}  # the least disturbed step: robust on a shared machine
    low_base = low.get("gpt", next(iter(low.values())))
    print(f"{'model':<20} {'ms/step':>8} {'vs gpt':>7} {'min ms':>8} {'vs gpt':>7}")
    for m in args.models:
        print(f"{m:<20} {1e3 * med[m]:>8.1f} {med[m] / base:>7.2f}x {1e3 * low[m]:>8.1f} {low[m] / low_base:>7.2f}x")


if __name__ == "__main__":
    main()
