"""The hand-written backward passes of C and P_perp against autograd's (gradcheck in float64)."""

from __future__ import annotations

import pytest
import torch

from unitcheck.canonical import _Canonical, _Orthogonal, canonical, orthogonal


def test_canonical_backward_is_the_exact_gradient() -> None:
    x = torch.randn(3, 5, 24, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: _Canonical.apply(t, 1e-6), (x,))
    y = canonical(x)
    ref = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    assert torch.allclose(y, ref)


@pytest.mark.parametrize("shape", [(1, 5, 1, 1), (), (3, 5, 7, 1)], ids=["per-head", "scalar", "per-row"])
def test_a_gain_per_row_is_applied_in_cs_kernel(shape: tuple[int, ...]) -> None:
    """gain * C(x) as one autograd function (GCT's per-head query gain), on a transposed view as
    the attention passes it: the exact gradient of both, and the same values as the product."""
    from unitcheck.canonical import _ScaledCanonical

    x = torch.randn(3, 7, 5, 12, dtype=torch.float64).transpose(1, 2).requires_grad_()
    gain = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: canonical(a, gain=b), (x, gain))
    y = canonical(x, gain=gain)
    assert type(y.grad_fn).__name__ == _ScaledCanonical.__name__ + "Backward"
    g = torch.randn_like(y)
    for a, b in zip(torch.autograd.grad(y, (x, gain), g), torch.autograd.grad(canonical(x) * gain, (x, gain), g)):
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-14)


def test_a_gain_is_per_row_exactly_where_broadcasting_keeps_the_rows() -> None:
    """_per_row's plain-Python test agrees with broadcasting on every small shape: a gain per
    row or per head is, one per feature or one that widens x is not."""
    import itertools

    from unitcheck.canonical import _per_row

    x = torch.empty(3, 5, 7, 12)
    rows = torch.Size((3, 5, 7, 1))
    for n in range(6):
        for shape in itertools.product((1, 3, 5, 7, 12, 2), repeat=n):
            try:
                expected = torch.broadcast_shapes(shape, rows) == rows
            except RuntimeError:
                expected = False
            assert _per_row(torch.empty(shape), x) == expected, shape


def test_gelu_of_c_is_one_function_with_the_exact_gradient() -> None:
    """GCT's MLP activation gelu(C(x)), fused: the exact gradient, the values of the two calls,
    and captures still see the two calls (C marked, gelu after it)."""
    from unitcheck.canonical import _CanonicalGelu, canonical_gelu
    from unitcheck.tracer import trace

    x = torch.randn(3, 5, 24, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: _CanonicalGelu.apply(t, 1e-6), (x,))
    y = canonical_gelu(x)
    assert type(y.grad_fn).__name__ == _CanonicalGelu.__name__ + "Backward"
    assert torch.allclose(y, torch.nn.functional.gelu(canonical(x)), rtol=1e-12, atol=1e-14)
    with torch.no_grad():
        assert torch.equal(canonical_gelu(x), torch.nn.functional.gelu(canonical(x)))  # no kernel to fuse for
    targets = [str(n.target) for n in trace(torch.nn.Sequential(_GeluOfC()), (torch.randn(2, 8),)).graph.nodes]
    assert any("rms_norm" in t for t in targets) and any("gelu" in t for t in targets)
    # regenerated code calls it again, so a null rewrite trains with the same kernel, bit for bit
    from unitcheck.rewrite.api import rewrite
    from unitcheck.testing import same_computation

    model, example = torch.nn.Sequential(torch.nn.Linear(8, 16), _GeluOfC()), (torch.randn(4, 8),)
    res = rewrite(model, example, to="identity")
    assert "canonical_gelu(" in res.source
    assert same_computation(model, res.module, example, training=True)


