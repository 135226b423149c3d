"""Small models with what a capture could bake in: a custom op from a module of its own, casts
relative to the input's dtype, a mask at the dtype's limit, batch-norm statistics."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    import numpy as np


@torch.library.custom_op("ucktest::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    """A custom op that only importing this module registers."""
    return x * 2


@twice.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _twice_backward(ctx, grad):  # type: ignore[no-untyped-def]
    return grad * 2


twice.register_autograd(_twice_backward)


class CustomOp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.ucktest.twice(self.lin(x))


class Relative(nn.Module):
    """HF style: statistics in float32, the result in the input's dtype, a causal mask at the
    dtype's minimum; a float64 copy must run (and equal the original in float64)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = self.lin(x).to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        h = h.to(dtype)
        n = x.shape[-2]
        mask = torch.full((n, n), torch.finfo(dtype).min, dtype=dtype, device=x.device).triu(1)
        scores = h @ x.transpose(-1, -2) + mask
        return F.scaled_dot_product_attention(h, x, x) + scores.softmax(-1) @ x


class DetachedMemory(nn.Module):
    """XLNet style: the hidden states returned as memory, detached; an in-place op elsewhere
    makes the capture lowered, where ``detach`` becomes ``alias``."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.lin(x)
        shifted = h.clone()
        shifted.add_(1.0)
        return (shifted * h).mean(), h[:, 1:].detach()


class NoGradCycles(nn.Module):
    """HRM's k-step gradient: early cycles of a recurrence run under ``torch.no_grad()``, only the
    last one propagates gradients (export wraps the region, and lowering inlines it)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.zeros_like(x)
        for _ in range(2):
            with torch.no_grad():
                h = torch.tanh(self.lin(h + x))
        h = torch.tanh(self.lin(h + x))
        return h.square().mean()


class LogSumExpSink(nn.Module):
    """GraniteMoE-SWA style: attention sinks as ``sigmoid(logsumexp(s) - sink)``; an in-place op
    makes the capture lowered, where ``logsumexp`` would become max, exp, sum and log, whose
    backward rounds differently from the op's own."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.sink = nn.Parameter(torch.randn(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        s = h.clone()
        s.add_(1.0)
        return (torch.sigmoid(torch.logsumexp(s, dim=-1, keepdim=True) - self.sink) * h).mean()


class ConvNorm(nn.Module):
    """Batch-norm statistics and dropout: the training graph differs from the eval graph."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.bn(self.conv(x))).mean((-1, -2))


class ReflectPReLU(nn.Module):
    """UVDoc's conv layer: reflect padding, batch norm, PReLU. Lowered, both the padding and
    PReLU decompose into pieces whose autograd rounds differently from their eager kernels."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, padding_mode="reflect")
        self.bn = nn.BatchNorm2d(8)
        self.act = nn.PReLU(8)
        self.out = nn.Conv2d(8, 2, 3, padding=1, padding_mode="replicate")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.act(self.bn(self.conv(x)))).square().mean()


class ClampsItsWeight(nn.Module):
    """RWKV rescales its weights in place in eval mode (under ``no_grad``): export records the
    new value as a parameter mutation, an extra graph output."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            self.lin.weight.clamp_(-0.1, 0.1)
        return self.lin(x)


class ClipsItsWeightData(nn.Module):
    """Gemma 3n clips its AltUp coefficients through ``weight.data`` in training mode, then
    computes with the weight: export lifted ``.data`` as a fake constant and failed, and the
    update must reach the parameter before the layer reads it, gradients and all."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.out = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.lin.weight.data.clamp_(-0.1, 0.1)
        return self.out(torch.relu(self.lin(x))).sum()


class RoundThrough(torch.autograd.Function):
    """Rounding with a straight-through backward (quantisation-aware training): autograd of the
    traced forward would give zero gradients."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, scale: float) -> torch.Tensor:  # type: ignore[no-untyped-def,override]
        return torch.round(x * scale) / scale

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[no-untyped-def,override]
        return grad, None


