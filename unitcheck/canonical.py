"""The gauge-canonical building blocks of seed 000 as library functions: the canonicaliser C and
the orthogonal projection P_perp, each with a hand-written backward pass.

The GCT rewrite inserts calls to these functions and every generated ``model.py`` imports them,
so they live in the library, not in the reference models (which import them from here).
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.fx.traceback as fx_traceback
import torch.nn.functional as F
from torch import nn

from .compiled import call_compiled

__all__ = ["CANONICAL_EPS", "canonical", "canonical_gelu", "orthogonal", "residual_update", "CanonicalInput",
           "CanonicalOutput", "CanonicalLinear", "DimensionlessLinear"]

CANONICAL_EPS = 1e-6
"""The canonicaliser's floor eps_x, shared by models/gct and the GCT rewrite."""


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """<a, b> over the last dimension, kept: a product and a sum, about half the time of
    ``linalg.vecdot`` on CPU (measured at (32, 128, 128): 0.59 ms against 1.20 ms)."""
    return (a * b).sum(-1, keepdim=True)


def _sq(a: torch.Tensor) -> torch.Tensor:
    """<a, a> over the last dimension, kept: one reduction without a temporary."""
    return torch.linalg.vector_norm(a, dim=-1, keepdim=True).square()


def _canonical_forward(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """y = C(x) and the row sums <x, x>. Returning the sums, not a function of them, keeps the
    compiled kernel one loop over rows: inductor gives a row-wise output of its own a separate
    pass (0.72 ms against 0.85 ms at (32, 128, 512), one thread)."""
    ss = _dot(x, x)
    return x * _inverse_rms(ss, x.size(-1), eps), ss


def _inverse_rms(ss: torch.Tensor, d: int, eps: float) -> torch.Tensor:
    return torch.rsqrt(ss / d + eps)


def _canonical_backward(g: torch.Tensor, y: torch.Tensor, ss: torch.Tensor, eps: float) -> torch.Tensor:
    """dx = r (g - y <g, y> / d), r = 1 / sqrt(<x, x> / d + eps)."""
    r = _inverse_rms(ss, y.size(-1), eps)
    return torch.addcmul(g * r, y, _dot(g, y) * (r / y.size(-1)), value=-1.0)


class _RowKernel(torch.autograd.Function):
    """A row-wise function of x with a hand-written backward, one compiled kernel each way: the
    forward kernel returns the output and the row sums <x, x>; the backward kernel reads the
    gradient, what was kept (the output, or x where the backward recomputes from it) and the
    sums. Subclasses name their kernels in ``apply``."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, eps: float, kernels: tuple[Any, Any], keep_input: bool) -> torch.Tensor:  # type: ignore[no-untyped-def,override]
        y, ss = call_compiled(kernels[0], x, eps)
        ctx.save_for_backward(x if keep_input else y, ss)
        ctx.eps, ctx.backward_kernel = eps, kernels[1]
        return y  # type: ignore[no-any-return]

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[no-untyped-def,override]
        return call_compiled(ctx.backward_kernel, g, *ctx.saved_tensors, ctx.eps), None, None, None


class _Canonical(_RowKernel):
    """C: two passes over memory instead of the half-dozen autograd spends on the decomposed
    formula (GCT applies C 7 times a layer)."""

    @classmethod
    def apply(cls, x: torch.Tensor, eps: float) -> torch.Tensor:  # type: ignore[override]
        return super().apply(x, eps, (_canonical_forward, _canonical_backward), False)  # type: ignore[no-any-return]


def _scaled_forward(x: torch.Tensor, gain: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """gain * C(x), gain constant over each row, and the row sums <x, x>."""
    ss = _dot(x, x)
    return x * (_inverse_rms(ss, x.size(-1), eps) * gain), ss


def _scaled_backward(g: torch.Tensor, x: torch.Tensor, ss: torch.Tensor, gain: torch.Tensor,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """dx = gain r (g - y <g, y> / d) with y = C(x) = r x recomputed, and the gain's gradient per
    row, <g, y>: the sum C's backward computes anyway."""
    r = _inverse_rms(ss, x.size(-1), eps)
    y = x * r
    gy = _dot(g, y)
    return (gain * r) * (g - y * (gy / x.size(-1))), gy


class _ScaledCanonical(torch.autograd.Function):
    """gain * C(x) for a gain per row (GCT's per-head query gain): one compiled kernel each way,
    where C and a separate product made two passes forward and three back. It keeps x, not C(x):
    x is a view of a projection's output that attention keeps alive anyway (v is its other
    part), so the backward recomputes C(x) in the loop that reads it."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, gain: torch.Tensor, eps: float) -> torch.Tensor:  # type: ignore[no-untyped-def,override]
        y, ss = call_compiled(_scaled_forward, x, gain, eps)
        ctx.save_for_backward(x, ss, gain)
        ctx.eps = eps
        return y  # type: ignore[no-any-return]

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:  # type: ignore[no-untyped-def,override]
        x, ss, gain = ctx.saved_tensors
        gx, gy = call_compiled(_scaled_backward, g, x, ss, gain, ctx.eps)
        return gx, gy.sum_to_size(gain.shape), None


def _per_row(gain: torch.Tensor, x: torch.Tensor) -> bool:
    """A gain constant over the last axis that scales rows of x without broadcasting x wider
    (plain Python: ``torch.broadcast_shapes`` cost more than C's kernel call at a small size)."""
    g, rows = gain.shape, (*x.shape[:-1], 1)
    if len(g) > len(rows):
        return False
    return all(a == 1 or a == b for a, b in zip(reversed(g), reversed(rows)))


def _tracing() -> bool:
    fx_tracing = getattr(torch.fx._symbolic_trace, "is_fx_symbolic_tracing", None)
    return bool(torch.compiler.is_compiling() or torch.compiler.is_exporting()
                or (fx_tracing is not None and fx_tracing()))


_CALLS = itertools.count()
CALL_KEY = "unitcheck_call"  # node.meta["custom"]: which call made the node (see _marked)
OUTER_KEY = "unitcheck_outer"  # and the outermost marked call around it, (name, id), if nested
DIM_KEY = "unitcheck_dim"  # and the feature axis of a call over another axis than the last


def next_call_id() -> int:
    """A number no other marked call of this process has."""
    return next(_CALLS)


@contextlib.contextmanager
def _marked(name: str, dim: int = -1, eps: float = CANONICAL_EPS) -> Iterator[None]:
    """Nodes a capture records inside are marked as one call of ``name``: their traced formula
    is not the one eager autograd runs, so code generation writes the call back. A call inside
    another marked call (C inside the residual update) also records the outermost one, which
    code generation writes back first. A feature axis other than the last is recorded too, with
    eps (``DIM_KEY``): the formula moves the axis last and back, and the call is written with
    both."""
    around = fx_traceback.current_meta.get("custom") or {}
    mark: dict[str, object] = {CALL_KEY: name, "unitcheck_call_id": next_call_id()}
    if dim != -1:
        mark[DIM_KEY] = {"dim": dim, "eps": eps}
    if CALL_KEY in around:
        mark[OUTER_KEY] = around.get(OUTER_KEY) or (around[CALL_KEY], around["unitcheck_call_id"])
    with fx_traceback.annotate(mark):
        yield


def _last(dim: int, x: torch.Tensor) -> bool:
    return dim == -1 or dim == x.dim() - 1


def _moved(fn: Any, name: str, dim: int, xs: tuple[torch.Tensor, ...], *rest: Any) -> torch.Tensor:
    """``fn`` over the feature axis ``dim`` of each of ``xs``: moved last and back (a capture
    records one marked call)."""
    eps = rest[-1]
    with _marked(name, dim, eps) if _tracing() else contextlib.nullcontext():
        return fn(*(x.movedim(dim, -1) for x in xs), *rest).movedim(-1, dim)  # type: ignore[no-any-return]


def canonical(x: torch.Tensor, eps: float = CANONICAL_EPS, dim: int = -1,
              gain: torch.Tensor | None = None) -> torch.Tensor:
    """C(x) = x / sqrt(RMS(x)^2 + eps) over the feature axis ``dim`` (the last; the channels of
    a feature map, 1): dimensionless for any unit of x. With ``gain``, ``gain * C(x)``.

    Traced graphs see RMSNorm without a gain (the same function), over the feature axis moved
    last and back, and the product by ``gain`` after it; eager training with autograd uses the
    fused backward, for a gain constant over each row (one per head) in the same kernel."""
    if gain is not None:
        if not _last(dim, x):
            return canonical(x, eps, dim) * gain
        if _tracing():
            with _marked("canonical"):  # one call with its gain, which code generation writes back whole
                return canonical(x, eps) * gain
        if _per_row(gain, x) and torch.is_grad_enabled() and (x.requires_grad or gain.requires_grad):
            return _ScaledCanonical.apply(x, gain, eps)  # type: ignore[no-any-return]
        return canonical(x, eps) * gain
    if not _last(dim, x):
        return _moved(canonical, "canonical", dim, (x,), eps)
    if not _tracing():
        if x.requires_grad:
            return _Canonical.apply(x, eps)  # type: ignore[no-any-return]
        return F.rms_norm(x, (x.size(-1),), eps=eps)
    with _marked("canonical"):
        return F.rms_norm(x, (x.size(-1),), eps=eps)


def _gelu_forward(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """gelu(C(x)) and the row sums <x, x>."""
    ss = _dot(x, x)
    return F.gelu(x * _inverse_rms(ss, x.size(-1), eps)), ss


def _gelu_backward(g: torch.Tensor, x: torch.Tensor, ss: torch.Tensor, eps: float) -> torch.Tensor:
    """C's backward of g gelu'(y), y = C(x) recomputed; gelu'(y) = Phi(y) + y phi(y) (the exact,
    erf form F.gelu computes by default)."""
    y = x * _inverse_rms(ss, x.size(-1), eps)
    cdf = 0.5 * (1.0 + torch.erf(y * (1.0 / math.sqrt(2.0))))
    pdf = torch.exp(-0.5 * y * y) * (1.0 / math.sqrt(2.0 * math.pi))
    return _canonical_backward(g * (cdf + y * pdf), y, ss, eps)


class _CanonicalGelu(_RowKernel):
    """gelu(C(x)), GCT's MLP activation: C then gelu wrote and read the MLP's widest
    activations (4 x the stream) once more each way (measured at (32, 128, 512), one thread,
    forward and backward: 10.2 ms apart, 6.4 ms fused). It keeps x and recomputes C(x)."""

    @classmethod
    def apply(cls, x: torch.Tensor, eps: float) -> torch.Tensor:  # type: ignore[override]
        return super().apply(x, eps, (_gelu_forward, _gelu_backward), True)  # type: ignore[no-any-return]


def canonical_gelu(x: torch.Tensor, eps: float = CANONICAL_EPS) -> torch.Tensor:
    """gelu(C(x)) over the last axis: the same function as the two calls, which captures see
    (C then gelu, marked as one call of this function, which code generation writes back, so a
    regenerated model trains with the same kernel); eager training runs one fused kernel each
    way."""
    tracing = _tracing()
    if not tracing and torch.is_grad_enabled() and x.requires_grad:
        return _CanonicalGelu.apply(x, eps)  # type: ignore[no-any-return]
    with _marked("canonical_gelu") if tracing else contextlib.nullcontext():
        return F.gelu(canonical(x, eps))


class _Orthogonal(torch.autograd.Function):
    """P_perp_h a with a hand-written backward (n = <h,h> + eps, c = <a,h>/n, t = <g,h>/n):
    d/da = g - t h,  d/dh = -c g - t (a - 2 c h)."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, h: torch.Tensor, eps: float) -> torch.Tensor:  # type: ignore[no-untyped-def,override]
        n = _sq(h) + eps
        c = _dot(a, h) / n
        ctx.save_for_backward(a, h, c, n)
        return torch.addcmul(a, c, h, value=-1.0)

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:  # type: ignore[no-untyped-def,override]
        a, h, c, n = ctx.saved_tensors
        t = _dot(g, h) / n
        ga = torch.addcmul(g, t, h, value=-1.0)
        gh = torch.addcmul(-c * g, t, torch.addcmul(a, c, h, value=-2.0), value=-1.0)
        return ga, gh, None


def _projected(a: torch.Tensor, h: torch.Tensor, eps: float) -> torch.Tensor:
    return a - (a * h).sum(-1, keepdim=True) / ((h * h).sum(-1, keepdim=True) + eps) * h


def orthogonal(a: torch.Tensor, h: torch.Tensor, eps: float = CANONICAL_EPS, dim: int = -1) -> torch.Tensor:
    """P_perp_h a = a - <a, h> / (||h||^2 + eps) h, per token (per position of a feature map,
    over its channels ``dim``): the update's component off the stream. eps is a floor like
    C's: where the stream is exactly 0 (a zero padding row) the projection is the identity, not
    0/0; on a canonical stream (||h||^2 = d) it changes nothing a float can show."""
    if not _last(dim, a):
        return _moved(orthogonal, "orthogonal", dim, (a, h), eps)
    if not _tracing():
        if a.requires_grad or h.requires_grad:
            return _Orthogonal.apply(a, h, eps)  # type: ignore[no-any-return]
        return _projected(a, h, eps)
    with _marked("orthogonal"):
        return _projected(a, h, eps)


def _update_forward(h: torch.Tensor, u: torch.Tensor, alpha: torch.Tensor, eps: float) -> tuple[torch.Tensor, ...]:
    """y = C(h + alpha q), q = C(P_perp_h u), and the row sums the backward needs
    (<h, h>, <u, h>, <p, p>, <s, s>; q it recomputes): raw sums keep the kernel one loop over rows (see
    _canonical_forward; 0.45 ms against 0.73 ms at (32, 128, 128))."""
    d = h.size(-1)
    hh = _dot(h, h)
    uh = _dot(u, h)
    q, pp = _update_direction(h, u, hh, uh, eps)
    s = h + alpha * q
    ss = _dot(s, s)
    return s * _inverse_rms(ss, d, eps), hh, uh, pp, ss


def _update_direction(h: torch.Tensor, u: torch.Tensor, hh: torch.Tensor, uh: torch.Tensor,
                      eps: float, pp: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """q = C(P_perp_h u) and <p, p>; the backward recomputes q from h and u, which it reads
    anyway, rather than read a saved copy (a write and a read of the activations less a step:
    the kernels are memory-bound)."""
    p = u - uh / (hh + eps) * h
    pp = _dot(p, p) if pp is None else pp
    return p * _inverse_rms(pp, h.size(-1), eps), pp


def _update_backward(g: torch.Tensor, y: torch.Tensor, hh: torch.Tensor, uh: torch.Tensor,
                     pp: torch.Tensor, ss: torch.Tensor, h: torch.Tensor, u: torch.Tensor,
                     alpha: torch.Tensor, eps: float, rows: bool) -> tuple[torch.Tensor, ...]:
    """C's backward twice and P_perp's once (see _Canonical and _Orthogonal), chained. With
    ``rows`` (an alpha constant over the features) alpha's gradient comes as one sum per row,
    reduced in the same loop: no stream-sized product written and read back for it."""
    d = h.size(-1)
    q, _ = _update_direction(h, u, hh, uh, eps, pp)
    n = hh + eps
    c = uh / n
    gs = _inverse_rms(ss, d, eps) * (g - y * (_dot(g, y) / d))
    gq = alpha * gs
    gp = _inverse_rms(pp, d, eps) * (gq - q * (_dot(gq, q) / d))
    t = _dot(gp, h) / n
    gu = gp - t * h
    gh = gs - c * gp - t * (u - 2 * c * h)
    return gh, gu, _dot(gs, q) if rows else gs * q


class _ResidualUpdate(torch.autograd.Function):
    """C(h + alpha C(P_perp_h u)) as one compiled kernel each way, with the backward written out
    (an explicit backward keeps retain_graph and double calls working, which a compiled autograd
    graph with donated buffers refuses)."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, u: torch.Tensor, alpha: torch.Tensor, eps: float) -> torch.Tensor:  # type: ignore[no-untyped-def,override]
        y, *kept = call_compiled(_update_forward, h, u, alpha, eps)
        ctx.save_for_backward(y, *kept, h, u, alpha)
        ctx.eps = eps
        return y  # type: ignore[no-any-return]

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, None]:  # type: ignore[no-untyped-def,override]
        saved = ctx.saved_tensors
        alpha = saved[-1]
        rows = alpha.dim() == 0 or alpha.size(-1) == 1
        gh, gu, ga = call_compiled(_update_backward, g.contiguous(), *saved, ctx.eps, rows)
        return gh, gu, ga.sum_to_size(alpha.shape), None


def residual_update(h: torch.Tensor, u: torch.Tensor, alpha: torch.Tensor | float,
                    eps: float = CANONICAL_EPS, dim: int = -1) -> torch.Tensor:
    """GCT's residual update h <- C(h + alpha C(P_perp_h u)) (seed 000), over the feature axis
    ``dim``.

    The same function as the three calls it names; in eager training one compiled kernel each
    way (the three calls make about fifteen passes over the activations, GCT's main cost over a
    GPT step). Captures see the three calls, marked as one call of this function, which code
    generation writes back."""
    if not _last(dim, h):
        return _moved(lambda h, u, eps: residual_update(h, u, alpha, eps), "residual_update", dim, (h, u), eps)
    if _tracing():
        with _marked("residual_update"):
            return canonical(h + alpha * canonical(orthogonal(u, h, eps), eps), eps)
    a = alpha if isinstance(alpha, torch.Tensor) else torch.tensor(alpha, dtype=h.dtype, device=h.device)
    if not torch.is_grad_enabled() or not (h.requires_grad or u.requires_grad or a.requires_grad):
        return canonical(h + alpha * canonical(orthogonal(u, h, eps), eps), eps)
    return _ResidualUpdate.apply(h, u, a, eps)  # type: ignore[no-any-return]


# -- the rules as modules: for children of a module the generated code calls whole ------------------
# (unitcheck.rewrite.kept swaps them in; generated model.py files rebuild them by class)


class _Wrapper(nn.Module):
    """A child wrapped in place: the parent's code may still read the child's attributes."""

    def __init__(self, inner: nn.Module, eps: float = CANONICAL_EPS) -> None:
        super().__init__()
        self.inner = inner
        self.eps = eps

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            inner = self.__dict__.get("_modules", {}).get("inner")
            if inner is None or name.startswith("__"):  # half-built (a copy, an unpickling)
                raise
            return getattr(inner, name)


class CanonicalInput(_Wrapper):
    """``inner(C(x))``: an activation on canonical coordinates (GCT's activation rule)."""

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        return self.inner(canonical(x, self.eps), *args, **kwargs)


class CanonicalOutput(_Wrapper):
    """``C(inner(...))``: one part of a sum whose parts have different units (an expert's output)."""

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return canonical(self.inner(*args, **kwargs), self.eps)


class CanonicalLinear(nn.Linear):
    """``C(x W^T + b)``: CanonicalOutput for a Linear, keeping the Linear's parameter names."""

    eps: float = CANONICAL_EPS

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return canonical(super().forward(x), self.eps)


class DimensionlessLinear(nn.Linear):
    """``gain * C(x) . C(W)^T / sqrt(d) + b``: dimensionless logits (a router's), with a
    dimensionless gain beside the Linear's own parameters."""

    eps: float = CANONICAL_EPS
    gain: nn.Parameter

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = F.linear(canonical(x, self.eps), canonical(self.weight, self.eps))
        out = self.gain * scores / math.sqrt(self.in_features)
        return out if self.bias is None else out + self.bias
