"""Checkpoints: written to a temporary file and renamed, loaded with ``weights_only=True``."""

from __future__ import annotations

import os
from typing import Any

import torch

from ..errors import UnitcheckError
from ..fsutil import atomic_path
from ..validate import InputError, read_torch_file

__all__ = ["save_checkpoint", "load_checkpoint", "check_training_state", "CheckpointError", "CHECKPOINT"]

CHECKPOINT = "ckpt.pt"

_TRAINING_KEYS: dict[str, type | tuple[type, ...]] = {
    "model": dict, "optimizer": dict, "scheduler": dict, "rng": torch.Tensor, "data": torch.Tensor,
    "step": int,
}


class CheckpointError(UnitcheckError, ValueError):
    """A checkpoint that is truncated, not a checkpoint, or not of this run: exit 2."""


def save_checkpoint(path: str, state: dict[str, Any]) -> None:
    """An interrupted write leaves the previous checkpoint in place (os.replace is atomic)."""
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def load_checkpoint(path: str) -> dict[str, Any]:
    """The checkpoint's dict; a file torch cannot read (truncated, another format, a pickle that
    ``weights_only`` refuses) raises CheckpointError naming it."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        state = read_torch_file(path, "checkpoint")
    except InputError as err:
        raise CheckpointError(f"{err}: start the run over with --overwrite") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} holds a {type(state).__name__}, not a unitcheck checkpoint")
    return state


def check_training_state(state: dict[str, Any], path: str) -> None:
    """A training checkpoint has the model, optimizer, scheduler, RNG and data states and a step."""
    for key, kind in _TRAINING_KEYS.items():
        value = state.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            what = "missing" if key not in state else f"a {type(value).__name__}"
            raise CheckpointError(f"{path} is not a checkpoint of unitcheck train: its {key!r} entry is "
                                  f"{what}; start the run over with --overwrite")
    if state["step"] < 0:
        raise CheckpointError(f"{path}: step {state['step']} is negative; start the run over with --overwrite")
