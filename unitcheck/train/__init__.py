"""The bundled training loop: config, data, checkpoints, distributed, plots.

Imports are lazy so that the CLI can build its ``train`` flags without loading torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["TrainConfig", "train", "TrainResult", "NonFiniteLoss"]

_LAZY = {"TrainConfig": "config", "train": "loop", "TrainResult": "loop", "NonFiniteLoss": "loop"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(name)
