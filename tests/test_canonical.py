"""The hand-written backward passes of C and P_perp against autograd's (gradcheck in float64)."""

from __future__ import annotations

import torch

from unitcheck.canonical import _Canonical, _Orthogonal, canonical, orthogonal


def test_canonical_backward_is_the_exact_gradient() -> None:
    x = torch.randn(3, 5, 24, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: _Canonical.apply(t, 1e-6), (x,))
    y = canonical(x)
    ref = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    assert torch.allclose(y, ref)


def test_orthogonal_backward_is_the_exact_gradient() -> None:
    a = torch.randn(4, 7, 16, dtype=torch.float64, requires_grad=True)
    h = torch.randn(4, 7, 16, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(_Orthogonal.apply, (a, h))
    out = orthogonal(a, h)
    assert float((out * h).sum(-1).abs().max()) < 1e-10  # orthogonal to the stream, per token
