"""Exactness of the NVFP4 format against hand-computed values and against torchao."""

from __future__ import annotations

import math

import pytest
import torch

from unitcheck.quant.nvfp4 import (
    E2M1_GRID,
    _rht_cols,
    dequantize,
    fake_quantize,
    fake_quantize_fast,
    hadamard,
    hadamard_matrix,
    inverse_hadamard,
    quantize,
    round_e2m1,
    snr_db,
)

TIES = [(0.25, 0.0), (0.75, 1.0), (1.25, 1.0), (1.75, 2.0), (2.5, 2.0), (3.5, 4.0), (5.0, 4.0)]


@pytest.mark.parametrize(("v", "expected"), TIES + [(0.26, 0.5), (2.6, 3.0), (5.1, 6.0), (6.0, 6.0), (0.0, 0.0)])
def test_round_to_nearest_even_ties(v: float, expected: float) -> None:
    x = torch.tensor([v, -v])
    assert round_e2m1(x).tolist() == [expected, -expected]


def _tie_tensor(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Row 0 sets the global amax 0.65625 (S = 4096 exactly); row 1 has block amax 0.375, so its
    E4M3 scale is 256 and the encode factor is exactly 16: x * 16 lands on the ties."""
    row0 = torch.zeros(16)
    row0[0] = 0.65625
    row1 = torch.zeros(16)
    row1[0] = 0.375  # -> 6.0
    for i, (t, _) in enumerate(TIES):
        row1[1 + i] = t / 16
        row1[8 + i] = -t / 16
    return torch.stack([row0, row1]).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_quantize_hits_every_tie_exactly(dtype: torch.dtype) -> None:
    q = quantize(_tie_tensor(dtype))
    assert float(q.global_scale) == 4096.0
    assert float(q.scales[1, 0].to(torch.float32)) == 256.0
    got = q.values[1].tolist()
    assert got[0] == 6.0
    assert got[1:8] == [e for _, e in TIES]
    assert got[8:15] == [-e for _, e in TIES]
    x_hat = dequantize(q)
    assert x_hat.dtype == dtype and x_hat.shape == (2, 16)
    assert float(x_hat[1, 0]) == 0.375


def _on_grid(q) -> bool:  # type: ignore[no-untyped-def]
    grid = torch.tensor(E2M1_GRID)
    return bool(torch.isin(q.values.abs(), grid).all())


@pytest.mark.parametrize("kw", [{}, {"block_2d": True}, {"per_tensor": False}, {"stochastic": True},
                                {"hadamard_transform": True}])
def test_dequantised_values_lie_on_the_grid_times_their_scales(kw: dict) -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(48, 80, generator=g) * torch.logspace(-3, 3, 80)
    q = quantize(x, **kw)
    assert _on_grid(q)
    x_hat = dequantize(q, undo_hadamard=False)
    r, c = q.values.shape
    per_elem = (q.scales.to(torch.float32).unsqueeze(-1) / q.global_scale).expand(r, c // 16, 16).reshape(r, c)
    ratio = (x_hat / per_elem[: x_hat.shape[0], : x_hat.shape[1]]).abs()
    nearest = (ratio[..., None] - torch.tensor(E2M1_GRID)).abs().min(-1).values
    assert (nearest <= 1e-5 * ratio.clamp(min=1)).all()  # q * s / S up to one float32 rounding


def test_zero_blocks_all_zero_tensors_and_subnormal_scales() -> None:
    x = torch.zeros(4, 32)
    assert torch.equal(fake_quantize(x), x)  # no NaN from a zero amax
    x[0, :16] = torch.linspace(-1, 1, 16)
    y = fake_quantize(x)
    assert torch.equal(y[0, 16:], torch.zeros(16)) and torch.isfinite(y).all()
    tiny = torch.full((1, 16), 1e-4)
    tiny[0, 0] = 3e-4
    q = quantize(tiny, per_tensor=False)  # scale 3e-4 * 448 = 0.134: an E4M3 value; deeper:
    q2 = quantize(tiny * 1e-2, per_tensor=False)  # 1.3e-3 * ... is an E4M3 subnormal
    assert float(q2.scales.to(torch.float32)[0, 0]) < 2**-6
    assert _on_grid(q) and _on_grid(q2)


def test_values_beyond_the_range() -> None:
    x = torch.tensor([[5000.0, -7000.0, 1.0, 0.5] + [0.0] * 12])
    y = fake_quantize(x)  # per-tensor scaling brings 6 * 448 * amax / 2688 back to amax
    assert float(y[0, 1]) == pytest.approx(-7000.0, rel=1e-6)
    z = fake_quantize(x, per_tensor=False)  # without it the largest magnitude is 6 * 448 / 2688 = 1
    assert float(z[0, 0]) == 1.0 and float(z[0, 1]) == -1.0


def test_any_leading_shape_and_padding() -> None:
    x = torch.randn(2, 3, 5, 20)
    y = fake_quantize(x)
    assert y.shape == x.shape
    assert torch.equal(fake_quantize_fast(x), y)


def test_agrees_with_torchao() -> None:
    from torchao.prototype.mx_formats.kernels import f4_unpacked_to_f32, unpack_uint4
    from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale

    g = torch.Generator().manual_seed(0)
    total = ties = agree = 0
    for scale in (0.01, 1.0, 300.0):
        x = torch.randn(512, 256, generator=g) * scale
        q = quantize(x)
        t = NVFP4Tensor.to_nvfp4(x, per_tensor_scale=per_tensor_amax_to_scale(x.abs().amax()))
        assert torch.equal(t.scale.view(torch.uint8).reshape(q.scales.shape), q.scales.view(torch.uint8))
        theirs = f4_unpacked_to_f32(unpack_uint4(t.qdata)).reshape(q.values.shape)
        differ = theirs != q.values
        total += x.numel()
        agree += int((~differ).sum())
        if differ.any():  # only exact ties flipped by operation order may differ
            enc = 1.0 / (q.scales.to(torch.float32).unsqueeze(-1) * (1.0 / q.global_scale))
            scaled = (x.reshape(512, 16, 16) * enc).reshape(512, 256).abs()
            mids = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
            gap = (scaled[differ][:, None] - mids).abs().min(dim=1).values
            assert (gap <= 4 * torch.finfo(torch.float32).eps * 6).all()
            ties += int(differ.sum())
    assert agree / total >= 0.999


def test_stochastic_rounding_is_unbiased() -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, 64, generator=g).clamp(-2.9, 2.9)
    x[0, ::16] = 3.0  # every block shares the global amax, so its scale is exact and nothing clips
    n = 4000
    draws = torch.stack([fake_quantize(x, stochastic=True, generator=g) for _ in range(n)])
    mean, std = draws.mean(0), draws.std(0)
    bound = 5 * std / math.sqrt(n) + 1e-7
    # E[Q_sr(x)] = x wherever the E4M3-rounded block scale clips nothing
    assert ((mean - x).abs() <= bound).all()
    assert (std > 0).any()


def test_hadamard_is_orthogonal_and_invertible() -> None:
    h = hadamard_matrix(dtype=torch.float64)
    assert torch.allclose(h @ h.t(), torch.eye(16, dtype=torch.float64), atol=1e-12)
    x = torch.randn(8, 64, dtype=torch.float64)
    assert torch.allclose(inverse_hadamard(hadamard(x)), x, atol=1e-12)
    assert not torch.allclose(hadamard(x), x)


def test_gaussian_snr_is_20_4_db() -> None:
    x = torch.randn(1024, 1024, generator=torch.Generator().manual_seed(0))
    assert abs(snr_db(x, fake_quantize(x)) - 20.4) <= 0.2


@pytest.mark.parametrize("per_tensor", [True, False])
def test_compiled_path_equals_the_eager_reference_in_every_layout(per_tensor: bool) -> None:
    g = torch.Generator().manual_seed(4)
    x = torch.randn(96, 80, generator=g) * torch.logspace(-2, 2, 80)
    assert torch.equal(fake_quantize_fast(x, per_tensor=per_tensor), fake_quantize(x, per_tensor=per_tensor))
    assert torch.equal(fake_quantize_fast(x, block_2d=True, per_tensor=per_tensor),
                       fake_quantize(x, block_2d=True, per_tensor=per_tensor))
    # axis=0: 16-element blocks down the columns, as the transposed tensor quantised by rows
    assert torch.equal(fake_quantize_fast(x, axis=0, per_tensor=per_tensor),
                       fake_quantize(x.t().contiguous(), per_tensor=per_tensor).t())


def _signed_zeros(seed: int) -> torch.Tensor:
    """Values whose signs outlive rounding to zero: negative zeros and negatives too small for
    their block's scale, beside ordinary values and ties."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 64, generator=g)
    x[::3, ::5] = -0.0
    x[1::4, ::7] = -1e-6
    x[2::5, 3::6] = torch.tensor([0.25, -0.75, 1.25, -2.5, 3.5, -5.0]).repeat(11)[: x[2::5, 3::6].shape[1]] / 3
    x[:, ::16] = 2.0
    return x


@pytest.mark.parametrize("axis", [-1, 0])
def test_compiled_rounding_keeps_every_bit_of_the_eager_reference(axis: int) -> None:
    x = _signed_zeros(8)
    fast = fake_quantize_fast(x, axis=axis)
    ref = fake_quantize(x) if axis == -1 else fake_quantize(x.t().contiguous()).t()
    assert bool((ref == 0).any() & torch.signbit(ref).any())  # the data has negative zeros to keep
    assert torch.equal(fast.view(torch.int32), ref.contiguous().view(torch.int32))  # -0.0 is not 0.0 here


@pytest.mark.parametrize("axis", [-1, 0])
def test_compiled_stochastic_rounding_keeps_the_sign_of_every_value(axis: int) -> None:
    x = _signed_zeros(9)
    torch.manual_seed(10)
    out = fake_quantize_fast(x, stochastic=True, axis=axis)
    assert bool(((out == 0) & torch.signbit(out)).any())  # some negatives rounded to -0.0
    assert torch.equal(torch.signbit(out), torch.signbit(x))


@pytest.mark.parametrize("axis", [-1, 0])
def test_compiled_stochastic_rounding_is_unbiased(axis: int) -> None:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(64, 64, generator=g).clamp(-2.9, 2.9)
    x[::16, :] = 3.0
    x[:, ::16] = 3.0  # every block, rows or columns, holds the global amax: exact scales, no clipping
    torch.manual_seed(6)
    n = 2000
    draws = torch.stack([fake_quantize_fast(x, stochastic=True, axis=axis) for _ in range(n)])
    mean, std = draws.mean(0), draws.std(0)
    # every block's amax is 3, so x is encoded as v = 2x; a draw is one of v's two grid
    # neighbours, the upper with probability f = frac(|v| / step): the mean's standard error is
    # step/2 * sqrt(f (1 - f) / n) (the sample std is 0 for f ~ 1/n, so use the exact one)
    v = (2 * x).abs()
    step = torch.where(v < 2, 0.5, torch.where(v < 4, 1.0, 2.0))
    f = torch.frac(v / step)
    sem = step / 2 * torch.sqrt(f * (1 - f) / n)
    assert ((mean - x).abs() <= 5 * sem + step / 2 / n).all()
    assert ((std - step / 2 * torch.sqrt(f * (1 - f))).abs() <= 0.1 * step).all()
    assert (std > 0).float().mean() > 0.5  # off-grid values really are randomised
    rne = fake_quantize_fast(x, axis=axis)
    assert ((mean - x).abs().mean() < (rne - x).abs().mean() / 5)  # unlike round-to-nearest


def _canonical_rows(k: int, rows: int = 64, seed: int = 7) -> torch.Tensor:
    """RMS-1 rows of length k, the extreme ones included: a row with all its mass on one element
    (that element is sqrt(k)) and a few heavy-tailed rows."""
    from unitcheck.canonical import canonical

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, k, generator=g)
    x[1] = 0.0
    x[1, 5] = 1.0  # one-hot: canonical makes it sqrt(k)
    x[2:8] = torch.randn(6, k, generator=g) ** 3
    return canonical(x)