class ConfiguredThrough(torch.autograd.Function):
    """YOSO's cumulation in small: a config dict argument and a backward that is not the
    traced forward's derivative."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, config: dict[str, float]) -> torch.Tensor:  # type: ignore[no-untyped-def,override]
        return torch.round(x * config["scale"]) / config["scale"]

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[no-untyped-def,override]
        return grad, None


class StraightThrough(nn.Module):
    def __init__(self, configured: bool = False) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.configured = configured

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        y = ConfiguredThrough.apply(h, {"scale": 4.0}) if self.configured else RoundThrough.apply(h, 4.0)
        return y.pow(2).mean()


class BetaDraw(nn.Module):
    """PI0's flow-matching time in small: ``Beta(...).sample`` applies torch's own
    ``autograd.Function`` (``torch.distributions.dirichlet._Dirichlet``) without grad."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(4, 3)
        self.alpha = nn.Parameter(torch.tensor(1.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = torch.distributions.Beta(self.alpha, torch.tensor(1.0)).sample((x.shape[0],))
        return (self.head(x) * t[:, None]).square().mean()


class _Recomputed(torch.autograd.Function):
    """Reformer's reversible layers in small: the forward runs the layers without grad, the
    backward runs them again with grad (so a traced forward has no gradient at all), and it
    refuses to run in eval mode. Its arguments hold modules: generated code cannot call it."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, layers: nn.ModuleList) -> torch.Tensor:  # type: ignore[no-untyped-def,override]
        ctx.layers = layers
        ctx.save_for_backward(x)
        with torch.no_grad():
            for layer in layers:
                x = layer(x)
        return x

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, None]:  # type: ignore[no-untyped-def,override]
        assert ctx.layers[0].training, "train me in training mode"
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            x = x.detach().requires_grad_()
            y = x
            for layer in ctx.layers:
                y = layer(y)
            torch.autograd.backward(y, grad)
        return x.grad, None


class _ReseededLayer(nn.Module):
    """A layer that reseeds from the system's entropy before its dropout (Reformer's)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            torch.manual_seed(torch.seed() % 2**31)
        return self.drop(torch.tanh(self.lin(x)))


EncoderOutput = namedtuple("EncoderOutput", ["hidden", "scale"])  # Reformer's encoder returns a namedtuple


class _Recomputing(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([_ReseededLayer(), _ReseededLayer()])

    def forward(self, x: torch.Tensor) -> EncoderOutput:
        return EncoderOutput(_Recomputed.apply(x, self.layers), x.abs().amax())


class RecomputesItself(nn.Module):
    """The reversible function applied by the model's own forward: no submodule to keep whole."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Recomputed.apply(x, self.layers).sum()


class Reversible(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(8, 8)
        self.encoder = _Recomputing()
        self.out = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        encoded = self.encoder(self.inp(x))
        return self.out(encoded.hidden / encoded.scale).sum()


class Windowed(nn.Module):
    """Swin's window attention in miniature: the image is padded to a multiple of the window and
    cut into windows. With symbolic image sizes export spends minutes simplifying the padding's
    floor divisions (Swin's null rewrite ran past the zoo's 300 s)."""

    def __init__(self, window: int = 4) -> None:
        super().__init__()
        self.window = window
        self.embed = nn.Conv2d(3, 8, 2, stride=2)
        self.mix = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x).permute(0, 2, 3, 1)
        b, hh, ww, c = h.shape
        w = self.window
        h = nn.functional.pad(h, (0, 0, 0, (w - ww % w) % w, 0, (w - hh % w) % w))
        windows = h.reshape(b, h.shape[1] // w, w, h.shape[2] // w, w, c).transpose(2, 3).reshape(-1, w * w, c)
        return self.mix(windows.softmax(-2)).mean((1, 2))


class Resampling(nn.Module):
    """LW-DETR's bicubic position-table resize and the other resampling kernels: decomposed by
    a lowered capture, they round differently from the kernels the model calls (LW-DETR's null
    rewrite differed in 552 outputs and gradients). The in-place add lowers the capture."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x)
        h.add_(1.0)
        up = F.interpolate(h, scale_factor=1.5, mode="bicubic", align_corners=False)
        aa = F.interpolate(h, size=(5, 7), mode="bilinear", antialias=True)
        near = F.interpolate(h, scale_factor=2, mode="nearest")
        pooled = F.adaptive_avg_pool2d(up, (3, 3))
        return up.square().mean() + aa.square().mean() + near.mean() + pooled.square().mean()


class DropsLowered(nn.Module):
    """Dropout in a lowered capture (the in-place add lowers it): decomposed, it became
    ``native_dropout``, whose CPU kernel scales the mask before the product, while eager
    ``dropout`` scales the product (CLAP's null rewrite differed in training mode)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        h.add_(1.0)
        return self.drop(h).square().mean()


class LoweredCall(nn.Module):
    """One function of a linear layer's output in a lowered capture (the in-place add lowers
    it): whether the generated code computes it with the model's kernel."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        h.add_(0.5)
        return self.fn(h)


# functions whose decompositions round differently from the model's kernels (a scan of ~70
# functions through the null rewrite of a lowered capture found these)
ROUNDING_KERNELS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "glu": lambda h: F.glu(h, -1),
    "log_sigmoid": F.logsigmoid,
    "celu": F.celu,
    "std": lambda h: h.std(-1, keepdim=True) * h,
    "addcmul": lambda h: torch.addcmul(h, h, h, value=0.5),
    "addcdiv": lambda h: torch.addcdiv(h, h, h.exp(), value=0.5),
    "lerp": lambda h: torch.lerp(h, h.sin(), 0.3),
    "kl_div": lambda h: F.kl_div(h.log_softmax(-1), h.sin().softmax(-1), reduction="batchmean"),
    "binary_cross_entropy": lambda h: F.binary_cross_entropy(h.sigmoid(), h.cos().sigmoid()),
    "logaddexp": lambda h: torch.logaddexp(h, h.cos()),
    "xlogy": lambda h: torch.xlogy(h.abs(), h.abs() + 1),
    "sinc": torch.sinc,
    "logit": lambda h: torch.logit(h.sigmoid()),
    "special_entr": lambda h: torch.special.entr(h.abs()),
    "renorm": lambda h: torch.renorm(h, 2, 0, 1.0),
    "mv": lambda h: torch.mv(h[0], h[1, 0]),
    "dot": lambda h: torch.dot(h[0, 0], h[1, 0]),
    "trace": lambda h: torch.trace(h[0, :, :6]),
    # CHMv2's depth bins: the decomposition (arange, scale, shift) rounds some of 256 points otherwise
    "linspace": lambda h: h * torch.linspace(0.001, 12.0, 256).view(32, 8)[-6:],
    "logspace": lambda h: h * torch.logspace(-3.0, 1.1, 256).view(32, 8)[-6:],
    # the overload with tensor ends (CHMv2's bins run from its config's min and max depth tensors)
    "linspace.Tensor_Tensor": lambda h: h * torch.linspace(h.new_tensor(0.001), h.new_tensor(12.0), 256).view(32, 8)[-6:],
}


