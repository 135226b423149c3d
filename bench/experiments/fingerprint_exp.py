"""Experiment 5: the radial fingerprint (seed 000, Prop. 6). For every generator ("role") of every
bundled model, the static gauge prediction against the measured D_g L, at initialisation (weights
redrawn) and after training (trained weights, not redrawn). The seed reports 54 of 54.

    python bench/experiments/fingerprint_exp.py [--quick]
"""

from __future__ import annotations

from typing import Any

from common import FULL, QUICK, Store, main, trained, val_batch

MODELS = ["gpt", "llama", "qknorm", "ngpt", "gct"]


def run(quick: bool) -> dict[str, Any]:
    from unitcheck.models import build

    from unitcheck import oracle

    sizes = QUICK if quick else FULL
    store = Store("fingerprint", quick)
    for name in MODELS:
        def init(name: str = name) -> dict[str, Any]:
            rows = oracle.fingerprint(*build(name))
            return {"model": name, "state": "init", "generators": len(rows),
                    "matches": sum(r.match for r in rows), "gauge": sum(r.predicted_gauge for r in rows),
                    "rows": [r.to_json() for r in rows]}

        def after(name: str = name) -> dict[str, Any]:
            model = trained(name, sizes, quick)
            x, y = val_batch(sizes, batch=2)
            rows = oracle.fingerprint(model, (x[:, :32], y[:, :32]), redraw=False)
            return {"model": name, "state": "trained", "generators": len(rows),
                    "matches": sum(r.match for r in rows), "gauge": sum(r.predicted_gauge for r in rows),
                    "rows": [r.to_json() for r in rows]}

        store.get_or_run(f"{name}|init", init)
        store.get_or_run(f"{name}|trained", after)
    e = store.data["entries"].values()
    store.set("summary", {"generators": sum(v["generators"] for v in e), "matches": sum(v["matches"] for v in e)})
    return store.data["summary"]


if __name__ == "__main__":
    main(run)
