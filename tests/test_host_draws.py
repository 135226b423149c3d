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


class _DrawsOnFloats(nn.Module):
    """BigBird's block-sparse attention: a method that draws from numpy and computes on the
    float tensors it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def noisy(self, h: torch.Tensor, rows: int) -> torch.Tensor:
        return h * torch.from_numpy(np.random.rand(rows, 1)).float()

    def sizes_only(self, rows: int) -> torch.Tensor:
        return torch.from_numpy(np.random.rand(rows, 1) < (0.5 if self.training else 2.0))


def test_a_method_that_draws_is_a_host_call_unless_it_computes_on_floats() -> None:
    """A method of the model that draws from numpy on sizes alone becomes a host call (given its
    module's mode); one given float tensors stays the model's, or their gradients would stop at
    the host call."""
    model = _DrawsOnFloats()
    h = model.proj(torch.randn(3, 4))
    with host_draws.routed(model):
        assert model.noisy(h, 3).grad_fn is not None
        with torch.no_grad():
            assert not model.eval().sizes_only(3).isnan().any()
    traced = torch.fx.experimental.proxy_tensor.make_fx(lambda: model.sizes_only(3))
    with host_draws.routed(model):
        ops = {str(n.target) for n in traced().graph.nodes}
    assert "unitcheck.host_call.default" in ops