@pytest.mark.parametrize("k", [64, 512])
def test_fixed_scale_matched_to_rms_rows_clips_nothing(k: int) -> None:
    from unitcheck.quant.nvfp4 import saturated_blocks

    x = _canonical_rows(k)
    assert float(x.abs().max()) == pytest.approx(math.sqrt(k), rel=1e-3)  # C has an eps floor
    assert saturated_blocks(x, amax=math.sqrt(k)) == 0.0
    assert saturated_blocks(x, amax=1.0) > 0.2  # nGPT's unit bound clips canonical rows
    matched = snr_db(x, fake_quantize(x, per_tensor=False, amax=math.sqrt(k)))
    assert abs(matched - snr_db(x, fake_quantize(x))) < 0.5  # as good as per-tensor scaling
    assert snr_db(x, fake_quantize(x, per_tensor=False, amax=1.0)) < matched - 5


def test_fixed_scale_of_one_clips_nothing_on_unit_rows() -> None:
    from unitcheck.quant.nvfp4 import saturated_blocks

    x = _canonical_rows(256)
    x = x / x.norm(dim=-1, keepdim=True)
    assert saturated_blocks(x, amax=1.0) == 0.0
    assert saturated_blocks(2 * x, amax=1.0) > 0.0  # the bound is tight: twice the row clips


