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

# the models use them from here; rewrite directories written before they moved import them here too
from unitcheck.canonical import (  # noqa: F401
    CANONICAL_EPS,
    canonical,
    canonical_gelu,
    orthogonal,
    residual_update,
)


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
