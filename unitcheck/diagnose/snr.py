"""Dot-product SNR under NVFP4 per linear layer (seed 001, section 3).

For products s_k = w_k x_k and their quantisation error n_k = w^_k x^_k - w_k x_k over a sample of
tokens (rows) and output units:

- SNR in dB of weights, activations, element products and dot products (Eq. 1), and the averaging
  gain = SNR(dot) - SNR(products) (Eq. 6);
- effective pairwise correlations (Eq. 3): rho_u = (Var(sum_k u_k) / sum_k Var(u_k) - 1) / (D - 1),
  variances across tokens, per output unit, averaged over units;
- z_s = |sum s_k| / (sqrt(D) sigma_s), z_n = |sum n_k| / (sqrt(D) sigma_s) (Eq. 2);
- the SNR Eq. 4 predicts from rho_s: (D sigma_s^2 (1 + (D-1) rho_s) + mu_S^2) / (D sigma_n^2 + mu_N^2).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..quant.gemm import RECIPES
from ..quant.nvfp4 import fake_quantize

__all__ = ["db", "product_stats", "linear_snr"]


def db(num: float, den: float) -> float:
    return float("inf") if den <= 0 else 10.0 * math.log10(max(num, 1e-300) / den)


def product_stats(s: torch.Tensor, n: torch.Tensor) -> dict[str, float]:
    """``s`` and ``n`` shaped (tokens, units, D): signal products and their quantisation noise."""
    s, n = s.double(), n.double()
    d = s.shape[-1]
    S, N = s.sum(-1), n.sum(-1)  # (tokens, units)
    var_sk = s.var(0, unbiased=False)  # (units, D) across tokens
    var_nk = n.var(0, unbiased=False)
    rho_s = ((S.var(0, unbiased=False) / var_sk.sum(-1).clamp(min=1e-300) - 1) / (d - 1))
    rho_n = ((N.var(0, unbiased=False) / var_nk.sum(-1).clamp(min=1e-300) - 1) / (d - 1))
    sigma_s = s.std(-1, unbiased=True).clamp(min=1e-300)  # over k, per dot product
    z_s = (S.abs() / (math.sqrt(d) * sigma_s)).mean()
    z_n = (N.abs() / (math.sqrt(d) * sigma_s)).mean()
    sig2_s, sig2_n = var_sk.mean(-1), var_nk.mean(-1)  # (units,)
    mu_S, mu_N = S.mean(0), N.mean(0)
    pred_num = (d * sig2_s * (1 + (d - 1) * rho_s) + mu_S**2).sum()
    pred_den = (d * sig2_n + mu_N**2).sum()
    return {
        "snr_products_db": db(float(s.pow(2).sum()), float(n.pow(2).sum())),
        "snr_dot_db": db(float(S.pow(2).sum()), float(N.pow(2).sum())),
        "snr_eq4_db": db(float(pred_num), float(pred_den)),
        "rho_s": float(rho_s.mean()),
        "rho_n": float(rho_n.mean()),
        "z_s": float(z_s),
        "z_n": float(z_n),
        "D": d,
    }


def linear_snr(x: torch.Tensor, w: torch.Tensor, recipe: str = "te", tokens: int = 256,
               units: int = 64, seed: int = 0) -> dict[str, float]:
    """NVFP4 forward quantisation of ``x`` (tokens, K) and ``w`` (N, K) as the recipe does it."""
    r = RECIPES[recipe]
    x2 = x.detach().reshape(-1, x.shape[-1]).float()
    w = w.detach().float()
    xq = fake_quantize(x2, per_tensor=r.per_tensor_forward)
    wq = fake_quantize(w, block_2d=r.weight_2d, per_tensor=r.per_tensor_forward)
    g = torch.Generator().manual_seed(seed)
    ti = torch.randperm(x2.shape[0], generator=g)[:tokens]
    ui = torch.randperm(w.shape[0], generator=g)[:units]
    s = x2[ti][:, None, :] * w[ui][None, :, :]
    sq = xq[ti][:, None, :] * wq[ui][None, :, :]
    out = product_stats(s, sq - s)
    out["snr_weights_db"] = db(float(w.double().pow(2).sum()), float((w - wq).double().pow(2).sum()))
    out["snr_activations_db"] = db(float(x2.double().pow(2).sum()), float((x2 - xq).double().pow(2).sum()))
    out["averaging_gain_db"] = out["snr_dot_db"] - out["snr_products_db"]
    return out


def layer_rows(linears: list[Any], values: Any, recipe: str) -> list[dict[str, Any]]:
    from ..fxutil import base_name, module_path

    rows = []
    for node in linears:
        if base_name(node) == "addmm":
            x, w = values.get(node.args[1]), values.get(node.args[2])
            w = w.t() if isinstance(w, torch.Tensor) else w
        else:
            x, w = values.get(node.args[0]), values.get(node.args[1])
        if not (isinstance(x, torch.Tensor) and isinstance(w, torch.Tensor) and w.dim() == 2):
            continue
        row = {"module": module_path(node) or "<root>", "node": node.name}
        row.update(linear_snr(x, w, recipe))
        rows.append(row)
    return rows
