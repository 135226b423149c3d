"""Which numpy calls a capture routes through unitcheck's drawing ops (unitcheck/host_draws.py)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from unitcheck import host_draws


def test_only_scalar_uniform_draws_are_routed_and_array_arguments_pass_through() -> None:
    """``np.random.random()`` and ``uniform(0, 1)`` become the op; a call with sizes or with
    array bounds stays numpy's (comparing array bounds with ``(0, 1)`` raised "truth value of an
    array is ambiguous"), and so does a call outside the capture."""
    with host_draws.routed(nn.Linear(2, 2)):
        assert isinstance(np.random.random(), torch.Tensor)
        assert isinstance(np.random.uniform(0, 1), torch.Tensor)
        assert isinstance(np.random.rand(3), np.ndarray)
        assert isinstance(np.random.uniform(np.zeros(3), np.ones(3)), np.ndarray)
        assert isinstance(np.random.uniform(0, 2), float)
    assert isinstance(np.random.random(), float)
