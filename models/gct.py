"""Gauge-Canonical Transformer (GCT): every block on RMS-canonical coordinates (seed 000).

- stream: h_0 = C(C(wte(idx)) + C(wpe(pos))) (each table canonicalised before the sum), or
  h_0 = C(wte(idx)) with rotary positions;
- block: h <- C(h + alpha_l C(P_perp_h a)), alpha_l dimensionless, initialised at 1/sqrt(2L);
  branches read h directly (it is already canonical);
- attention: q, k canonicalised per head, a dimensionless per-head gain (init 1), temperature
  sqrt(d_h);
- MLP: the nonlinearity input canonicalised, gelu(C(a)), or the normalised gate
  C(a) * sigmoid(C(a)) * up for ``mlp="swiglu"``;
- logits: gain * C(h_L) . C(W_E) / sqrt(d) with a dimensionless logit gain.

The dimensionless scalars (alpha_l, the per-head gains, the logit gain) are plain parameters by
default, so that ``unitcheck rewrite`` of a GPT reproduces this module parameter for parameter.
``scalars="scaled"`` stores them the way nGPT stores its scalers, value = s * (init / scale) with s
initialised at scale = 1/sqrt(d) (alpha_l = alpha0 * a, a = 1 at init): the same function at
initialisation, but AdamW's per-step change of s (about the learning rate) moves the value by
init / scale times as much, sqrt(d) for a gain. Without it the scalars barely move in a short
run (gains 0.93-1.09 after 200 steps at width 128), while nGPT's move at about sqrt(d) times the
base rate; the experiments compare the models with it on (issue 17) and keep it off as an ablation.

Parameter names follow ``models/gpt`` so that a GPT checkpoint maps onto it (``unitcheck rewrite``
reproduces this module from a GPT graph). The model lints with zero violations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .layers import (
    Rotary,
    build_lm,
    canonical,
    canonical_gelu,
    check_config,
    init_gpt_style,
    lm_output,
    residual_update,
)


@dataclass
class GCTConfig:
    block_size: int = 64
    vocab_size: int = 65
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    bias: bool = True
    pos: str = "learned"  # "learned" | "rope"
    mlp: str = "gelu"  # "gelu" | "swiglu"
    scalars: str = "plain"  # "plain" | "scaled" (nGPT's effective-rate form s * init / scale)

    def __post_init__(self) -> None:
        check_config(self, rope=self.pos == "rope", pos=("learned", "rope"), mlp=("gelu", "swiglu"),
                     scalars=("plain", "scaled"))


def scalar_scale(cfg: GCTConfig) -> float:
    """The stored value of a scalar at its initial value: 1 for plain parameters, 1/sqrt(d) in
    nGPT's form (the stored s meets value = s * init / scale)."""
    return 1.0 / math.sqrt(cfg.n_embd) if cfg.scalars == "scaled" else 1.0


class CausalSelfAttention(nn.Module):
    __units__ = {"gain": "1"}

    def __init__(self, cfg: GCTConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.scale = scalar_scale(cfg)
        self.gain = nn.Parameter(self.scale * torch.ones(cfg.n_head))  # gain = s / scale, init 1
        self.rotary = Rotary(cfg.n_embd // cfg.n_head, cfg.block_size) if cfg.pos == "rope" else None

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        B, T, C = h.size()
        q, k, v = self.c_attn(h).split(C, dim=2)
        gain = self.gain if self.scale == 1.0 else self.gain * (1.0 / self.scale)
        # (B, nh, T, hs); the gain per head scales q's rows in C's kernel (a rotation keeps it)
        q = canonical(q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2), gain=gain.view(1, -1, 1, 1))
        k = canonical(k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2))
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.rotary is not None:
            q, k = self.rotary(q), self.rotary(k)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # temperature sqrt(d_h)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, cfg: GCTConfig) -> None:
        super().__init__()
        self.gated = cfg.mlp == "swiglu"
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.c_up = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias) if self.gated else None
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.c_up is None:
            return self.c_proj(canonical_gelu(self.c_fc(h)))  # gelu(C(a)), one kernel in training
        a = canonical(self.c_fc(h))
        return self.c_proj(a * torch.sigmoid(a) * self.c_up(h))  # normalised gate


