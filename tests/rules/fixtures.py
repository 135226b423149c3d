"""One small fixture model per rule family: each shows a violation and, where useful, its fix."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from unitcheck.models.layers import canonical

Fixture = Callable[[], tuple[nn.Module, Any]]
FIXTURES: dict[str, Fixture] = {}


def fixture(name: str) -> Callable[[Fixture], Fixture]:
    def deco(fn: Fixture) -> Fixture:
        FIXTURES[name] = fn
        return fn

    return deco


def _g(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


class TwoTables(nn.Module):  # UC101
    def __init__(self, canonicalise: bool) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(10, 8), nn.Embedding(6, 8)
        self.canonicalise = canonicalise

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.size(1))
        if self.canonicalise:
            return canonical(canonical(self.tok(ids)) + canonical(self.pos(pos)))
        return self.tok(ids) + self.pos(pos)


@fixture("uc101_two_tables")
def _uc101() -> tuple[nn.Module, Any]:
    return TwoTables(False), torch.randint(0, 10, (2, 6), generator=_g())


@fixture("uc101_fixed_by_canonicaliser")
def _uc101_ok() -> tuple[nn.Module, Any]:
    return TwoTables(True), torch.randint(0, 10, (2, 6), generator=_g())


class Residual(nn.Module):  # UC102
    def __init__(self) -> None:
        super().__init__()
        self.branch = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.branch(x)


@fixture("uc102_residual")
def _uc102() -> tuple[nn.Module, Any]:
    return Residual(), torch.randn(2, 8, generator=_g())


class FakeQuantiser(nn.Module):  # a sign taken from another unit is no violation; a float8 scale
    """Kolibri 1.1's NVFP4 round trip: each block's scale through float8, the magnitudes of the
    scaled block rounded, their signs those of the unrounded values (``copysign``)."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(16, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        blocks = self.up(x).unflatten(-1, (-1, 16))
        scale = (blocks.abs().amax(-1, keepdim=True) / 6).clamp(2**-9, 448).to(torch.float8_e4m3fn).float()
        scaled = blocks / scale
        rounded = torch.round(scaled.abs() * 2) / 2
        return (rounded.copysign(scaled) * scale).flatten(-2) + self.up(x)


@fixture("copysign_fake_quantiser")
def _copysign() -> tuple[nn.Module, Any]:
    return FakeQuantiser(), torch.randn(2, 16, generator=_g())


class PlusOne(nn.Module):  # UC103, and a floor (UC902) that is fine
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x + 1.0) * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


@fixture("uc103_literal_and_uc902_floor")
def _uc103() -> tuple[nn.Module, Any]:
    return PlusOne(), torch.randn(2, 8, generator=_g())


class ExplicitAttention(nn.Module):  # UC201 via softmax over q k^T that weights v
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).split(8, dim=-1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(8)
        mask = torch.ones(x.size(1), x.size(1)).tril() == 0
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        return att @ v


@fixture("uc201_explicit_attention")
def _uc201() -> tuple[nn.Module, Any]:
    return ExplicitAttention(), torch.randn(2, 5, 8, generator=_g())


class FusedAttention(nn.Module):  # UC201 fixed: canonical q, k with a dimensionless gain
    __units__ = {"gain": "1"}

    def __init__(self, fixed: bool) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.gain = nn.Parameter(torch.ones(()))
        self.fixed = fixed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).split(8, dim=-1)
        if self.fixed:
            q, k = canonical(q) * self.gain, canonical(k)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


@fixture("uc201_sdpa")
def _uc201_sdpa() -> tuple[nn.Module, Any]:
    return FusedAttention(False), torch.randn(2, 5, 8, generator=_g())


@fixture("uc201_sdpa_fixed")
def _uc201_sdpa_fixed() -> tuple[nn.Module, Any]:
    return FusedAttention(True), torch.randn(2, 5, 8, generator=_g())


class FlexAttention(nn.Module):  # UC201 through flex_attention: the logits, and a bias its score function reads
    def __init__(self, fixed: bool) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.bias = nn.Parameter(torch.zeros(2))  # per head: a learned bias takes the logits' unit
        self.fixed = fixed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.nn.attention.flex_attention import flex_attention

        q, k, v = (t.unflatten(-1, (2, 4)).transpose(1, 2) for t in self.qkv(x).split(8, dim=-1))
        if self.fixed:
            q, k = canonical(q), canonical(k)
        energy = (canonical(x) if self.fixed else x).pow(2).mean(-1)  # per key, from the data: in:x^2 unfixed

        def biased_causal(score, b, h, i, j):  # type: ignore[no-untyped-def]
            return torch.where(i >= j, score + self.bias[h] + energy[b, j], -float("inf"))

        return flex_attention(q, k, v, score_mod=biased_causal).transpose(1, 2).flatten(-2)


