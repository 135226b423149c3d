"""Functions that generated ``model.py`` files call besides torch's ops (``canonical`` has the
GCT blocks). Light on imports: a rewritten model loads without the analysis stack."""

from __future__ import annotations

import torch

__all__ = ["update_buffer"]


def update_buffer(buffer: torch.Tensor, value: torch.Tensor) -> None:
    """Write a buffer update that the capture functionalised (batch-norm running statistics,
    ``num_batches_tracked``) back in place, outside autograd, as the eager kernel does: a tracked
    ``copy_`` would bump the version of a tensor the backward pass saved."""
    with torch.no_grad():
        buffer.data.copy_(value)
