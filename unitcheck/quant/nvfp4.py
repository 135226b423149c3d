"""NVFP4 (SPEC 9): E2M1 elements, one E4M3 scale per 16 elements, an FP32 per-tensor scale.

Operation order follows Transformer Engine's reference quantizer, so that results agree bit for
bit with it:

    S     = min(448 * 6 / global_amax, fp32_max), 1 when that is 0   (global_amax := 1 when
                                                                      per-tensor scaling is off)
    s     = e4m3(clamp(block_amax * (S * (1/6)), max=448))           (RNE into float8_e4m3fn)
    enc   = min(1 / (float(s) * (1/S)), fp32_max)
    q     = round_E2M1(clamp(x * enc, -6, 6))                        (RNE; or stochastic)
    x_hat = q * float(s) * (1/S)

Round-to-nearest-even on the E2M1 grid is arithmetic: the grid has step 1/2 below 2, 1 below 4
and 2 up to 6, and ``torch.round`` rounds half to even, which is exactly the tie rule
(0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4).

>>> q = quantize(torch.randn(4, 32))
>>> x_hat = dequantize(q)
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = [
    "NVFP4Tensor", "quantize", "dequantize", "fake_quantize", "round_e2m1", "hadamard_matrix",
    "hadamard", "inverse_hadamard", "E2M1_GRID", "FP4_MAX", "E4M3_MAX", "BLOCK", "snr_db",
    "fake_quantize_fast",
]

FP4_MAX = 6.0
E4M3_MAX = 448.0
BLOCK = 16
FP32_MAX = torch.finfo(torch.float32).max
E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# Transformer Engine's fixed sign vector for the wgrad random Hadamard transform
_RHT_SIGNS = (1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1)


def round_e2m1(v: torch.Tensor, stochastic: bool = False, generator: torch.Generator | None = None) -> torch.Tensor:
    """Round values already clamped to [-6, 6] onto the E2M1 grid (RNE, or unbiased stochastic)."""
    a = v.abs()
    step = torch.where(a < 2, 0.5, torch.where(a < 4, 1.0, 2.0)).to(v.dtype)
    if stochastic:
        lo = torch.floor(a / step) * step
        u = torch.rand(v.shape, generator=generator, dtype=torch.float32, device=v.device).to(v.dtype)
        q = lo + step * (u < (a - lo) / step).to(v.dtype)
        q = torch.clamp(q, max=FP4_MAX)
    else:
        q = torch.round(a / step) * step
    return torch.copysign(q, v)


def hadamard_matrix(size: int = BLOCK, signs: bool = True, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Sylvester Hadamard scaled by 1/sqrt(size), rows signed by TE's fixed vector: orthogonal."""
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < size:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    if signs:
        h = torch.tensor(_RHT_SIGNS[:size], dtype=torch.float64)[:, None] * h
    return (h / size**0.5).to(dtype)


def hadamard(x: torch.Tensor) -> torch.Tensor:
    """Tile-wise transform along the last dimension (length a multiple of 16)."""
    h = hadamard_matrix(BLOCK, dtype=x.dtype).to(x.device)
    return (x.reshape(-1, BLOCK) @ h).reshape(x.shape)


def inverse_hadamard(x: torch.Tensor) -> torch.Tensor:
    h = hadamard_matrix(BLOCK, dtype=x.dtype).to(x.device)
    return (x.reshape(-1, BLOCK) @ h.t()).reshape(x.shape)


@dataclass
class NVFP4Tensor:
    """Codes (one E2M1 value per element, as float32 grid values), E4M3 block scales, and the
    per-tensor encode scale S; ``shape`` and ``dtype`` of the original input."""

    values: torch.Tensor  # E2M1 grid values, shape (rows, cols) padded to the block layout
    scales: torch.Tensor  # float8_e4m3fn, one per block
    global_scale: torch.Tensor  # float32 scalar S
    shape: tuple[int, ...]
    dtype: torch.dtype
    block_2d: bool = False
    hadamard: bool = False
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def codes(self) -> torch.Tensor:
        """4-bit codes 0..15 (sign in bit 3, as in TE's fp4x2 packing before pairing)."""
        mag = self.values.abs()
        idx = torch.bucketize(mag, torch.tensor(E2M1_GRID, device=mag.device))
        return (idx + 8 * torch.signbit(self.values).to(idx.dtype)).to(torch.uint8)