@fixture("uc201_flex")
def _uc201_flex() -> tuple[nn.Module, Any]:
    return FlexAttention(False), torch.randn(2, 5, 8, generator=_g())


@fixture("uc201_flex_fixed")
def _uc201_flex_fixed() -> tuple[nn.Module, Any]:
    return FlexAttention(True), torch.randn(2, 5, 8, generator=_g())


class Activations(nn.Module):  # UC202 and UC204
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        return F.silu(h) + torch.exp(x) + F.gelu(canonical(h))


@fixture("uc202_uc204_activations")
def _uc202() -> tuple[nn.Module, Any]:
    return Activations(), torch.randn(2, 8, generator=_g())


class Router(nn.Module):  # UC203
    def __init__(self) -> None:
        super().__init__()
        self.router = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.router(x), dim=-1)


@fixture("uc203_router_softmax")
def _uc203() -> tuple[nn.Module, Any]:
    return Router(), torch.randn(2, 8, generator=_g())


class SingletonSoftmax(nn.Module):  # no UC203: a softmax over a size-1 axis is identically 1
    """SwiftFormer's additive attention: ``(q @ w_g).softmax(-1)`` with ``w_g`` of shape (d, 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.w_g = nn.Parameter(torch.randn(8, 1, generator=_g(1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = (x @ self.w_g).softmax(dim=-1) + (x @ self.w_g).log_softmax(dim=-1)
        return weight * x


@fixture("uc203_singleton_softmax_ok")
def _uc203_singleton() -> tuple[nn.Module, Any]:
    return SingletonSoftmax(), torch.randn(2, 8, generator=_g())


class Classifier(nn.Module):  # UC301
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.head(canonical(x)), y)


@fixture("uc301_logits")
def _uc301() -> tuple[nn.Module, Any]:
    return Classifier(), (torch.randn(4, 8, generator=_g()), torch.randint(0, 5, (4,), generator=_g()))


class Regression(nn.Module):  # UC302 and UC303
    def __init__(self, weighted: bool) -> None:
        super().__init__()
        self.weighted = weighted

    def forward(self, u: torch.Tensor, g: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
        boundary = (u - g).pow(2).mean()
        residual = (u * u - f).pow(2).mean()
        if self.weighted:  # lambda_i = alpha_i / S_i with u(S_i) = u(L_i)
            return boundary / g.pow(2).mean().detach() + residual / f.pow(2).mean().detach()
        return boundary + residual


def _pinn_inputs() -> Any:
    g = _g()
    return torch.randn(16, generator=g), torch.randn(16, generator=g), torch.randn(16, generator=g)


@fixture("uc303_loss_terms")
def _uc303() -> tuple[nn.Module, Any]:
    return Regression(False), _pinn_inputs()


@fixture("uc303_fixed_by_loss_weights")
def _uc303_ok() -> tuple[nn.Module, Any]:
    return Regression(True), _pinn_inputs()


class MSELoss(nn.Module):  # UC302
    def forward(self, pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(pred, y)


@fixture("uc302_unitful_loss")
def _uc302() -> tuple[nn.Module, Any]:
    g = _g()
    return MSELoss(), (torch.randn(4, 3, generator=g), torch.randn(4, 3, generator=g))


class Sampler(nn.Module):  # UC204: grid_sample at unitful coordinates; bounded ones are fine
    def __init__(self) -> None:
        super().__init__()
        self.value = nn.Linear(8, 8)
        self.offsets = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        v = self.value(x).repeat_interleave(2, dim=1)[:, ::2].permute(0, 3, 1, 2)  # (N, C, H, W)
        off = self.offsets(x)  # (N, H, W, 2), the unit of the offsets' weight
        bounded = torch.tanh(canonical(off))  # dimensionless coordinates: the fix
        return F.grid_sample(v, off, align_corners=False), F.grid_sample(v, bounded, align_corners=False)


@fixture("uc204_grid_sample")
def _uc204_grid() -> tuple[nn.Module, Any]:
    return Sampler(), torch.randn(2, 4, 4, 8, generator=_g())


class Prototypes(nn.Module):  # UC101: distances between values of different units
    """Prototypical and metric-learning code: distances from query embeddings to prototypes the
    same encoder computed (fine), and to embeddings of another encoder (a mismatch)."""

    def __init__(self) -> None:
        super().__init__()
        self.enc, self.other = nn.Linear(6, 4), nn.Linear(6, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q = self.enc(x[6:])  # queries and support examples: one batch, one unit
        protos = self.enc(x[:6]).view(3, 2, 4).mean(1)
        return (torch.cdist(q, protos), torch.cdist(q, self.other(x[:3])), F.pairwise_distance(q, protos[:1]),
                q + torch.dist(q, protos[:1]))


@fixture("uc101_cdist")
def _uc101_cdist() -> tuple[nn.Module, Any]:
    return Prototypes(), torch.randn(11, 6, generator=_g())


class KernelMatrix(nn.Module):  # UC204: a log-determinant of a unitful kernel matrix
    """Gaussian-process and whitening code: a kernel matrix of features, its inverse, Cholesky
    factor, a solve, a determinant and decompositions (each with its unit), and the marginal
    likelihood's ``logdet`` of the unitful matrix (shifted, not scaled, by a rescaling)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Linear(3, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        f = self.features(x)  # (4, 4)
        k = f @ f.T
        k = k + k.diagonal().mean() * 1e-2 * torch.eye(4)  # jitter in the kernel's own unit
        q, r = torch.linalg.qr(f)
        vals, vecs = torch.linalg.eigh(k)
        return (torch.linalg.inv(k), torch.linalg.cholesky(k), torch.linalg.solve(k, f), torch.linalg.det(f[None]),
                torch.linalg.svdvals(f), q, r, vals, vecs, torch.linalg.pinv(f), torch.logdet(k[None]))