def test_compiled_path_takes_the_fixed_bound() -> None:
    x = _canonical_rows(128)
    for amax in (1.0, math.sqrt(128)):
        assert torch.equal(fake_quantize_fast(x, per_tensor=False, amax=amax),
                           fake_quantize(x, per_tensor=False, amax=amax))
        assert torch.equal(fake_quantize_fast(x, per_tensor=False, amax=amax, axis=0),
                           fake_quantize(x.t().contiguous(), per_tensor=False, amax=amax).t())


def test_compiled_token_axis_hadamard_matches_the_matrix() -> None:
    """wgrad's transform down 16-token blocks (butterflies in the compiled path) is H^T on every
    block, to float32 rounding, and the quantised result is the reference's wherever the two
    transforms round alike."""
    g = torch.Generator().manual_seed(8)
    x = torch.randn(64, 48, generator=g, dtype=torch.float64) * torch.logspace(-2, 2, 48, dtype=torch.float64)
    h = hadamard_matrix(dtype=torch.float64)
    exact = torch.einsum("ji,bjc->bic", h, x.reshape(4, 16, 48)).reshape(64, 48)
    got = _rht_cols(x.float().reshape(4, 16, 48)).reshape(64, 48).double()
    assert torch.allclose(got, exact, rtol=0, atol=1e-6 * float(x.abs().max()))
    assert not torch.allclose(got, x.float().double(), atol=1e-3)  # it really transforms
    fast = fake_quantize_fast(x.float(), axis=0, hadamard_transform=True)
    ref = dequantize(quantize(x.float().t().contiguous(), hadamard_transform=True), undo_hadamard=False).t()
    # an ulp in the per-tensor amax moves every decoded value by an ulp; beyond that they agree
    assert ((fast - ref).abs() <= 1e-5 * ref.abs()).float().mean() > 0.99
    # and where not, the two inputs straddled a rounding boundary: one grid step apart at most
    assert torch.allclose(fast, ref, rtol=0.5, atol=1e-6)
