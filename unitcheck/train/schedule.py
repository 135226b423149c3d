"""Learning-rate schedules as multipliers of the peak rate (step -> factor)."""

from __future__ import annotations

import math

from ..errors import UsageError

__all__ = ["lr_factor"]


def lr_factor(step: int, total: int, schedule: str, warmup: int, min_ratio: float, decay_fraction: float) -> float:
    """Linear warm-up, then cosine to ``min_ratio``, or WSD (stable, then linear decay over the
    last ``decay_fraction``), or constant."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    if schedule == "cosine":
        span = max(1, total - warmup)
        t = min(1.0, (step - warmup) / span)
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * t))
    if schedule == "wsd":
        decay_start = int(total * (1 - decay_fraction))
        if step < decay_start:
            return 1.0
        t = min(1.0, (step - decay_start) / max(1, total - decay_start))
        return 1.0 - (1 - min_ratio) * t
    raise UsageError(f"unknown schedule {schedule!r}")