@fixture("uc204_logdet")
def _uc204_logdet() -> tuple[nn.Module, Any]:
    return KernelMatrix(), torch.randn(4, 3, generator=_g())


class PatchRows(nn.Module):  # UC204: row ids read from a float input; the ids as integers are fine
    """Pix2Struct's input in small: each row's first column is an id stored in the float tensor,
    truncated to an integer for an embedding lookup; the same ids given as an integer tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.rows = nn.Embedding(8, 4)
        self.proj = nn.Linear(3, 4)

    def forward(self, patches: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.proj(patches[..., 1:]), self.rows(patches[..., 0].long()), self.rows(ids.float().long())


@fixture("uc204_cast_to_integers")
def _uc204_cast() -> tuple[nn.Module, Any]:
    ids = torch.randint(0, 8, (2, 5), generator=_g())
    return PatchRows(), (torch.cat([ids[..., None].float(), torch.randn(2, 5, 3, generator=_g(1))], -1), ids)


class FourierMixing(nn.Module):  # no UC901 and no UC102: FNet's token mixing is linear
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        mixed = torch.fft.fft2(h).real + torch.fft.irfft(torch.fft.rfft(h, dim=-1), n=8, dim=-1)
        return h + mixed.T.T


@fixture("uc901_fourier_mixing_ok")
def _fourier() -> tuple[nn.Module, Any]:
    return FourierMixing(), torch.randn(4, 8, generator=_g())


class Decorrelation(nn.Module):  # no violation: a covariance (u^2) and a correlation (dimensionless)
    """A decorrelation penalty's statistics (Barlow Twins, VICReg): ``torch.cov`` of features,
    which export cannot follow (the symbolic trace meets it whole), and ``torch.corrcoef``."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(5, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.proj(x).T  # variables in rows
        return torch.cov(z), torch.corrcoef(z)


@fixture("uc902_covariance_ok")
def _covariance() -> tuple[nn.Module, Any]:
    return Decorrelation(), torch.randn(8, 5, generator=_g())


class PairScorer(nn.Module):  # no violation: a bilinear score of two encodings, its bias bound
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 3), nn.Linear(4, 5)
        self.score = nn.Bilinear(3, 5, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.score(self.a(x), self.b(x))


@fixture("uc101_bilinear_ok")
def _bilinear() -> tuple[nn.Module, Any]:
    return PairScorer(), torch.randn(6, 4, generator=_g())


class Chebyshev(nn.Module):  # UC901: no rule for a Chebyshev polynomial
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.special.chebyshev_polynomial_t(x, 3))


@fixture("uc901_unknown_op")
def _uc901() -> tuple[nn.Module, Any]:
    return Chebyshev(), torch.randn(2, 3, 3, generator=_g())


