"""Experiment 5: the radial fingerprint (seed 000, Prop. 6). For every generator ("role") of every
bundled model, the static gauge prediction against the measured D_g L, at initialisation (weights
redrawn) and after training (trained weights, not redrawn). The seed reports 54 of 54.

    python bench/experiments/fingerprint_exp.py [--quick | --reduced]
"""

from __future__ import annotations

from typing import Any

from common import Store, main, plt, save_fig, sizes_for, trained, untrained, val_batch

MODELS = ["gpt", "llama", "qknorm", "ngpt", "gct"]
INPUTS = "validation batch [:2, :32]"  # stored with each entry: entries measured otherwise are rerun


def run(quick: bool) -> dict[str, Any]:
    from unitcheck import oracle

    sizes = sizes_for(quick)
    store = Store("fingerprint", quick)

    def measure(name: str, state: str) -> dict[str, Any]:
        """Same shape, vocabulary and batch in both states; at init the oracle redraws the weights."""
        model = untrained(name, sizes) if state == "init" else trained(name, sizes, quick)
        x, y = val_batch(sizes, batch=2)
        rows = oracle.fingerprint(model, (x[:, :32], y[:, :32]), redraw=(state == "init"))
        return {"model": name, "state": state, "inputs": INPUTS, "generators": len(rows),
                "matches": sum(r.match for r in rows), "gauge": sum(r.predicted_gauge for r in rows),
                "rows": [r.to_json() for r in rows]}

    for name in MODELS:
        for state in ("init", "trained"):
            store.get_or_run(f"{name}|{state}", lambda name=name, state=state: measure(name, state), inputs=INPUTS)
    stored = store.data["entries"]  # model order, init before trained, however the runs were resumed
    store.data["entries"] = {k: stored[k] for name in MODELS for k in (f"{name}|init", f"{name}|trained")}
    e = store.data["entries"].values()
    store.set("summary", {"generators": sum(v["generators"] for v in e), "matches": sum(v["matches"] for v in e)})
    plot(store)
    return store.data["summary"]


def plot(store: Store) -> str:
    """Every generator's measured radial rate, by model and state: the predicted gauges should sit
    orders of magnitude below the rest."""
    fig, ax = plt().subplots(figsize=(7.5, 4))
    labels = []
    for i, v in enumerate(store.data["entries"].values()):
        labels.append(f"{v['model']}\n{v['state']}")
        if not v["rows"]:  # every weight declared dimensionless (nGPT): nothing to measure
            ax.text(i, 1e-8, "no scale\ngenerators", ha="center", fontsize=6, color="0.4")
        for r in v["rows"]:
            y = max(r["measured"], 1e-18)
            gauge = r["predicted_gauge"]
            ax.scatter(i + (0.12 if gauge else -0.12), y, s=14, marker="o" if r["match"] else "X",
                       color="C0" if gauge else "C1", alpha=0.7)
    ax.scatter([], [], color="C0", label="predicted gauge (rate ~ 0)")
    ax.scatter([], [], color="C1", label="predicted non-gauge")
    ax.scatter([], [], color="k", marker="X", label="mismatch")
    ax.set_yscale("log")
    ax.set_xticks(range(len(labels)), labels, fontsize=7)
    ax.set_ylabel("|<W, dL/dW>| / scale (per generator)")
    ax.set_title("radial fingerprint: predicted vs measured")
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    return save_fig(fig, store.png("fingerprint"))


if __name__ == "__main__":
    main(run)
