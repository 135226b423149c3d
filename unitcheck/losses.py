"""Unit-aware loss aggregation (seed 000): lambda_i = alpha_i / S_i with u(S_i) = u(L_i).

Each term is divided by a scale carrying its unit, so the sum is dimensionless and its balance
does not move when a physical or internal unit is rescaled; alpha_i (dimensionless) sets the task
preference.

>>> loss = unit_weighted({"pde": residual.pow(2).mean(), "bc": (u_b - g).pow(2).mean()},
...                      scales={"pde": f.pow(2).mean(), "bc": g.pow(2).mean()})   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

__all__ = ["unit_weighted", "mean_square_scale"]


def mean_square_scale(x: torch.Tensor, floor: float = 1e-12) -> torch.Tensor:
    """A detached scale with the unit of ``x``^2 (for mean-square losses of ``x``'s quantity)."""
    return x.detach().pow(2).mean().clamp(min=floor)


def unit_weighted(
    terms: Mapping[str, torch.Tensor],
    scales: Mapping[str, torch.Tensor | float],
    alphas: Mapping[str, float] | None = None,
) -> torch.Tensor:
    """sum_i alpha_i * L_i / S_i; every term needs a scale (a missing one is an error)."""
    missing = set(terms) - set(scales)
    if missing:
        raise ValueError(f"no unit scale for loss term(s): {', '.join(sorted(missing))}")
    total: torch.Tensor | None = None
    for name, value in terms.items():
        s = scales[name]
        s = s.detach() if isinstance(s, torch.Tensor) else torch.as_tensor(s, dtype=value.dtype)
        part = (alphas or {}).get(name, 1.0) * value / s
        total = part if total is None else total + part
    if total is None:
        raise ValueError("no loss terms")
    return total