class DeadDropout(DropsLowered):
    """A dropout whose result is never used (LiLT's last layout stream) still draws its mask in
    eager training; lowering dropped it as dead code, so every later mask came from another point
    of the random stream (LiLT's null rewrite differed by 0.08 in training mode)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        h.add_(1.0)
        self.drop(h)  # dead, but it draws
        return self.drop(h * 2).square().mean()


def _late_field_outputs() -> tuple[type, type]:
    """transformers' ModelOutput classes, built on demand (transformers is a test extra)."""
    from dataclasses import dataclass

    from transformers.utils import ModelOutput

    @dataclass
    class Pooled(ModelOutput):
        last: torch.Tensor | None = None
        pooled: torch.Tensor | None = None
        states: tuple[torch.Tensor, ...] | None = None

    @dataclass
    class Result(ModelOutput):
        logits: torch.Tensor | None = None
        encoder: Pooled | None = None

    return Pooled, Result


class LateField(nn.Module):
    """A nested ModelOutput whose pooled field is set after construction, as QianfanOCR's vision
    tower does (insertion order last, states, pooled), in a graph that lowering re-traces (an
    in-place op): the re-trace rebuilds the output, so the graph returns its fields in
    declaration order (last, pooled, states) while export's output spec still lists insertion
    order."""

    def __init__(self) -> None:
        super().__init__()
        self.lin, self.head = nn.Linear(8, 8), nn.Linear(8, 3)
        self.pooled_cls, self.result_cls = _late_field_outputs()

    def forward(self, x: torch.Tensor) -> object:
        h = self.lin(x).mul_(2)
        enc = self.pooled_cls(last=h, states=(h * 2,))
        enc.pooled = h.mean(1, keepdim=True)
        return self.result_cls(logits=self.head(h), encoder=enc)


class RescalesOnce(nn.Module):
    """RWKV's inference rescaling: the first eval call divides a weight in place and records it in
    a flag; later eval calls leave the weight alone."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.rescaled = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training == self.rescaled:
            with torch.no_grad():
                if self.training:
                    self.lin.weight.mul_(2)
                else:
                    self.lin.weight.div_(2)
            self.rescaled = not self.training
        return self.lin(x)


class ShiftFromSize(nn.Module):
    """Swin's window attention: a stage whose window covers the whole input sets its shift to 0
    on every call, from the input's size alone."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.shift = 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] <= 4:
            self.shift = 0
        return torch.roll(self.lin(x), self.shift, dims=1)


