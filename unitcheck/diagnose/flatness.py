"""Loss-landscape flatness (seed 001, section 4): the loss increase when every weight matrix gets
Gaussian noise of scale alpha * ||W||_F / sqrt(n)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["flatness"]

ALPHAS = (0.01, 0.02, 0.05, 0.1, 0.2)


def _loss(model: nn.Module, inputs: Any) -> float:
    out = model(*inputs) if isinstance(inputs, (tuple, list)) else model(**inputs)
    loss = out[1] if isinstance(out, (tuple, list)) else getattr(out, "loss", out)
    return float(loss)


@torch.no_grad()
def flatness(model: nn.Module, inputs: Any, alphas: tuple[float, ...] = ALPHAS, draws: int = 3,
             seed: int = 0) -> list[dict[str, float]]:
    was = model.training
    model.eval()
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    saved = [p.detach().clone() for p in matrices]
    base = _loss(model, inputs)
    g = torch.Generator().manual_seed(seed)
    rows = [{"alpha": 0.0, "loss": base, "increase": 0.0}]
    try:
        for alpha in alphas:
            losses = []
            for _ in range(draws):
                for p, p0 in zip(matrices, saved):
                    scale = alpha * float(p0.norm()) / p0.numel() ** 0.5
                    p.copy_(p0 + scale * torch.randn(p0.shape, generator=g, dtype=p0.dtype))
                losses.append(_loss(model, inputs))
            mean = sum(losses) / len(losses)
            rows.append({"alpha": alpha, "loss": mean, "increase": mean - base})
    finally:
        for p, p0 in zip(matrices, saved):
            p.copy_(p0)
        model.train(was)
    return rows