class Block(nn.Module):
    __units__ = {"alpha_attn": "1", "alpha_mlp": "1"}

    def __init__(self, cfg: GCTConfig) -> None:
        super().__init__()
        self.attn = CausalSelfAttention(cfg)
        self.mlp = MLP(cfg)
        alpha0 = 1.0 / math.sqrt(2 * cfg.n_layer)
        self.scale = scalar_scale(cfg)
        # plain: alpha itself; scaled: s with alpha = alpha0 * a, a = s / scale (1 at init)
        self.alpha_factor = 1.0 if self.scale == 1.0 else alpha0 / self.scale
        stored = alpha0 if self.scale == 1.0 else self.scale
        self.alpha_attn = nn.Parameter(torch.tensor(stored))
        self.alpha_mlp = nn.Parameter(torch.tensor(stored))

    def alphas(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The step sizes alpha_l the block applies (attention, MLP)."""
        if self.alpha_factor == 1.0:
            return self.alpha_attn, self.alpha_mlp
        return self.alpha_attn * self.alpha_factor, self.alpha_mlp * self.alpha_factor

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        a_attn, a_mlp = self.alphas()
        h = residual_update(h, self.attn(h), a_attn)  # C(h + alpha C(P_perp_h a))
        return residual_update(h, self.mlp(h), a_mlp)


class Transformer(nn.Module):
    def __init__(self, cfg: GCTConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd) if cfg.pos == "learned" else None
        self.h = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])


class GCT(nn.Module):
    __units__ = {"logit_gain": "1"}

    def __init__(self, cfg: GCTConfig) -> None:
        super().__init__()
        self.config = cfg
        self.transformer = Transformer(cfg)
        self.scale = scalar_scale(cfg)
        self.logit_gain = nn.Parameter(torch.tensor(self.scale))  # gain = s / scale, init 1
        self.head_recipe: str | None = None  # set by the NVFP4 substitution pass
        init_gpt_style(self, cfg.n_layer)

    nvfp4_head = True  # the hook below is the output head: kept unless the head is quantised

    def nvfp4_substitute(self, recipe: str) -> list[str]:
        """The logits GEMM is functional (tied, canonical table): run it in NVFP4 too."""
        self.head_recipe = recipe
        return ["logits = h @ C(transformer.wte.weight)^T"]

    def nvfp4_weights(self) -> list[torch.Tensor]:
        return [self.transformer.wte.weight]

    def nvfp4_operand_norms(self) -> dict[str, tuple[str | None, str | None]]:
        """GEMM inputs on canonical coordinates have RMS 1, so no element exceeds sqrt(K): the
        branch inputs (h itself) and, for the GELU MLP, gelu(C(a)) (|gelu(z)| <= |z|). The
        attention output (a mix of raw v rows) and the gated product carry no known bound, nor do
        the weights: the ``matched`` recipe scales those per tensor."""
        out: dict[str, tuple[str | None, str | None]] = {}
        for i, b in enumerate(self.transformer.h):
            assert isinstance(b, Block)
            out[f"transformer.h.{i}.attn.c_attn"] = ("rms", None)
            out[f"transformer.h.{i}.mlp.c_fc"] = ("rms", None)
            if b.mlp.c_up is not None:
                out[f"transformer.h.{i}.mlp.c_up"] = ("rms", None)
            else:
                out[f"transformer.h.{i}.mlp.c_proj"] = ("rms", None)
        return out

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):  # type: ignore[no-untyped-def]
        T = idx.size(1)
        h = canonical(self.transformer.wte(idx))
        if self.transformer.wpe is not None:
            pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
            h = canonical(h + canonical(self.transformer.wpe(pos)))
        for block in self.transformer.h:
            h = block(h)
        head = canonical(self.transformer.wte.weight)  # (V, C), tied and canonical
        if self.head_recipe is not None:
            from unitcheck.quant.gemm import nvfp4_linear

            bound = math.sqrt(self.config.n_embd)  # both operands are canonical rows
            scores = nvfp4_linear(h, head, None, self.head_recipe, bound, bound)
        else:
            scores = h @ head.t()
        gain = self.logit_gain if self.scale == 1.0 else self.logit_gain * (1.0 / self.scale)
        logits = gain * scores / math.sqrt(self.config.n_embd)
        return lm_output(logits, targets)


Config = GCTConfig
Model = GCT


def build(batch: int = 2, seq: int | None = None, seed: int = 0, **overrides: object):  # type: ignore[no-untyped-def]
    return build_lm(GCT, GCTConfig, batch, seq, seed, overrides)