class NumpyMask(nn.Module):
    """wav2vec2's SpecAugment: in training, a time mask drawn with numpy replaces masked frames by
    a learned vector."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.fill = nn.Parameter(torch.zeros(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import numpy as np

        h = self.lin(x)
        if self.training:
            mask = torch.tensor(np.random.rand(h.shape[0], h.shape[1]) < 0.5)
            h = torch.where(mask[..., None], self.fill, h)
        return h


class UnusedHostDraw(nn.Module):
    """MusicGen's LayerDrop: every call draws ``random.uniform(0, 1)``, which decides nothing when
    the layer drop is 0."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.layerdrop = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import random

        if self.training and random.uniform(0, 1) < self.layerdrop:
            return x
        return self.lin(x)


class SwitchesOnce(nn.Module):
    """BigBird: an input too short for block-sparse attention switches the model to full attention
    for good, and the switch re-initialises the attention (a draw from torch's generator, once)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.5)
        self.attention_type = "block_sparse"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.attention_type == "block_sparse" and x.shape[1] <= 16:
            torch.empty(8, 8).uniform_(-1, 1)  # the re-initialised weights, then copied over
            self.attention_type = "original_full"
        return self.drop(self.lin(x))


class NoiseOfItsShape(nn.Module):
    """UnivNet in small: noise drawn at the input's shape with an explicit ``generator=None``
    (an overload export cannot give symbolic sizes) and a branch on a size (which symbolic
    tracing cannot take)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        noise = torch.randn(x.shape, generator=None, dtype=x.dtype)
        if x.shape[1] > 3:
            x = x + 0.1 * noise
        return self.proj(x)


class ScaledWhenLong(nn.Module):
    """Dynamic RoPE in small (``if seq_len > max_position_embeddings: rescale``): a branch on a
    size that export takes for the example's length and keeps as a range of that size."""

    def __init__(self, limit: int = 8) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.limit = limit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        if x.shape[1] > self.limit:
            h = h * (self.limit / x.shape[1])
        return h


class PositionTable(nn.Module):
    """Learned positions sliced to the input's length: export bounds the length by the table's."""

    def __init__(self, n_pos: int = 8) -> None:
        super().__init__()
        self.pos = nn.Parameter(torch.randn(n_pos, 4))
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x + self.pos[: x.shape[1]])


class ScaledByArgument(nn.Module):
    """Non-tensor arguments (a temperature, an optional mask passed as None): export keeps the
    example's values in the graph."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, scale: float = 1.0, mask: torch.Tensor | None = None) -> torch.Tensor:
        h = self.proj(x) * scale
        return h if mask is None else h * mask


class ClampsNonFinite(nn.Module):
    """DETR's encoder layer in small: in training, activations that overflowed are clamped to the
    dtype's range (``if torch.isinf(h).any() or torch.isnan(h).any(): clamp``), a branch on
    activations that every finite step takes the same way."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.out = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.drop(self.proj(x))
        if self.training and (torch.isinf(h).any() or torch.isnan(h).any()):
            c = torch.finfo(h.dtype).max - 1000
            h = torch.clamp(h, min=-c, max=c)
        if not torch.isfinite(h).all():
            h = torch.nan_to_num(h)
        return self.out(h)


class LongestPlusLength(nn.Module):
    """Mimi's padding in small: a value read from an integer input (``lengths.max().item()``)
    and the input's length in one branch condition."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        if lengths.max().item() + x.shape[1] > 10:
            h = h * 2
        return h


class ClampsItsInput(nn.Module):
    """A forward that updates its input in place (token ids clamped to the table): the caller's
    tensor changes, and export returns the update as one more output."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(8, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        ids.clamp_(max=5)
        return self.emb(ids)


class _Dropped(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(4)
        self.proj = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.1)

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return h + self.drop(self.proj(self.norm(h.flatten(0, 1)).view_as(h))) * mask


