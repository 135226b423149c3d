"""Dynamic diagnostics (SPEC 8): UVI, stream scale, primal-dual products, NVFP4 dot-product SNR,
loss-landscape flatness and the radial fingerprint, measured on a small batch.

>>> report = unitcheck.diagnose.diagnose(model, (idx, targets))     # doctest: +SKIP
>>> report["kappa"][-1]["kappa"]                                     # doctest: +SKIP
1.0000004
"""

from __future__ import annotations

import time
from typing import Any

from torch import nn

__all__ = ["diagnose"]


def diagnose(
    model: nn.Module,
    inputs: Any,
    *,
    recipe: str = "te",
    flatness_alphas: tuple[float, ...] | None = None,
    fingerprint: bool = True,
    grads: bool = True,
) -> dict[str, Any]:
    """Every diagnostic on one batch; JSON-serialisable."""
    from .capture import capture
    from .flatness import ALPHAS, flatness
    from .snr import layer_rows
    from .uvi import kappa_scale, primal_dual, uvi_attn, uvi_res

    t0 = time.perf_counter()
    was = model.training
    model.eval()
    try:
        cap = capture(model, inputs, grads=grads)
        out: dict[str, Any] = {
            "uvi_res": uvi_res(cap),
            "uvi_attn": uvi_attn(cap),
            "kappa": kappa_scale(cap),
            "primal_dual": primal_dual(cap) if grads else [],
            "snr": layer_rows(cap.linears, cap.values, recipe),
            "loss": float(cap.loss.detach()) if cap.loss is not None else None,
            "recipe": recipe,
        }
        out["flatness"] = flatness(model, inputs, flatness_alphas or ALPHAS) if cap.loss is not None else []
        if fingerprint and cap.loss is not None:
            from ..oracle import OracleError
            from ..oracle import fingerprint as radial

            try:
                out["fingerprint"] = [r.to_json() for r in radial(model, inputs)]
            except OracleError as err:
                out["fingerprint_error"] = str(err)
    finally:
        model.train(was)
    out["seconds"] = time.perf_counter() - t0
    return out
