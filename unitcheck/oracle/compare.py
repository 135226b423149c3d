"""The numerics of "agrees with the scaling law": elementwise closeness, proportionality, and the
float64 rounding floor of values that are zero in exact arithmetic."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..fxutil import float_tensors

__all__ = ["RTOL", "EXTREME", "ROUNDOFF", "close", "compare_tree", "ratio_varies", "rounding_noise",
           "rounding_bounds"]

RTOL = 1e-6
EXTREME = 1e30
# relative to the loss: far above float64 rounding (~1e-16, but a gradient that cancels to zero
# over thousands of terms keeps their rounding: xLSTM's stabiliser, 2.8e-12 of the loss), far
# below any real effect
ROUNDOFF = 1e-10


def _real64(t: torch.Tensor) -> torch.Tensor:
    """A tensor as float64, a complex one as its (real, imaginary) pairs: a cast to float would
    drop the imaginary part, and with it half of what is being compared."""
    t = t.detach()
    return torch.view_as_real(t.resolve_conj()).double() if t.is_complex() else t.double()


def close(actual: torch.Tensor, expected: torch.Tensor, rtol: float = RTOL, atol: float = 0.0) -> tuple[bool, str]:
    """Elementwise equality up to rtol times the tensor's scale; extreme values (masks) agree when
    both are extreme with the same sign."""
    a, e = _real64(actual), _real64(expected)
    if a.shape != e.shape:
        return False, f"shape {tuple(a.shape)} vs {tuple(e.shape)}"
    ext_a = ~torch.isfinite(a) | (a.abs() >= EXTREME)
    ext_e = ~torch.isfinite(e) | (e.abs() >= EXTREME)
    if not torch.equal(ext_a, ext_e):
        return False, "extreme (masked) entries differ"
    if ext_a.any():
        sa, se = torch.sign(a[ext_a]), torch.sign(e[ext_e])
        nan_a, nan_e = torch.isnan(a[ext_a]), torch.isnan(e[ext_e])
        if not (torch.equal(nan_a, nan_e) and torch.equal(sa[~nan_a], se[~nan_e])):
            return False, "extreme entries differ in sign"
    fin = ~ext_e
    if not fin.any():
        return True, ""
    af, ef = a[fin], e[fin]
    scale = float(ef.abs().max())
    err = float((af - ef).abs().max())
    tol = rtol * scale + atol + 1e-300
    if err <= tol:
        return True, ""
    return False, f"max abs error {err:.3g} > {tol:.3g} (scale {scale:.3g})"


def compare_tree(actual: Any, expected: Any, atol: list[float] | None = None) -> tuple[bool, str]:
    """:func:`close` over every float tensor of two values of the same structure."""
    acts, exps = float_tensors(actual), float_tensors(expected)
    if len(acts) != len(exps):
        return False, "output structure differs"
    for i, (a, e) in enumerate(zip(acts, exps)):
        ok, why = close(a, e, atol=atol[i] if atol else 0.0)
        if not ok:
            return False, why
    return True, ""


def ratio_varies(scaled: torch.Tensor, base: torch.Tensor) -> bool:
    """No single factor c gives scaled = c * base: the least-squares residual is not rounding
    (a non-zero output from a zero one counts: a consistent op maps 0 to 0)."""
    a, b = _real64(scaled).reshape(-1), _real64(base).reshape(-1)
    ok = torch.isfinite(a) & torch.isfinite(b) & (b.abs() < EXTREME) & (a.abs() < EXTREME)
    if not ok.any():
        return False
    a, b = a[ok], b[ok]
    na, nb = float(a.norm()), float(b.norm())
    if na == 0.0:
        return False
    if nb <= 1e-12 * na:
        return True
    c = float(a @ b) / (nb * nb)
    return float((a - c * b).norm()) > 1e-6 * na


def rounding_bounds(result: Any, rerun: Callable[[Callable[[torch.Tensor], torch.Tensor]], Any]) -> list[float] | None:
    """float64 rounding in a node's outputs, in each output's own unit. A value that is zero in
    exact arithmetic (the mean of centred data) is rounding noise that follows no scaling law.
    Two bounds, the larger wins: the node on the absolute values of its inputs (the size of the
    terms that cancelled) times 1e4 eps64, and the same call in float32, |y32 - y64| times
    1e3 eps64/eps32 (which alone fails when float32 happens to cancel exactly). ``rerun(convert)``
    reruns the node with ``convert`` applied to every float input. None when neither can run."""
    high = float_tensors(result)
    eps = torch.finfo(torch.float64).eps
    bounds: list[list[float]] = []
    for convert, factor in ((torch.abs, 1e4 * eps),
                            (lambda t: t.to(torch.float32), 1e3 * eps / torch.finfo(torch.float32).eps)):
        try:
            outs = float_tensors(rerun(convert))
        except Exception:  # a module with float64 weights, an op without float32 support
            continue
        if len(outs) != len(high):
            continue
        sizes = []
        for o, h in zip(outs, high):
            if o.shape != h.shape or not o.numel():
                sizes.append(0.0)
                continue
            r = _real64(o) if convert is torch.abs else _real64(o) - _real64(h)
            sizes.append(factor * float(r.abs().max()))
        bounds.append(sizes)
    if not bounds:
        return None
    return [max(b[i] for b in bounds) for i in range(len(high))]


def rounding_noise(grad: torch.Tensor, value: Any, loss_scale: float) -> bool:
    """A gradient whose first-order effect on the loss (|grad| |value|) is below float64 rounding
    of the loss is zero in exact arithmetic (e.g. d/d rms of x / rms(x) fed to a normaliser):
    it carries no scaling law to check."""
    if not isinstance(value, torch.Tensor):
        return False
    if not grad.numel() or not value.numel():
        return True  # an empty tensor carries nothing, hence nothing to check
    effect = float(grad.detach().abs().max()) * float(value.detach().abs().max())
    return effect <= ROUNDOFF * loss_scale
