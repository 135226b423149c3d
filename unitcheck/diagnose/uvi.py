"""Unit Violation Indices and stream scale (seed 000; SPEC 8).

UVI_res(l) = log((alpha_l + eps) / (alpha* + eps)), alpha_l = RMS(r_l) / RMS(h_l), alpha* = 1/sqrt(2L)
UVI_attn(l, h) = log((vbar + eps) / (1 + eps)), vbar the batch-averaged row-centred logit variance
kappa_scale = max token RMS / min token RMS of the residual stream; log2(kappa) bits consumed.
Primal-dual products Pi_x = RMS(x) RMS(grad_x L) (comparable across rescalings by Prop. 1).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..fxutil import module_path
from .capture import Capture

__all__ = ["uvi_res", "uvi_attn", "kappa_scale", "primal_dual"]

EPS = 1e-8


def _rms(t: torch.Tensor) -> float:
    return float(t.detach().double().pow(2).mean().sqrt())


def uvi_res(cap: Capture) -> list[dict[str, Any]]:
    n = len(cap.residuals)
    target = 1.0 / math.sqrt(max(n, 1))  # 1/sqrt(2L): two residual adds per layer
    rows = []
    for i, (add, stream, branch) in enumerate(cap.residuals):
        h, r = cap.value(stream), cap.value(branch)
        alpha = _rms(r) / max(_rms(h), 1e-30)
        rows.append({"index": i, "module": module_path(add) or "<root>", "node": add.name,
                     "alpha": alpha, "alpha_star": target,
                     "uvi": math.log((alpha + EPS) / (target + EPS))})
    return rows


def _row_centred_variance(q: torch.Tensor, k: torch.Tensor, scale: float, causal: bool) -> torch.Tensor:
    """Per head: mean over batch and query rows of the variance of that row's logits."""
    q, k = q.detach().double(), k.detach().double()
    if k.shape[1] != q.shape[1]:  # grouped-query attention: share key heads
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    logits = (q @ k.transpose(-2, -1)) * scale  # (B, H, T, S)
    t, s = logits.shape[-2:]
    if causal:
        mask = torch.ones(t, s, dtype=torch.bool).tril(s - t)
        count = mask.sum(-1).clamp(min=1).to(logits.dtype)
        mean = (logits * mask).sum(-1) / count
        var = (((logits - mean[..., None]) ** 2) * mask).sum(-1) / count
    else:
        var = logits.var(-1, unbiased=False)
    return var.mean(dim=(0, 2))  # (H,)


def uvi_attn(cap: Capture) -> list[dict[str, Any]]:
    rows = []
    for layer, node in enumerate(cap.attention):
        q, k = cap.value(node.args[0]), cap.value(node.args[1])
        if not (isinstance(q, torch.Tensor) and q.dim() == 4):
            continue
        given = node.kwargs.get("scale")
        scale = float(given) if isinstance(given, (int, float)) else 1.0 / math.sqrt(q.shape[-1])
        causal = bool(node.args[5]) if len(node.args) > 5 else bool(node.kwargs.get("is_causal", False))
        vbar = _row_centred_variance(q, k, scale, causal)
        for head, v in enumerate(vbar.tolist()):
            rows.append({"layer": layer, "head": head, "module": module_path(node) or "<root>",
                         "vbar": v, "uvi": math.log((v + EPS) / (1 + EPS))})
    return rows


def kappa_scale(cap: Capture) -> list[dict[str, Any]]:
    """Per residual stream value (the input of each residual add, then the last output)."""
    streams = [s for _, s, _ in cap.residuals]
    if cap.residuals:
        streams.append(cap.residuals[-1][0])
    rows = []
    for i, node in enumerate(streams):
        h = cap.value(node)
        if not isinstance(h, torch.Tensor) or not h.is_floating_point():
            continue
        token_rms = h.detach().double().pow(2).mean(-1).sqrt().reshape(-1)
        kappa = float(token_rms.max() / token_rms.min().clamp(min=1e-30))
        rows.append({"index": i, "node": node.name, "module": module_path(node) or "<root>",
                     "kappa": kappa, "bits": math.log2(kappa)})
    return rows


def primal_dual(cap: Capture, limit: int = 10_000) -> list[dict[str, Any]]:
    rows = []
    for node, g in list(cap.grads.items())[:limit]:
        x = cap.value(node)
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 1:
            rows.append({"node": node.name, "module": module_path(node) or "<root>",
                         "rms": _rms(x), "grad_rms": _rms(g), "pi": _rms(x) * _rms(g)})
    return rows