class _GeluOfC(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from unitcheck.canonical import canonical_gelu

        return canonical_gelu(x)


def test_a_gain_per_feature_is_the_product() -> None:
    """A gain that varies over the features is not one per row: C's kernel is not given it."""
    x = torch.randn(4, 6, 8, dtype=torch.float64, requires_grad=True)
    gain = torch.randn(8, dtype=torch.float64, requires_grad=True)
    y = canonical(x, gain=gain)
    assert torch.allclose(y, canonical(x) * gain, rtol=1e-14, atol=0)
    assert torch.autograd.gradcheck(lambda a, b: canonical(a, gain=b), (x, gain))


def test_orthogonal_backward_is_the_exact_gradient() -> None:
    a = torch.randn(4, 7, 16, dtype=torch.float64, requires_grad=True)
    h = torch.randn(4, 7, 16, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(_Orthogonal.apply, (a, h, 1e-6))
    out = orthogonal(a, h)
    ref = a - (a * h).sum(-1, keepdim=True) / ((h * h).sum(-1, keepdim=True) + 1e-6) * h
    assert torch.allclose(out, ref, rtol=1e-12, atol=1e-14)
    cos = (out * h).sum(-1) / (out.norm(dim=-1) * h.norm(dim=-1))
    assert float(cos.abs().max()) < 1e-6  # orthogonal to the stream, per token, up to the floor
    exact = orthogonal(a, h, 0.0)
    assert float(((exact * h).sum(-1) / (exact.norm(dim=-1) * h.norm(dim=-1))).abs().max()) < 1e-12


def test_a_zero_stream_projects_nothing_and_stays_finite() -> None:
    """A zero padding row makes the stream exactly 0 at that token: P_perp_0 a = a, and the
    forward and backward of P_perp, the fused update and its three-call form stay finite
    (they divided by ||h||^2 = 0: NaN)."""
    from unitcheck.canonical import residual_update

    g = torch.Generator().manual_seed(1)
    h = torch.randn(2, 5, 32, dtype=torch.float64, generator=g)
    h[:, 0] = 0.0
    u = torch.randn(2, 5, 32, dtype=torch.float64, generator=g)
    assert torch.equal(orthogonal(u, h)[:, 0], u[:, 0])
    alpha = torch.tensor(0.5, dtype=torch.float64)
    for fn in (residual_update, _composed, lambda h, u, alpha: orthogonal(u, h)):
        for dtype in (torch.float64, torch.float32):
            xs = [t.to(dtype).clone().requires_grad_() for t in (h, u, alpha)]
            out = fn(*xs)
            out.square().sum().backward()
            assert torch.isfinite(out).all(), fn
            assert all(x.grad is not None and torch.isfinite(x.grad).all() for x in xs[:2]), fn



def _composed(h: torch.Tensor, u: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    return canonical(h + alpha * canonical(orthogonal(u, h)))


@pytest.mark.parametrize("alpha", [torch.tensor(0.37), torch.linspace(0.1, 0.5, 32), torch.linspace(0.1, 0.5, 36).view(4, 9, 1)],
                         ids=["scalar", "per-feature", "per-row"])
def test_residual_update_is_the_composition_forward_and_backward(alpha: torch.Tensor) -> None:
    """The fused update (compiled in eager training) against the three calls it replaces, with a
    scalar alpha (its gradient reduced per row in the kernel) and one per feature."""
    from unitcheck import compiled
    from unitcheck.canonical import _update_backward, _update_forward, residual_update

    g = torch.Generator().manual_seed(0)
    leaves = [torch.randn(4, 9, 32, dtype=torch.float64, generator=g) for _ in range(2)]
    leaves.append(alpha.to(torch.float64))
    grads = []
    for fn in (residual_update, _composed):
        xs = [t.clone().requires_grad_() for t in leaves]
        out = fn(*xs)
        out.backward(torch.cos(torch.arange(out.numel(), dtype=torch.float64)).view_as(out))
        grads.append([out.detach()] + [x.grad for x in xs])
    for a, b in zip(*grads, strict=True):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)
    if compiled.compile_enabled():
        for kernel in (_update_forward, _update_backward):
            assert compiled._COMPILED[kernel] is not kernel  # the compiled kernels ran
    assert torch.autograd.gradcheck(residual_update, tuple(t.clone().requires_grad_() for t in leaves))


def test_a_training_step_runs_the_update_on_kernels_of_its_own() -> None:
    """The update's kernels run inside its autograd function, where a training loop calls them
    with one signature every step: kernels compiled for it, without Dynamo (see
    unitcheck/compiled.py), the same bits every step."""
    from unitcheck import compiled
    from unitcheck.canonical import _update_backward, _update_forward, residual_update

    h0, u0 = torch.randn(3, 7, 24), torch.randn(3, 7, 24)
    results = []
    for _ in range(3):
        h, u = h0.clone().requires_grad_(), u0.clone().requires_grad_()
        alpha = torch.tensor(0.4, requires_grad=True)
        out = residual_update(h, u, alpha)
        out.backward(torch.cos(torch.arange(out.numel(), dtype=out.dtype)).view_as(out))
        results.append([out.detach(), h.grad, u.grad, alpha.grad])
    for a, b in zip(results[0], results[-1], strict=True):
        assert torch.equal(a, b)
    if compiled._static_enabled() and compiled._compiled(_update_forward) is not _update_forward:
        for kernel in (_update_forward, _update_backward):
            assert any(k[0] is kernel and v is not None for k, v in compiled._STATIC.items())


def test_residual_update_keeps_three_activations_for_its_backward() -> None:
    """The update's kernels are memory-bound: the backward recomputes C(P_perp_h u) from h and u,
    which it reads anyway, so the forward keeps its output, h and u, and row sums only."""
    from unitcheck.canonical import residual_update

    h, u = (torch.randn(4, 9, 32, requires_grad=True) for _ in range(2))
    out = residual_update(h, u, torch.tensor(0.3, requires_grad=True))
    saved = out.grad_fn.saved_tensors  # type: ignore[union-attr]
    assert sum(t.shape == h.shape for t in saved) == 3
    assert sum(t.shape == (4, 9, 1) for t in saved) == 4


def test_canonical_runs_compiled_and_matches_the_formula() -> None:
    """C in eager training runs through compiled kernels (unless UNITCHECK_COMPILE=0) and is
    still the exact formula, forward and backward."""
    from unitcheck import compiled
    from unitcheck.canonical import _canonical_backward, _canonical_forward

    x = torch.randn(4, 9, 32, dtype=torch.float64, requires_grad=True)
    g = torch.cos(torch.arange(x.numel(), dtype=torch.float64)).view_as(x)
    canonical(x).backward(g)
    x2 = x.detach().clone().requires_grad_()
    (x2 / torch.sqrt(x2.pow(2).mean(-1, keepdim=True) + 1e-6)).backward(g)
    assert torch.allclose(x.grad, x2.grad, rtol=1e-10, atol=1e-12)  # type: ignore[arg-type]
    if compiled.compile_enabled():
        for kernel in (_canonical_forward, _canonical_backward):
            assert compiled._COMPILED[kernel] is not kernel