def _as_2d(x: torch.Tensor, block_2d: bool) -> tuple[torch.Tensor, tuple[int, ...]]:
    shape = tuple(x.shape)
    cols = shape[-1] if x.dim() else 1
    x2 = x.reshape(-1, cols)
    pad_c = (-cols) % BLOCK
    pad_r = (-x2.shape[0]) % BLOCK if block_2d else 0
    if pad_c or pad_r:
        x2 = torch.nn.functional.pad(x2, (0, pad_c, 0, pad_r))
    return x2, shape


def _global_scale(x: torch.Tensor, per_tensor: bool) -> torch.Tensor:
    if not per_tensor:
        amax = torch.ones((), dtype=torch.float32, device=x.device)
    else:
        amax = x.abs().amax().to(torch.float32)
    s = torch.clamp(torch.tensor(E4M3_MAX * FP4_MAX, dtype=torch.float32, device=x.device) / amax, max=FP32_MAX)
    return torch.where(s == 0, torch.ones_like(s), s)


def _block_amax(x2: torch.Tensor, block_2d: bool) -> torch.Tensor:
    r, c = x2.shape
    if block_2d:
        t = x2.abs().reshape(r // BLOCK, BLOCK, c // BLOCK, BLOCK).amax(dim=(1, 3))
        return t.repeat_interleave(BLOCK, dim=0).unsqueeze(-1)  # (r, c/16, 1)
    return x2.abs().reshape(r, c // BLOCK, BLOCK).amax(dim=-1, keepdim=True)


def quantize(
    x: torch.Tensor,
    *,
    block_2d: bool = False,
    per_tensor: bool = True,
    stochastic: bool = False,
    hadamard_transform: bool = False,
    generator: torch.Generator | None = None,
) -> NVFP4Tensor:
    """Quantize along the last dimension (16-element blocks, or 16x16 tiles with ``block_2d``)."""
    if not x.is_floating_point():
        raise TypeError(f"NVFP4 quantizes floating-point tensors, got {x.dtype}")
    x2, shape = _as_2d(x.detach(), block_2d)
    x2 = x2.to(torch.float32)
    if hadamard_transform:
        x2 = hadamard(x2)
    S = _global_scale(x2, per_tensor)
    r, c = x2.shape
    amax = _block_amax(x2, block_2d)
    mult = S * (1.0 / FP4_MAX)
    dec = torch.clamp(torch.clamp(amax * mult, max=FP32_MAX), -E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    enc = torch.clamp(1.0 / (dec.to(torch.float32) * (1.0 / S)), max=FP32_MAX)
    scaled = torch.clamp(x2.reshape(r, c // BLOCK, BLOCK) * enc, -FP4_MAX, FP4_MAX)
    values = round_e2m1(scaled, stochastic=stochastic, generator=generator).reshape(r, c)
    return NVFP4Tensor(values, dec.squeeze(-1), S, shape, x.dtype, block_2d, hadamard_transform)


def dequantize(q: NVFP4Tensor, undo_hadamard: bool = True) -> torch.Tensor:
    r, c = q.values.shape
    scale = q.scales.to(torch.float32).unsqueeze(-1) * (1.0 / q.global_scale)
    x2 = (q.values.reshape(r, c // BLOCK, BLOCK) * scale).reshape(r, c)
    if q.hadamard and undo_hadamard:
        x2 = inverse_hadamard(x2)
    rows = 1
    for s in q.shape[:-1]:
        rows *= s
    cols = q.shape[-1] if q.shape else 1
    return x2[:rows, :cols].reshape(q.shape).to(q.dtype)


def fake_quantize(
    x: torch.Tensor,
    *,
    block_2d: bool = False,
    per_tensor: bool = True,
    stochastic: bool = False,
    hadamard_transform: bool = False,
    undo_hadamard: bool = True,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Quantize then dequantize (same shape and dtype as ``x``)."""
    q = quantize(x, block_2d=block_2d, per_tensor=per_tensor, stochastic=stochastic,
                 hadamard_transform=hadamard_transform, generator=generator)
    return dequantize(q, undo_hadamard=undo_hadamard)


def _core(x3: torch.Tensor, amax: torch.Tensor, S: torch.Tensor, u: torch.Tensor | None) -> torch.Tensor:
    """Scale, round and decode blocks ``x3`` (rows, blocks, 16) with block amax ``amax``."""
    dec = torch.clamp(torch.clamp(amax * (S * (1.0 / FP4_MAX)), max=FP32_MAX), -E4M3_MAX, E4M3_MAX)
    dec = dec.to(torch.float8_e4m3fn).to(torch.float32)
    enc = torch.clamp(1.0 / (dec * (1.0 / S)), max=FP32_MAX)
    v = torch.clamp(x3 * enc, -FP4_MAX, FP4_MAX)
    a = v.abs()
    step = torch.where(a < 2, 0.5, torch.where(a < 4, 1.0, 2.0))
    if u is None:
        q = torch.round(a / step) * step
    else:
        lo = torch.floor(a / step) * step
        q = torch.clamp(lo + step * (u < (a - lo) / step).to(a.dtype), max=FP4_MAX)
    return torch.copysign(q, v) * (dec * (1.0 / S))


def _core_rows(x3: torch.Tensor, per_tensor: bool, u: torch.Tensor | None) -> torch.Tensor:
    """1x16 blocks: the amax reductions fuse with the rest."""
    S = _global_scale(x3, per_tensor)
    return _core(x3, x3.abs().amax(dim=-1, keepdim=True), S, u)


_COMPILED: dict[str, Any] = {}


def _compiled(fn: Any) -> Any:
    key = fn.__name__
    if key not in _COMPILED:
        _COMPILED[key] = fn
        if os.environ.get("UNITCHECK_NVFP4_COMPILE", "1") != "0":
            with contextlib.suppress(Exception):  # no compiler on this platform: stay eager
                _COMPILED[key] = torch.compile(fn, dynamic=True)
    return _COMPILED[key]


def _call(fn: Any, *args: Any) -> torch.Tensor:
    try:
        return _compiled(fn)(*args)  # type: ignore[no-any-return]
    except Exception:  # a backend failure: run eagerly from now on
        _COMPILED[fn.__name__] = fn
        return fn(*args)  # type: ignore[no-any-return]


def fake_quantize_fast(
    x: torch.Tensor, *, block_2d: bool = False, per_tensor: bool = True, stochastic: bool = False,
    hadamard_transform: bool = False, generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``fake_quantize`` with the elementwise core compiled by ``torch.compile`` (two graphs:
    round-to-nearest and stochastic; dynamic shapes). Padding, the Hadamard transform and the
    amax reductions run eagerly. Results stay in the Hadamard domain when ``hadamard_transform``
    is set (the GEMM that consumes them cancels it). ``UNITCHECK_NVFP4_COMPILE=0`` disables
    compilation; it also falls back to eager where compilation fails."""
    x2, shape = _as_2d(x.detach(), block_2d)
    x2 = x2.to(torch.float32)
    if hadamard_transform:
        x2 = hadamard(x2)
    r, c = x2.shape
    x3 = x2.reshape(r, c // BLOCK, BLOCK)
    u = torch.rand(x3.shape, generator=generator, device=x.device) if stochastic else None
    if block_2d:
        out = _call(_core, x3, _block_amax(x2, True), _global_scale(x2, per_tensor), u)
    else:
        out = _call(_core_rows, x3, per_tensor, u)
    rows = x.numel() // shape[-1] if x.dim() else 1
    return out.reshape(r, c)[:rows, : shape[-1] if x.dim() else 1].reshape(shape).to(x.dtype)


def snr_db(x: torch.Tensor, x_hat: torch.Tensor) -> float:
    """10 log10(||x||^2 / ||x - x_hat||^2) (seed 001, Eq. 1)."""
    num = float(x.double().pow(2).sum())
    den = float((x.double() - x_hat.double()).pow(2).sum())
    return float("inf") if den == 0 else 10.0 * torch.log10(torch.tensor(num / den)).item()
