"""nGPT: the normalised transformer, with hidden states and weights on the unit hypersphere.

Follows NVIDIA's reference: no norm layers; q and k projected onto the sphere and scaled by
s_qk; softmax scale sqrt(d_h); each block's output reaches the stream by an eigen-learning-rate
interpolation h <- norm(h + alpha (norm(h_A) - h)); MLP scaled by s_u, s_v sqrt(d); logits scaled
by s_z. Every weight matrix is re-normalised after each optimiser step (``normalize_weights``), so
its norm is pinned and its unit is declared dimensionless, as are all the scalers.

Every GEMM input is a unit-norm row by default, as seed 001 (Appendix A) runs nGPT for NVFP4: the
attention output and the gated MLP activation are normalised before their output projections too.
``gemm_inputs="official"`` is NVIDIA's reference, which leaves those two raw (their elements then
exceed the unit bound a fixed NVFP4 scale assumes).

References: Loshchilov et al. 2024, nGPT (arXiv:2410.01131); seed 001, Appendix A.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .layers import Rotary, build_lm, check_config, justnorm, lm_output, orthogonal


@dataclass
class NGPTConfig:
    block_size: int = 64
    vocab_size: int = 65
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    alpha_init: float = 0.05
    project: bool = False  # the GCT projection: the update's component off the stream only
    # "all": every GEMM input on the unit sphere (seed 001, Appendix A: "we normalize all inputs");
    # "official": NVIDIA's nGPT, which feeds the raw attention output and u * silu(v) to the two
    # output projections
    gemm_inputs: str = "all"

    def __post_init__(self) -> None:
        check_config(self, rope=True, gemm_inputs=("all", "official"))


class Block(nn.Module):
    # weights whose norm the optimiser pins, and the scalers nGPT defines as dimensionless
    __units__ = {
        "*.weight": "1",
        "attn_alpha": "1",
        "mlp_alpha": "1",
        "sqk": "1",
        "suv": "1",
    }

    def __init__(self, cfg: NGPTConfig) -> None:
        super().__init__()
        C, self.n_head = cfg.n_embd, cfg.n_head
        self.head_dim = C // cfg.n_head
        base = 1.0 / math.sqrt(C)
        self.query = nn.Linear(C, C, bias=False)
        self.key = nn.Linear(C, C, bias=False)
        self.value = nn.Linear(C, C, bias=False)
        self.att_c_proj = nn.Linear(C, C, bias=False)
        self.c_fc = nn.Linear(C, 2 * 4 * C, bias=False)
        self.mlp_c_proj = nn.Linear(4 * C, C, bias=False)
        self.rotary = Rotary(self.head_dim, cfg.block_size)
        self.alpha_scale = (cfg.alpha_init, base)  # (init value, init scaling)
        self.attn_alpha = nn.Parameter(base * torch.ones(C))
        self.mlp_alpha = nn.Parameter(base * torch.ones(C))
        self.sqk_scale = (1.0, base)
        self.sqk = nn.Parameter(base * torch.ones(C))
        self.suv = nn.Parameter(torch.ones(2 * 4 * C))
        self.sqrt_d = math.sqrt(C)
        self.project = cfg.project
        self.norm_all = cfg.gemm_inputs == "all"

    def _gemm_input(self, x: torch.Tensor) -> torch.Tensor:
        """Rows onto the sphere before the output projections (seed 001's variant). Exact in exact
        arithmetic: the projection is linear and its output is normalised again, so a per-row
        scale of its input cancels; it only bounds the operand NVFP4 sees (every element <= 1)."""
        return justnorm(x) if self.norm_all else x

    def _lr(self, alpha: torch.Tensor) -> torch.Tensor:
        value, scaling = self.alpha_scale
        return torch.abs(alpha * (value / scaling))

    def _target(self, update: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """nGPT interpolates towards norm(update); with the GCT projection, towards the part of
        the update orthogonal to the stream (seed 000: 'nGPT plus the GCT projection')."""
        return justnorm(orthogonal(update, h) if self.project else update)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        B, T, C = h.size()
        q = self.query(h).view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
        k = self.key(h).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        v = self.value(h).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        q, k = self.rotary(q), self.rotary(k)
        value, scaling = self.sqk_scale
        sqk = (self.sqk * (value / scaling)).view(1, self.n_head, 1, self.head_dim)
        q, k = sqk * justnorm(q), sqk * justnorm(k)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=math.sqrt(self.head_dim))
        h_att = self.att_c_proj(self._gemm_input(y.transpose(1, 2).contiguous().view(B, T, C)))
        a, b = justnorm(h), self._target(h_att, h)
        h = justnorm(a + self._lr(self.attn_alpha) * (b - a))

        uv = self.c_fc(h) * (self.suv * self.sqrt_d)
        u, v = uv.chunk(2, dim=-1)
        h_mlp = self.mlp_c_proj(self._gemm_input(u * F.silu(v)))
        a, b = justnorm(h), self._target(h_mlp, h)
        return justnorm(a + self._lr(self.mlp_alpha) * (b - a))


class Transformer(nn.Module):
    def __init__(self, cfg: NGPTConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.h = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])


class NGPT(nn.Module):
    __units__ = {"transformer.wte.weight": "1", "lm_head.weight": "1", "sz": "1"}

    def __init__(self, cfg: NGPTConfig) -> None:
        super().__init__()
        self.config = cfg
        self.transformer = Transformer(cfg)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        base = 1.0 / math.sqrt(cfg.n_embd)
        self.sz_scale = (1.0, base)
        self.sz = nn.Parameter(base * torch.ones(cfg.vocab_size))
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, mean=0.0, std=base)
        self.normalize_weights()

    def nvfp4_operand_norms(self) -> dict[str, tuple[str | None, str | None]]:
        """Every weight has unit rows or columns (each element at most 1) and every GEMM input is
        a unit-norm row, except the two output projections' in the official variant: the NVFP4
        ``matched`` recipe gives the declared ones a fixed scale of 1, the others per-tensor."""
        out: dict[str, tuple[str | None, str | None]] = {"lm_head": ("unit", "unit")}
        for i, b in enumerate(self.transformer.h):
            assert isinstance(b, Block)
            for name in ("query", "key", "value", "c_fc", "att_c_proj", "mlp_c_proj"):
                raw = name in ("att_c_proj", "mlp_c_proj") and not b.norm_all
                out[f"transformer.h.{i}.{name}"] = (None if raw else "unit", "unit")
        return out

    @torch.no_grad()
    def normalize_weights(self) -> None:
        """Project every weight matrix back onto the sphere along its embedding dimension."""
        self.transformer.wte.weight.copy_(justnorm(self.transformer.wte.weight, 1))
        self.lm_head.weight.copy_(justnorm(self.lm_head.weight, 1))
        for b in self.transformer.h:
            assert isinstance(b, Block)
            for lin in (b.query, b.key, b.value, b.c_fc):
                lin.weight.copy_(justnorm(lin.weight, 1))
            for lin in (b.att_c_proj, b.mlp_c_proj):
                lin.weight.copy_(justnorm(lin.weight, 0))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):  # type: ignore[no-untyped-def]
        h = self.transformer.wte(idx)  # (B, T, C), rows on the sphere
        for block in self.transformer.h:
            h = block(h)
        value, scaling = self.sz_scale
        logits = self.lm_head(h) * (self.sz * (value / scaling))
        return lm_output(logits, targets)


Config = NGPTConfig
Model = NGPT


def build(batch: int = 2, seq: int | None = None, seed: int = 0, **overrides: object):  # type: ignore[no-untyped-def]
    return build_lm(NGPT, NGPTConfig, batch, seq, seed, overrides)