class DeltaSolve(nn.Module):  # UC101: a unit-triangular solve over raw key products
    """A gated delta rule's UT system, solved as Qwen3.5 does in eager: (I + L) X = V with L the
    strict lower triangle of key products; the keys' unit makes I + L a mismatched sum unless they
    are normalised. A plain triangular solve of a weight's triangle gives u(V) / u(W)."""

    def __init__(self, normalise: bool) -> None:
        super().__init__()
        self.k, self.v = nn.Linear(8, 8, bias=False), nn.Linear(8, 8, bias=False)
        self.tri = nn.Parameter(torch.eye(6) + 0.1 * torch.randn(6, 6, generator=_g(1)))
        self.normalise = normalise

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k = F.normalize(self.k(x), dim=-1) if self.normalise else self.k(x)
        system = (k @ k.transpose(-1, -2)).tril(-1)
        v = self.v(x)
        delta = torch.linalg.solve_triangular(system, v, upper=False, unitriangular=True)
        return delta, torch.linalg.solve_triangular(self.tri.tril(), v, upper=False)


@fixture("uc101_unit_triangular_solve")
def _uc101_solve() -> tuple[nn.Module, Any]:
    return DeltaSolve(False), torch.randn(2, 6, 8, generator=_g())


@fixture("uc101_unit_triangular_solve_normalised")
def _uc101_solve_ok() -> tuple[nn.Module, Any]:
    return DeltaSolve(True), torch.randn(2, 6, 8, generator=_g())


INPUT_UNITS: dict[str, dict[str, str]] = {
    "uc302_unitful_loss": {"pred": "in:y"},
    "uc303_loss_terms": {"g": "in:u", "f": "in:u^2"},
    "uc303_fixed_by_loss_weights": {"g": "in:u", "f": "in:u^2"},
}


class RowsWritten(nn.Module):  # UC101 where rows of two scales share a buffer, not where a row is replaced
    """SuperPoint's padded keypoint scores: a ragged row per image (its positive entries), each
    written into a zero buffer as wide as the longest, whose row it then fills whole."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 6), nn.Linear(8, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = [f(r) for f, r in ((self.a, x[0]), (self.b, x[1]))]
        rows = [r[torch.nonzero(r > 0)[:, 0]] for r in rows]
        out = x.new_zeros(2, max(r.shape[0] for r in rows))
        for i, r in enumerate(rows):
            out[i, : r.shape[0]] = r
        return out


@fixture("uc101_rows_written_whole")
def _uc101_rows() -> tuple[nn.Module, Any]:
    torch.manual_seed(0)  # rows of 1 and 5 positive entries: the second fills its row
    return RowsWritten(), torch.randn(2, 8, generator=_g())


class RowsReadBack(nn.Module):  # UC101 where one row is replaced; the rows read back are whole
    """A row of one scale written into a table of another (``out[1] = b[1]``, how a chunked
    linear attention's loop fills its matrix row by row) and the rows read back: each has the
    unit of the operand it came from, which the oracle measures by rescaling the two operands of
    the write, not its mix."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 6), nn.Linear(8, 6)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.a(x).clone()
        out[1] = self.b(x)[1]
        return out[0] + out[2], out[1]


@fixture("uc101_rows_read_back")
def _uc101_rows_read_back() -> tuple[nn.Module, Any]:
    return RowsReadBack(), torch.randn(4, 8, generator=_g())


class Slopes(nn.Module):  # UC101 where a prelu's slope carries a unit; a learned slope is a pure number
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)
        self.act = nn.PReLU(8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        g = self.c(x)
        return self.act(self.a(x)), F.prelu(self.b(x), self.c.weight[0]), g


@fixture("uc101_prelu_slope")
def _uc101_prelu() -> tuple[nn.Module, Any]:
    return Slopes(), torch.randn(6, 8, generator=_g())


class Recurrent(nn.Module):  # UC202: gates of unitful inputs; a canonical input is fine
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.lstm = nn.LSTM(8, 8, batch_first=True)
        self.cell = nn.GRUCell(8, 8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.proj(x)
        raw, _ = self.lstm(h)
        fine, _ = self.lstm(canonical(h))
        return raw, fine, self.cell(h[:, 0], fine[:, -1])


@fixture("uc202_recurrent")
def _uc202_recurrent() -> tuple[nn.Module, Any]:
    return Recurrent(), torch.randn(2, 5, 8, generator=_g())


class NormalisedWeights(nn.Module):  # no violation: a weight-normalised conv has its gain's unit
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(8, 8, 3, padding=1), dim=2)
        self.out = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[-1]
        ys, xs = torch.meshgrid(torch.arange(n, dtype=x.dtype) / n, torch.linspace(-1, 1, 8), indexing="ij")
        h = self.conv(x).transpose(1, 2)
        return (self.out(h) * torch.cos(ys + xs)).pow(2).mean()  # the loss's unit is the gain's


@fixture("weight_norm_and_meshgrid_ok")
def _weight_norm() -> tuple[nn.Module, Any]:
    return NormalisedWeights(), torch.randn(2, 8, 6, generator=_g())
