"""Radial fingerprint (seed 000, Prop. 6) for every generator of every bundled model.

For each generator g, D_g L = d/dc L(every leaf W scaled by c^u_g(W)) at c = 1, in float64 with
parameters redrawn. The static pass predicts D_g L = 0 (a gauge direction) iff g is not in the
loss unit and no violating op consumed a value carrying g.
"""

from __future__ import annotations

from unitcheck.models import build, names

from unitcheck import oracle


def main() -> None:
    total = matched = 0
    print(f"{'model':<7} {'generator':<44} {'predicted':>9} {'|D_g L| rel.':>13} {'paper <W,dW>':>13} match")
    for name in names():
        model, inputs = build(name)
        rows = oracle.fingerprint(model, inputs)
        for r in rows:
            total += 1
            matched += r.match
            pred = "gauge" if r.predicted_gauge else "radial"
            print(f"{name:<7} {r.generator:<44} {pred:>9} {r.measured:>13.2e} {r.weights_only:>13.2e} {'yes' if r.match else 'NO'}")
        if not rows:
            print(f"{name:<7} (no generator: every leaf is declared dimensionless)")
    print(f"\n{matched} of {total} predictions match the measurement")
    if matched != total:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
