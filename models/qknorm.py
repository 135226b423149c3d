"""QK-Norm transformer: LLaMA plus a per-head RMSNorm with gains on queries and keys.

The norms make q and k dimensionless up to their gains, so the attention logits carry
p:q_norm.weight · p:k_norm.weight: unitcheck still reports the attention temperature unless the
gains are declared dimensionless. Reference: Henry et al. 2020, Query-Key Normalization.
"""

from __future__ import annotations

from .layers import build_lm
from .llama import Llama, LlamaConfig

Config = LlamaConfig
Model = Llama


def build(batch: int = 2, seq: int | None = None, seed: int = 0, **overrides: object):  # type: ignore[no-untyped-def]
    overrides.setdefault("qk_norm", True)
    return build_lm(Llama, LlamaConfig, batch, seq, seed, overrides)
