"""Experiment 8: vision. The bundled ViT is linted, rewritten to GCT form and both are trained on a
generated dataset (bars at four orientations in noise; no download), showing that the same lint
and rewrite path works outside language models.

    python bench/experiments/vision.py [--quick]
"""

from __future__ import annotations

from typing import Any

import torch
from common import Store, main, plt, save_fig


def train_classifier(model: torch.nn.Module, data: tuple[torch.Tensor, torch.Tensor],
                     test: tuple[torch.Tensor, torch.Tensor], steps: int, lr: float = 2e-3, seed: int = 0) -> dict[str, Any]:
    torch.manual_seed(seed)
    curve = []
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    images, labels = data
    g = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        idx = torch.randint(0, len(labels), (64,), generator=g)
        _, loss = model(images[idx], labels[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        curve.append(float(loss))
    model.eval()
    with torch.no_grad():
        logits, loss = model(*test)
    return {"test_loss": float(loss), "test_accuracy": float((logits.argmax(-1) == test[1]).float().mean()),
            "train_curve": curve}


def run(quick: bool) -> dict[str, Any]:
    from unitcheck.models import build
    from unitcheck.models.vit import bars

    import unitcheck
    from unitcheck.rewrite.api import rewrite

    store = Store("vision", quick)
    steps = 30 if quick else 600
    train_set, test_set = bars(4096 if not quick else 512, seed=1), bars(1024 if not quick else 256, seed=2)

    def job(kind: str) -> dict[str, Any]:
        model, example = build("vit", n_layer=2 if quick else 4)
        if kind == "gct":
            model = rewrite(model, example).module
        violations = [v.rule for v in unitcheck.lint(model, example).violations]
        return {"model": kind, "violations": len(violations), "rules": sorted(set(violations)),
                **train_classifier(model, train_set, test_set, steps)}

    for kind in ("vit", "gct"):
        store.get_or_run(kind, lambda kind=kind: job(kind))
    plot(store)
    return store.data["entries"]


def plot(store: Store) -> str:
    fig, ax = plt().subplots(figsize=(6, 3.8))
    for i, v in enumerate(store.data["entries"].values()):
        curve = v.get("train_curve", [])
        k = max(1, len(curve) // 50)  # a moving average over ~2% of the run
        smooth = [sum(curve[j:j + k]) / k for j in range(0, max(0, len(curve) - k + 1))]
        ax.plot(range(k, k + len(smooth)), smooth, color=f"C{i}",
                label=f"{v['model']}: {v['violations']} violation(s), test acc {v['test_accuracy']:.3f}")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (smoothed)")
    ax.set_yscale("log")
    ax.set_title("ViT vs its GCT rewrite on generated bars")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return save_fig(fig, store.png("vision"))


if __name__ == "__main__":
    main(run)
