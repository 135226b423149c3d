"""Checkpoints: written to a temporary file and renamed, loaded with ``weights_only=True``."""

from __future__ import annotations

import os
from typing import Any

import torch

from ..fsutil import atomic_path

__all__ = ["save_checkpoint", "load_checkpoint", "CHECKPOINT"]

CHECKPOINT = "ckpt.pt"


def save_checkpoint(path: str, state: dict[str, Any]) -> None:
    """An interrupted write leaves the previous checkpoint in place (os.replace is atomic)."""
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def load_checkpoint(path: str) -> dict[str, Any]:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no checkpoint at {path}")
    return torch.load(path, map_location="cpu", weights_only=True)  # type: ignore[no-any-return]
