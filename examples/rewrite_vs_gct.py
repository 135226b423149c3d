"""Does the rewrite reproduce the hand-written GCT in training? Rewrite the bundled gpt (at the
training size, same seed) into GCT form, train it and the hand-written gct with the same steps,
data order and seed, and print both final validation losses (issue 6 asks for 0.05 nats).

    python examples/rewrite_vs_gct.py [--steps 800]
"""

from __future__ import annotations

import argparse

from unitcheck.models.layers import example_batch

from unitcheck.rewrite.api import rewrite, write_rewrite
from unitcheck.train import TrainConfig, train
from unitcheck.train.data import load_corpus
from unitcheck.train.loop import build_model


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--out-dir", default="runs/rewrite_vs_gct")
    args = ap.parse_args()
    base = TrainConfig(steps=args.steps, eval_interval=max(1, args.steps // 4), overwrite=True)
    corpus = load_corpus(base.tokenizer, base.corpus)
    gpt = build_model(TrainConfig(**{**base.to_json(), "model": "gpt"}), corpus.vocab_size)
    inputs = example_batch(corpus.vocab_size, batch=2, seq=32)
    directory = f"{args.out_dir}/gpt_gct"
    write_rewrite(rewrite(gpt, inputs, source_name="gpt"), directory, "gpt", inputs)
    losses = {}
    for label, model in (("gpt rewritten to gct", directory), ("gct (hand-written)", "gct")):
        cfg = TrainConfig(**{**base.to_json(), "model": model, "out_dir": f"{args.out_dir}/{label.split()[0]}_{len(losses)}"})
        losses[label] = train(cfg).final_val_loss
    for label, loss in losses.items():
        print(f"{label:<24} final val loss {loss:.3f}")
    gap = abs(losses["gpt rewritten to gct"] - losses["gct (hand-written)"])
    print(f"difference {gap:.3f} nats ({'within' if gap <= 0.05 else 'outside'} 0.05)")


if __name__ == "__main__":
    main()
