"""The main job on the bundled default: lint GPT and its Gauge-Canonical counterpart side by side,
let the equivariance oracle judge the engine on both, then train both on the bundled Shakespeare
corpus and compare their validation losses.

Run with ``make demo`` (creates .venv) or ``python examples/demo.py [--steps N]``.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from unitcheck.models import build

from unitcheck import oracle
from unitcheck.codes import CODES
from unitcheck.infer import infer_units


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=800, help="training steps per model (default 800)")
    ap.add_argument("--out-dir", default="runs/demo")
    args = ap.parse_args()
    graphs = {}
    for name in ("gpt", "gct"):
        model, inputs = build(name)
        t0 = time.perf_counter()
        graphs[name] = (infer_units(model, inputs), time.perf_counter() - t0, model, inputs)

    print("Violations by rule (bundled defaults: 2 layers, width 64)\n")
    counts = {name: Counter(v.rule for v in g[0].violations) for name, g in graphs.items()}
    codes = sorted(set().union(*counts.values()))
    print(f"{'rule':<7} {'gpt':>4} {'gct':>4}  what")
    for code in codes:
        print(f"{code:<7} {counts['gpt'][code]:>4} {counts['gct'][code]:>4}  {CODES[code].summary}")
    print(f"{'total':<7} {sum(counts['gpt'].values()):>4} {sum(counts['gct'].values()):>4}\n")

    print("gpt, where and why:")
    for v in graphs["gpt"][0].violations:
        where = f"{v.location.file.rsplit('/', 1)[-1]}:{v.location.line}" if v.location else "?"
        print(f"  {v.rule} {where:<12} {v.module or '<root>':<24} {v.message}")
    print()

    print(f"{'oracle (float64, params redrawn)':<34} {'gpt':>14} {'gct':>14}")
    results = {name: oracle.verify(g[2], g[3], with_fingerprint=True) for name, g in graphs.items()}

    def row(label: str, fn) -> None:  # type: ignore[no-untyped-def]
        print(f"  {label:<32} {fn(results['gpt']):>14} {fn(results['gct']):>14}")

    row("local: agreed / checked", lambda r: f"{r.agreed}/{r.checked}")
    row("violations confirmed", lambda r: f"{r.confirmed}/{r.violations}")
    row("global: agreed / checked", lambda r: f"{r.global_agreed}/{r.global_checked}")
    row("gradients (Prop. 1)", lambda r: f"{r.grad_agreed}/{r.grad_checked}")
    row("fingerprint matches", lambda r: f"{sum(x.match for x in r.fingerprint)}/{len(r.fingerprint)}")
    row("gauge generators", lambda r: str(sum(x.predicted_gauge for x in r.fingerprint)))
    ok = all(r.ok for r in results.values())
    print(f"\nengine {'agrees with the oracle on every node' if ok else 'DISAGREES with the oracle'}")
    if not ok:
        raise SystemExit(1)
    train_both(args.steps, args.out_dir)


def train_both(steps: int, out_dir: str) -> None:
    from unitcheck.train import TrainConfig, train

    print(f"\nTraining on the bundled Shakespeare text (4 layers, width 128, {steps} steps, same seed "
          "and data order)")
    results = {}
    for name in ("gpt", "gct"):
        cfg = TrainConfig(model=name, steps=steps, eval_interval=max(1, steps // 4), out_dir=f"{out_dir}/{name}")
        results[name] = train(cfg)
    print(f"\n{'model':<6} {'final val loss':>15} {'ms/step':>8}")
    for name, r in results.items():
        print(f"{name:<6} {r.final_val_loss:>15.3f} {1e3 * r.step_seconds:>8.0f}")
    print(f"\nloss curves: unitcheck plot {out_dir}/gpt {out_dir}/gct --out {out_dir}/loss.png")


if __name__ == "__main__":
    main()