class DropsLayers(nn.Module):
    """LayerDrop as transformers writes it (``if torch.rand([]) < self.layerdrop: to_drop``):
    each layer's batch norm updates its statistics only when the layer runs, a mask of the
    stream's own shape goes in beside the stream (which of the two a dropped layer leaves is not
    told by shapes), and a scale in the loop body is skipped with the layer."""

    def __init__(self, layerdrop: float = 0.5) -> None:
        super().__init__()
        self.layers = nn.ModuleList([_Dropped() for _ in range(3)])
        self.layerdrop = layerdrop
        self.out = nn.LayerNorm(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = torch.ones_like(x)
        for layer in self.layers:
            to_drop = False
            if self.training and self.layerdrop > 0.0:  # noqa: SIM102  (as transformers writes it)
                if torch.rand([]) < self.layerdrop:
                    to_drop = True
            if not to_drop:
                x = layer(x, mask) * 0.5
        return self.out(x)


class _Across(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.memory = nn.Linear(4, 4)

    def forward(self, h: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        return h + self.proj(h) + self.memory(memory)


class DropsAcross(nn.Module):
    """An encoder-decoder with LayerDrop on both sides (Time Series Transformer): the encoder's
    last layer gives its output straight to every decoder layer's cross-attention, so a dropped
    encoder layer leaves the memory the decoder reads, not the decoder's stream."""

    def __init__(self, layerdrop: float = 0.5) -> None:
        super().__init__()
        self.encoder = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])
        self.decoder = nn.ModuleList([_Across() for _ in range(2)])
        self.layerdrop = layerdrop

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        for layer in self.encoder:
            if not (self.training and torch.rand([]) < self.layerdrop):
                x = x + layer(x)
        for block in self.decoder:
            if not (self.training and torch.rand([]) < self.layerdrop):
                y = block(y, x)
        return y


class DropsWithoutGrad(nn.Module):
    """A frozen encoder with LayerDrop run under ``no_grad`` (NeuCodec's semantic model): its
    output is cut from the graph where the trainable head reads it, after the last layer on the
    path that keeps every layer and after the input dropout on the path that drops them all."""

    def __init__(self, layerdrop: float = 0.5) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.1)
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])
        self.head = nn.Linear(4, 4)
        self.layerdrop = layerdrop

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            h = self.drop(x)
            for layer in self.layers:
                if not (self.training and torch.rand([]) < self.layerdrop):
                    h = h + layer(h)
        return self.head(h)


class Recurrent(nn.Module):
    """An RNNT predictor in small (Parakeet's, Nemotron's): a two-layer recurrent layer whose CPU
    kernel rounds otherwise than the unrolled decomposition export lowers it to."""

    def __init__(self, kind: type[nn.Module]) -> None:
        super().__init__()
        self.rnn = kind(8, 8, num_layers=2, batch_first=True)
        self.out = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.rnn(x)
        return self.out(h)


