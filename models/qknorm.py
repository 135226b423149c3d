"""QK-Norm transformer: LLaMA plus a per-head RMSNorm with gains on queries and keys.

The norms make q and k dimensionless up to their gains, so the attention logits carry
p:q_norm.weight · p:k_norm.weight: unitcheck still reports the attention temperature unless the
gains are declared dimensionless. Reference: Henry et al. 2020, Query-Key Normalization.
"""

from __future__ import annotations

import torch

from .layers import example_batch
from .llama import Llama, LlamaConfig

Config = LlamaConfig
Model = Llama


def build(batch: int = 2, seq: int | None = None, seed: int = 0, **overrides: object):  # type: ignore[no-untyped-def]
    torch.manual_seed(seed)
    overrides.setdefault("qk_norm", True)
    cfg = LlamaConfig(**overrides)  # type: ignore[arg-type]
    return Llama(cfg), example_batch(cfg.vocab_size, batch, seq or min(32, cfg.block_size), seed)
