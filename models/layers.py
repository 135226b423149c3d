"""Small layers shared by the reference models: the canonicaliser C, RMSNorm, rotary tables.

References: seed 000 (Neural Dimensional Analysis; C and the orthogonalised residual update),
LLaMA (RMSNorm, RoPE), nGPT (hypersphere normalisation).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

CANONICAL_EPS = 1e-6
"""The canonicaliser's floor eps_x, shared by models/gct and the GCT rewrite."""


class _Canonical(torch.autograd.Function):
    """C with a hand-written backward: dx = r (g - y <g, y> / d), two passes over memory instead
    of the half-dozen autograd spends on the decomposed formula (GCT applies C 7 times a layer)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, eps: float) -> torch.Tensor:  # type: ignore[no-untyped-def,override]
        d = x.size(-1)
        r = torch.rsqrt(torch.linalg.vector_norm(x, dim=-1, keepdim=True).square() / d + eps)
        y = x * r
        ctx.save_for_backward(y, r)
        return y

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[no-untyped-def,override]
        y, r = ctx.saved_tensors
        dot = torch.linalg.vecdot(g, y, dim=-1).unsqueeze(-1) / y.size(-1)
        return torch.addcmul(g, y, dot, value=-1.0) * r, None


def _tracing() -> bool:
    fx_tracing = getattr(torch.fx._symbolic_trace, "is_fx_symbolic_tracing", None)
    return bool(torch.compiler.is_compiling() or torch.compiler.is_exporting()
                or (fx_tracing is not None and fx_tracing()))


def canonical(x: torch.Tensor, eps: float = CANONICAL_EPS) -> torch.Tensor:
    """C(x) = x / sqrt(RMS(x)^2 + eps) over the last dimension: dimensionless for any unit of x.

    Traced graphs see RMSNorm without a gain (the same function); eager training with autograd
    uses the fused backward."""
    if not _tracing() and x.requires_grad:
        return _Canonical.apply(x, eps)  # type: ignore[no-any-return]
    return F.rms_norm(x, (x.size(-1),), eps=eps)


class _Orthogonal(torch.autograd.Function):
    """P_perp_h a with a hand-written backward (c = <a,h>/<h,h>, t = <g,h>/<h,h>):
    d/da = g - t h,  d/dh = -c g - t (a - 2 c h)."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, h: torch.Tensor) -> torch.Tensor:  # type: ignore[no-untyped-def,override]
        n = torch.linalg.vecdot(h, h, dim=-1).unsqueeze(-1)
        c = torch.linalg.vecdot(a, h, dim=-1).unsqueeze(-1) / n
        ctx.save_for_backward(a, h, c, n)
        return torch.addcmul(a, c, h, value=-1.0)

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[no-untyped-def,override]
        a, h, c, n = ctx.saved_tensors
        t = torch.linalg.vecdot(g, h, dim=-1).unsqueeze(-1) / n
        ga = torch.addcmul(g, t, h, value=-1.0)
        gh = torch.addcmul(-c * g, t, torch.addcmul(a, c, h, value=-2.0), value=-1.0)
        return ga, gh


def orthogonal(a: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """P_perp_h a = a - <a, h> / ||h||^2 h, per token: the update's component off the stream."""
    if not _tracing() and (a.requires_grad or h.requires_grad):
        return _Orthogonal.apply(a, h)  # type: ignore[no-any-return]
    return a - (a * h).sum(-1, keepdim=True) / (h * h).sum(-1, keepdim=True) * h


def justnorm(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """nGPT's projection onto the unit hypersphere."""
    return x / x.norm(p=2, dim=dim, keepdim=True)


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight (LLaMA)."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Rotary(nn.Module):
    """Rotary position tables as non-persistent buffers (fixed, hence dimensionless)."""

    cos: torch.Tensor
    sin: torch.Tensor

    def __init__(self, head_dim: int, max_len: int, base: float = 10000.0) -> None:
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        t = torch.arange(max_len, dtype=torch.float32)
        freqs = torch.outer(t, inv_freq)  # (T, hs/2)
        self.register_buffer("cos", freqs.cos(), persistent=False)
        self.register_buffer("sin", freqs.sin(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Rotate pairs of x: (B, nh, T, hs)."""
        T = x.size(-2)
        cos, sin = self.cos[:T], self.sin[:T]  # (T, hs/2)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        y1 = x1 * cos - x2 * sin
        y2 = x1 * sin + x2 * cos
        return torch.stack((y1, y2), dim=-1).flatten(-2)


def check_config(cfg: Any, rope: bool = False, **choices: tuple[str, ...]) -> None:
    """Reject a config the model cannot be built from, with the field to fix (before any shape
    error deep inside a forward pass)."""
    for name in ("block_size", "vocab_size", "n_layer", "n_head", "n_embd", "n_kv_head", "image_size", "patch_size"):
        value = getattr(cfg, name, None)
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if cfg.n_embd % cfg.n_head:
        raise ValueError(f"n_embd ({cfg.n_embd}) must be a multiple of n_head ({cfg.n_head})")
    if rope and (cfg.n_embd // cfg.n_head) % 2:
        raise ValueError(f"rotary embeddings need an even head size, got n_embd/n_head = {cfg.n_embd // cfg.n_head}")
    kv = getattr(cfg, "n_kv_head", None)
    if kv is not None and cfg.n_head % kv:
        raise ValueError(f"n_head ({cfg.n_head}) must be a multiple of n_kv_head ({kv})")
    for name, allowed in choices.items():
        if getattr(cfg, name) not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {getattr(cfg, name)!r}")


def causal_lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def lm_output(logits: torch.Tensor, targets: torch.Tensor | None):  # type: ignore[no-untyped-def]
    """What every language model here returns: logits, or ``(logits, loss)`` given targets."""
    return logits if targets is None else (logits, causal_lm_loss(logits, targets))


def build_lm(model_cls: Any, config_cls: Any, batch: int, seq: int | None, seed: int,
             overrides: dict[str, object]) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """A language model at its default size (seeded) and an example batch ``(idx, targets)``."""
    torch.manual_seed(seed)
    cfg = config_cls(**overrides)
    return model_cls(cfg), example_batch(cfg.vocab_size, batch, seq or min(32, cfg.block_size), seed)


def example_batch(vocab_size: int, batch: int, seq: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, vocab_size, (batch, seq + 1), generator=g)
    return idx[:, :-1].contiguous(), idx[:, 1:].contiguous()


def init_gpt_style(module: nn.Module, n_layer: int) -> None:
    """nanoGPT's init: N(0, 0.02), residual projections scaled by 1/sqrt(2L)."""
    for name, p in module.named_parameters():
        if p.dim() >= 2:
            std = 0.02 / math.sqrt(2 * n_layer) if name.endswith(("c_proj.weight", "o_proj.weight", "down_proj.weight")) else 0.02
            nn.init.normal_(p, mean=0.0, std=std)
        elif name.endswith(".bias"):
            nn.init.zeros_(p)