class GroupedExperts(nn.Module):
    """MoE experts as transformers runs them on CPU in eager: tokens sorted by expert, one grouped
    product (``F.grouped_mm``, whose CPU kernel has no float64), then back in token order, into a
    tensor made with the input's dtype (a literal in the graph)."""

    def __init__(self) -> None:
        super().__init__()
        self.router = nn.Linear(8, 3)
        self.w = nn.Parameter(torch.randn(3, 8, 4) / 8**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        expert = self.router(x).argmax(-1)
        order = expert.argsort()
        offs = torch.bincount(expert, minlength=3).cumsum(0).to(torch.int32)
        y = F.grouped_mm(x[order], self.w.to(x.dtype), offs=offs)
        out = x.new_empty(x.shape[0], 5)  # filled by parts, as DeepSeek's rotary split fills its keys
        out[:, :4] = y[order.argsort()]
        out[:, 4:] = x[:, :1]
        return out.sum(-1)


class WeightNormConv(nn.Module):
    """wav2vec2's positional convolution: weight normalisation over the last dimension (a fused
    CPU kernel), in a forward with an in-place op (so its capture is lowered)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(16, 16, 5, padding=2, groups=4), dim=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x.transpose(1, 2)).transpose(1, 2)
        h.mul_(0.5)
        return x + torch.nn.functional.gelu(h)


def span_mask(shape: tuple[int, int], prob: float, span: int, min_spans: int = 1) -> np.ndarray[Any, Any]:
    """SpecAugment's mask as wav2vec2 computes it: spans of ``span`` steps at starts numpy draws."""
    import numpy as np

    batch, steps = shape
    spans = max(min_spans, int(prob * steps / span + np.random.rand(1).item()))
    mask = np.zeros((batch, steps), dtype=bool)
    for row in mask:
        starts = np.random.choice(steps - span + 1, spans, replace=False)
        for s in starts:
            row[s:s + span] = True
    return mask


class NumpySpecAugment(nn.Module):
    """wav2vec2 in training: a SpecAugment mask from a module-level function that draws from numpy,
    and LayerDrop decided by ``np.random.random()``."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Parameter(torch.randn(8))
        self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))
        self.layerdrop = 0.3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import numpy as np

        h = x.clone()
        if self.training:
            mask = torch.tensor(span_mask((h.shape[0], h.shape[1]), 0.2, 2), dtype=torch.bool)
            h[mask] = self.embed
        for layer in self.layers:
            if not (self.training and np.random.random() < self.layerdrop):
                h = h + layer(h)
        return h


class StreamingChunks(nn.Module):
    """Phi-4-multimodal's audio encoder: a method of the model draws, in training, whether its
    attention chunks are laid out from the start or from the end of the sequence
    (``self.training and np.random.rand() > 0.5``) and builds the chunk mask with numpy."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def _chunk_mask(self, seq_len: int, batch: int, chunk: int) -> torch.Tensor:
        import numpy as np

        starts = np.arange(0, seq_len, chunk)
        if self.training and np.random.rand() > 0.5:
            starts = np.insert((seq_len - starts)[::-1][:-1], 0, 0)
        idx = np.searchsorted(starts, np.arange(seq_len), side="right") - 1
        block = idx[:, None] >= idx[None, :]
        return torch.from_numpy(np.broadcast_to(block, (batch, seq_len, seq_len)).copy())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        mask = self._chunk_mask(h.shape[1], h.shape[0], 3)
        scores = (h @ h.transpose(1, 2)).masked_fill(~mask, -1e9)
        return scores.softmax(-1) @ h


class ChunksOfItsOwn(StreamingChunks):
    """:class:`StreamingChunks` whose method reads its chunk size from its module: no host call
    can stand for it, so the capture holds the layout of one draw as a constant."""

    chunk = 3

    def _chunk_mask(self, seq_len: int, batch: int, chunk: int) -> torch.Tensor:
        import numpy as np

        starts = np.arange(0, seq_len, self.chunk)
        if self.training and np.random.rand() > 0.5:
            starts = np.insert((seq_len - starts)[::-1][:-1], 0, 0)
        idx = np.searchsorted(starts, np.arange(seq_len), side="right") - 1
        return torch.from_numpy(np.broadcast_to(idx[:, None] >= idx[None, :], (batch, seq_len, seq_len)).copy())


class AssertsNoNaN(nn.Module):
    """I-BERT's quantised activation in small: it asserts that the range it tracks holds no NaN
    (``assert x_max.isnan().sum() == 0``), a count of a finiteness test compared with 0."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        x_max = h.detach().amax()
        assert x_max.isnan().sum() == 0, "NaN detected when computing min/max of the activation"
        return h / x_max.abs().clamp(min=1e-5)


class GatedByItsBuffer(nn.Module):
    """EoMT's annealed masks in small: in eval mode a layer applies its mask while a buffer's
    probability for it is above 0 (``self.training or self.probs[i] > 0``), a branch on the
    model's state, not on its weights or its input."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.register_buffer("probs", torch.tensor([1.0, 0.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        for i in range(2):
            if self.training or self.probs[i] > 0:
                h = h * torch.sigmoid(h)
        return h.sum()


class RelativeTable(nn.Module):
    """SAM's decomposed relative positions: a table read at ``q - k + (n - 1)`` for every pair of
    a 64-wide grid, so each row is read up to 64 times and its gradient is a scatter-add with
    repeated indices, which the CPU sums in the order its threads finish."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(127, 8) * 0.02)
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        coords = torch.arange(n)
        rel = self.table[coords[:, None] - coords[None, :] + (n - 1)]  # (n, n, C)
        return torch.einsum("bhwc,hkc->bhwk", self.lin(x), rel)


class SelectsFrames(nn.Module):
    """OmniASR's audio path: LayerDrop in training (so the capture reads real values), the frames
    an integer mask keeps (``h[mask.bool()]``), and a check that as many positions of a float
    stream are marked (``x[mask.unsqueeze(-1).expand_as(x)]``: the stream gives the shape only)."""

    def __init__(self, layerdrop: float = 0.5, by_values: bool = False) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(2)])
        self.layerdrop = layerdrop
        self.by_values = by_values  # a branch on the kept frames' values besides

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            if self.training and torch.rand([]) < self.layerdrop:
                continue
            x = x + layer(x)
        kept = x[mask.bool()]
        if self.by_values and kept.sum() > 0:
            kept = -kept
        if x[mask.bool().unsqueeze(-1).expand_as(x)].numel() != kept.numel():
            raise ValueError("frames and mask do not match")
        return kept.sum(0)


@dataclass
class ExpertsConfig:
    """A config object the experts modules share (as HF modules share their model's config)."""

    width: int = 8
    n_experts: int = 4


class _HitExperts(nn.Module):
    """DBRX's experts: a loop over the experts a batch hit (a branch on the routing), each
    expert's tokens gathered, transformed, weighted and added back; dropout inside, and routing
    weights rounded by an ``autograd.Function`` held as an attribute (as I-BERT holds its
    quantiser's ``apply``)."""

    def __init__(self, config: ExpertsConfig) -> None:
        super().__init__()
        self.config = config
        self.n_experts = n = config.n_experts
        self.w = nn.Parameter(torch.randn(n, config.width, config.width) / config.width**0.5)
        self.drop = nn.Dropout(0.1)
        self.quantise = RoundThrough.apply

    def forward(self, h: torch.Tensor, expert: torch.Tensor, weight: torch.Tensor, **options: Any) -> torch.Tensor:
        out = torch.zeros_like(h)
        hit = torch.bincount(expert, minlength=self.n_experts).nonzero()
        for e in hit:
            tokens = torch.where(expert == e[0])[0]
            out.index_add_(0, tokens, self.drop(h[tokens] @ self.w[e[0]]) * self.quantise(weight[tokens, None], 64.0))
        return out


class LoopsOverExperts(nn.Module):
    """Two blocks of a router and its experts: an experts module cannot be one graph (its
    loop's length is the number of experts a batch hit); the rest can."""

    def __init__(self, d: int = 8, n: int = 4, options: dict[str, Any] | None = None, records: bool = False) -> None:
        super().__init__()
        self.records = records  # the experts' inner outputs, by hooks for the call (as transformers does)
        config = ExpertsConfig(d, n)
        self.routers = nn.ModuleList([nn.Linear(d, n) for _ in range(2)])
        self.experts = nn.ModuleList([_HitExperts(config) for _ in range(2)])
        self.norm = nn.LayerNorm(d)
        self.drop = nn.Dropout(0.1)
        self.options = options or {}  # passed to the experts

    def forward(self, x: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
        seen: list[torch.Tensor] = []
        hooks = [e.drop.register_forward_hook(lambda m, a, out: seen.append(out)) for e in self.experts] \
            if self.records else []
        for router, experts in zip(self.routers, self.experts, strict=True):
            h = self.norm(x).flatten(0, 1)
            weight, expert = router(h).softmax(-1).max(-1)
            x = x + self.drop(experts(h, expert, weight, **self.options).view_as(x))
        for hook in hooks:
            hook.remove()
        return (x, seen) if self.records else x


_COLLECTING: list[list[torch.Tensor]] = []  # what the recorder's hooks record, for the call (a context)


def _record_output(module: nn.Module, args: Any, out: torch.Tensor) -> None:
    if _COLLECTING:
        _COLLECTING[-1].append(out)


class _BranchingLayers(nn.Module):
    """HuBERT's encoder in small: its loop over the layers branches on a value (LayerDrop's draw)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(d, d) for _ in range(2)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.tanh(layer(x if bool(x.sum() > 0) else -x))
        return x


class _RecordsItsLayers(nn.Module):
    """transformers' output capturing imitated: on its first call the model puts hooks of its own
    on its layers and marks itself as transformers does; each call collects what they record."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.encoder = _BranchingLayers(d)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not getattr(self, "_output_capturing_hooks_installed", False):
            for layer in self.encoder.layers:
                layer.register_forward_hook(_record_output)
            self._output_capturing_hooks_installed = True
        _COLLECTING.append([])
        try:
            h = self.encoder(x)
        finally:
            seen = _COLLECTING.pop()
        return h, torch.stack(seen)


class KeepsItsRecorder(nn.Module):
    """The mean of a submodel's recorded hidden states, under a head; the submodel's encoder
    branches on its data (XCodec's shape, with hooks that are not transformers')."""

    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.semantic = _RecordsItsLayers(d)
        self.head = nn.Linear(d, d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, seen = self.semantic(self.head(x))
        return self.drop(h) + seen.mean(0)


class FailsAfterItsExperts(LoopsOverExperts):
    """Qwen2.5-Omni's audio encoder in small: the capture stops at a branch on data first (the
    experts, kept whole), and the model itself fails later on its example (lengths that do not
    fit the features)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        h = super().forward(x)
        assert isinstance(h, torch.Tensor)
        return h.view(h.shape[0] + 1, 5, -1)


class _PadsByValue(nn.Module):
    """Encodec's convolution in small: weight normalisation, and padding decided by a value."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(4, 4, 3))

    def forward(self, x: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
        if length.max() > 2:  # a branch on the value of an input that reaches here as a tensor
            x = F.pad(x, (1, 1))
        return self.conv(x)


class KeepsWeightNormed(nn.Module):
    """A kept module holding a weight-normalised convolution (whose class parametrize makes)."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = _PadsByValue()
        self.out = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = (x.abs().sum(1) > 0).sum(-1)  # from float data: export cannot decide the branch
        return self.out(self.inner(x, length).transpose(1, 2))


class EntropyPatcher(nn.Module):
    """BLT's patcher in small: the entropy of a ``Categorical`` built from logits on every call
    (whose parameter check is a branch on the logits' values)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.distributions.Categorical(logits=self.lin(x)).entropy().unsqueeze(-1)


class _AboveScore(nn.Module):
    """SuperPoint's keypoint decoder in small: the rows whose score is positive (how many, only
    the values say), and a branch on that count."""

    def __init__(self) -> None:
        super().__init__()
        self.score = nn.Linear(8, 1)

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = self.score(h).squeeze(-1)
        kept = h[s > 0] * s[s > 0, None]
        if kept.shape[0] == 0:
            return h[:1], s[:1]
        return kept, s[s > 0]  # two results of the one count


class KeepsAboveScore(nn.Module):
    """A kept module whose result's size none of its arguments' sizes gives: the generated module
    must take the size its call returns, not the example's."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.select = _AboveScore()
        self.out = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept, scores = self.select(self.proj(x).flatten(0, 1))
        return self.out(kept * scores[:, None]).mean(0) * kept.shape[0]


class _HalvesWhenLoud(nn.Module):
    """Keeps every other step when the input is loud (a branch on its values)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.abs().mean() > 0.1:
            return x[:, ::2]
        return x[:, ::2] * 0.5


class BranchesOnAKeptSize(nn.Module):
    """The model's own forward branches on the length a kept module returns (half its input's,
    which none of its arguments' sizes is): with a size of its own the capture cannot follow
    that branch, so the example's length is taken, and the notes say so."""

    def __init__(self) -> None:
        super().__init__()
        self.halve = _HalvesWhenLoud()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.halve(self.lin(x))
        if h.shape[1] > 3:
            h = h[:, :3]
        return h.sum(1)


def regulate(h: torch.Tensor, durations: torch.Tensor) -> torch.Tensor:
    """FastSpeech2's length regulator in small: each step repeated by its duration (how many
    steps, only the values say), after a branch on their sum."""
    if durations.sum() == 0:
        durations = torch.ones_like(durations)
    return torch.repeat_interleave(h, durations, dim=0)


class RegulatesLength(nn.Module):
    """The model's own forward calls a module-level function that branches on its data."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.duration = nn.Linear(4, 1)
        self.out = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        durations = (self.duration(h).squeeze(-1).exp() * 1.5).round().long().clamp(0, 3)
        return self.out(regulate(h, durations)).sum(0)


class DictBatch(nn.Module):
    """A forward that takes the batch as a dict (Lightning-style ``model(batch)``), with a list of
    masks inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(16, 8)
        self.proj = nn.Linear(8, 16)

    def forward(self, batch: dict[str, Any], scale: float = 1.0) -> torch.Tensor:
        h = self.proj(self.emb(batch["input_ids"])) * batch["masks"][0].unsqueeze(-1) * scale
        return F.cross_entropy(h.flatten(0, 1), batch["labels"].flatten())


class CheckpointsBlocks(nn.Module):
    """Blocks run under reentrant activation checkpointing (``checkpoint(block, x,
    use_reentrant=True)``): forward runs each block without grad, backward runs it again."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 8)) for _ in range(2)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        for block in self.blocks:
            x = x + checkpoint(block, x, use_reentrant=True)
        return x


class VariadicDicts(nn.Module):
    """``forward(*parts, **extras)`` with a dict among the parts and a keyword the signature does
    not name."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, *parts: Any, **extras: torch.Tensor) -> torch.Tensor:
        return self.lin(parts[0]["a"] + parts[1] * extras["gain"]).sum()  # type: ignore[no-any-return]
