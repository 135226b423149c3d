"""The whole story on the bundled default (``make demo``):

1. lint the bundled GPT and the hand-written Gauge-Canonical Transformer side by side;
2. let the equivariance oracle judge the engine on both (float64, parameters redrawn);
3. rewrite GPT into GCT form with NVFP4 GEMMs (nGPT recipe) and lint the result;
4. train GPT, the hand-written GCT and the rewritten GPT on the bundled Shakespeare text with the
   same data order and budget, and print violations, final validation loss and step time.

    python examples/demo.py [--steps 800] [--out-dir runs/demo]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from unitcheck.models import build

from unitcheck import oracle
from unitcheck.codes import CODES
from unitcheck.infer import infer_units


def section(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 70 - len(title)), flush=True)


def lint_side_by_side() -> dict[str, object]:
    section("1. lint: bundled gpt vs gct (2 layers, width 64)")
    graphs = {name: infer_units(*build(name)) for name in ("gpt", "gct")}
    counts = {name: Counter(v.rule for v in g.violations) for name, g in graphs.items()}
    print(f"{'rule':<7} {'gpt':>4} {'gct':>4}  what")
    for code in sorted(set().union(*counts.values())):
        print(f"{code:<7} {counts['gpt'][code]:>4} {counts['gct'][code]:>4}  {CODES[code].summary}")
    print(f"{'total':<7} {sum(counts['gpt'].values()):>4} {sum(counts['gct'].values()):>4}")
    print("\ngpt, where and why:")
    for v in graphs["gpt"].violations:
        where = f"{v.location.file.rsplit('/', 1)[-1]}:{v.location.line}" if v.location else "?"
        print(f"  {v.rule} {where:<12} {v.module or '<root>':<24} {v.message}")
    return graphs


def oracle_verdicts() -> None:
    section("2. the oracle judges the engine (float64, parameters redrawn)")
    results = {name: oracle.verify(*build(name), with_fingerprint=True) for name in ("gpt", "gct")}
    print(f"{'':<34} {'gpt':>10} {'gct':>10}")
    rows = [
        ("local: agreed / checked", lambda r: f"{r.agreed}/{r.checked}"),
        ("violations confirmed", lambda r: f"{r.confirmed}/{r.violations}"),
        ("global: agreed / checked", lambda r: f"{r.global_agreed}/{r.global_checked}"),
        ("gradients (Prop. 1)", lambda r: f"{r.grad_agreed}/{r.grad_checked}"),
        ("fingerprint matches", lambda r: f"{sum(x.match for x in r.fingerprint)}/{len(r.fingerprint)}"),
    ]
    for label, fn in rows:
        print(f"  {label:<32} {fn(results['gpt']):>10} {fn(results['gct']):>10}")
    if not all(r.ok for r in results.values()):
        raise SystemExit("the engine disagrees with the oracle")
    print("the engine agrees with the oracle on every node")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=800, help="training steps per model (default 800)")
    ap.add_argument("--out-dir", default="runs/demo")
    args = ap.parse_args()
    t_start = time.perf_counter()
    lint_side_by_side()
    oracle_verdicts()

    from unitcheck.rewrite.api import rewrite, write_rewrite
    from unitcheck.train import TrainConfig, train
    from unitcheck.train.data import load_corpus
    from unitcheck.train.loop import build_model

    section("3. rewrite gpt -> GCT with NVFP4 GEMMs (ngpt recipe), then lint it")
    base = TrainConfig(steps=args.steps, eval_interval=max(1, args.steps // 4), overwrite=True)
    corpus = load_corpus(base.tokenizer, base.corpus)
    gpt = build_model(TrainConfig(**{**base.to_json(), "model": "gpt"}), corpus.vocab_size)
    from unitcheck.models.layers import example_batch

    inputs = example_batch(corpus.vocab_size, batch=2, seq=32)
    before = infer_units(gpt, inputs).violations
    result = rewrite(gpt, inputs, nvfp4="ngpt", source_name="gpt")
    rewrite_dir = f"{args.out_dir}/gpt_gct_nvfp4"
    write_rewrite(result, rewrite_dir, "gpt", inputs)
    after = infer_units(result.module, inputs).violations
    print(f"gpt (4 layers, width 128): {len(before)} violations -> rewritten: {len(after)} violations")
    print(f"{len(result.gct.log)} rewrites logged, {len(result.nvfp4.replaced)} GEMMs in NVFP4; written to {rewrite_dir}")

    section(f"4. train {args.steps} steps each on the bundled Shakespeare text (same data order)")
    runs = {"gpt": "gpt", "gct": "gct", "gpt -> gct + nvfp4": rewrite_dir}
    violations = {"gpt": len(before), "gct": len(infer_units(*build("gct")).violations),
                  "gpt -> gct + nvfp4": len(after)}
    results = {}
    for label, model in runs.items():
        print(f"-- {label}", flush=True)
        out = f"{args.out_dir}/{label.replace(' ', '').replace('->', '_to_').replace('+', '_')}"
        # the rewrite's GEMMs are NVFP4 in its generated code: no substitution pass on top
        cfg = TrainConfig(**{**base.to_json(), "model": model, "out_dir": out})
        results[label] = train(cfg)
    section("summary")
    print(f"{'model':<20} {'violations':>10} {'final val loss':>15} {'ms/step':>8}")
    for label, r in results.items():
        print(f"{label:<20} {violations[label]:>10} {r.final_val_loss:>15.3f} {1e3 * r.step_seconds:>8.0f}")
    print(f"\nloss curves: unitcheck plot {' '.join(r.out_dir for r in results.values())} --out {args.out_dir}/loss.png")
    print(f"demo finished in {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
