"""LLaMA-style transformer: RMSNorm, SwiGLU MLP, rotary positions, untied head.

``qk_norm=True`` adds a per-head RMSNorm (with gains) on queries and keys (see ``qknorm``).
unitcheck reports, for 2 layers, 9 violations: per layer the attention temperature, the SwiGLU
gate input and both residual adds, and the unitful logits.

References: LLaMA (Touvron et al. 2023); nanoGPT's layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .layers import RMSNorm, Rotary, build_lm, check_config, init_gpt_style, lm_output


@dataclass
class LlamaConfig:
    block_size: int = 64
    vocab_size: int = 65
    n_layer: int = 2
    n_head: int = 4
    n_kv_head: int = 4
    n_embd: int = 64
    hidden: int = 0  # 0: 8/3 n_embd rounded up to a multiple of 16
    norm_eps: float = 1e-6
    qk_norm: bool = False

    def __post_init__(self) -> None:
        check_config(self, rope=True)

    def ffn_dim(self) -> int:
        return self.hidden or 16 * ((8 * self.n_embd // 3 + 15) // 16)


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.n_head, self.n_kv_head = cfg.n_head, cfg.n_kv_head
        self.head_dim = cfg.n_embd // cfg.n_head
        self.q_proj = nn.Linear(cfg.n_embd, cfg.n_head * self.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.n_embd, cfg.n_kv_head * self.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.n_embd, cfg.n_kv_head * self.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.n_head * self.head_dim, cfg.n_embd, bias=False)
        self.rotary = Rotary(self.head_dim, cfg.block_size)
        if cfg.qk_norm:
            self.q_norm: nn.Module = RMSNorm(self.head_dim, cfg.norm_eps)
            self.k_norm: nn.Module = RMSNorm(self.head_dim, cfg.norm_eps)
        else:
            self.q_norm = self.k_norm = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.size()
        q = self.q_proj(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
        k = self.k_proj(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        q, k = self.rotary(self.q_norm(q)), self.rotary(self.k_norm(k))
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=self.n_kv_head != self.n_head
        )
        return self.o_proj(y.transpose(1, 2).reshape(B, T, -1))


class SwiGLU(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.n_embd, cfg.ffn_dim(), bias=False)
        self.up_proj = nn.Linear(cfg.n_embd, cfg.ffn_dim(), bias=False)
        self.down_proj = nn.Linear(cfg.ffn_dim(), cfg.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.mlp = SwiGLU(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        x = x + self.mlp(self.mlp_norm(x))
        return x


class Llama(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.layers = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.norm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        init_gpt_style(self, cfg.n_layer)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):  # type: ignore[no-untyped-def]
        x = self.embed(idx)  # (B, T, C)
        for layer in self.layers:
            x = layer(x)
        logits = self.lm_head(self.norm(x))
        return lm_output(logits, targets)


Config = LlamaConfig
Model = Llama


def build(batch: int = 2, seq: int | None = None, seed: int = 0, **overrides: object):  # type: ignore[no-untyped-def]
    return build_lm(Llama, LlamaConfig, batch, seq, seed, overrides)
