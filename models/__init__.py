"""Reference architectures, nanoGPT-style and traceable (installed as ``unitcheck.models``).

>>> model, inputs = unitcheck.models.build("gct", n_layer=4)   # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import Any

from torch import nn

MODELS: dict[str, str] = {
    "gpt": "pre-LayerNorm GPT-2 (nanoGPT): GELU MLP, learned positions, tied head",
    "llama": "LLaMA-style: RMSNorm, SwiGLU, rotary positions, untied head",
    "qknorm": "LLaMA plus per-head QK RMSNorm with gains",
    "ngpt": "nGPT: hypersphere-normalised stream and weights, eigen learning rates",
    "gct": "Gauge-Canonical Transformer (seed 000): canonical coordinates, orthogonal updates",
    "vit": "small Vision Transformer (patches, learned positions, pre-LN, mean-pooled head)",
}


def names() -> list[str]:
    return list(MODELS)


def module(name: str) -> Any:
    if name not in MODELS:
        raise KeyError(f"unknown bundled model {name!r}; choose one of: {', '.join(MODELS)}")
    return importlib.import_module(f"unitcheck.models.{name}")


def build(name: str, **overrides: Any) -> tuple[nn.Module, tuple[Any, ...]]:
    """A bundled model at its small default size plus example inputs ``(idx, targets)``."""
    model, inputs = module(name).build(**overrides)
    return model, inputs


def config_class(name: str) -> type:
    return module(name).Config  # type: ignore[no-any-return]
