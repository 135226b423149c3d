"""The feature axis C and P_perp act over, and the measurement that judges it: a rewrite adds no
dependence between positions the original does not have."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from unitcheck import oracle
from unitcheck.canonical import canonical, orthogonal, residual_update
from unitcheck.infer import trace_for_inference
from unitcheck.rewrite import layout
from unitcheck.rewrite.api import rewrite
from unitcheck.rewrite.equal import differences
from unitcheck.rewrite.mixing import new_dependencies

from .pattern_models import (
    conv_mixer_lm,
    conv_residual,
    learned_positions_lm,
    tiny_dit,
    tiny_unet,
    upsample_skip,
)


def _axes(model: nn.Module, *inputs: torch.Tensor) -> dict[str, int | None]:
    """Each call_function node's feature axis, by node name."""
    graph = trace_for_inference(model, inputs, dynamic=True).graph
    layout.annotate(graph)
    return {n.name: layout.feature_axis(n) for n in graph.nodes if n.op == "call_function"}


class _Moves(nn.Module):
    """Every way the axis moves: a linear (last), heads split off it and merged back, a
    transpose, a convolution (1), a weight on the left of a product (its rows), a reduction."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.conv = nn.Conv1d(8, 8, 3, padding=1)
        self.w = nn.Parameter(torch.randn(6, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)                                  # (B, T, 8): 2
        heads = h.view(h.size(0), h.size(1), 2, 4)        # (B, T, 2, 4): 3, the head features
        merged = heads.reshape(h.size(0), h.size(1), 8)   # (B, T, 8): 2 again
        c = self.conv(merged.transpose(1, 2))             # (B, 8, T): 1
        left = torch.matmul(self.w, c)                    # (B, 6, T): 1, the weight's rows
        pooled = left.mean(-1)                            # (B, 6): 1
        return pooled.unsqueeze(1) + c.amax(1, keepdim=True).transpose(1, 2)[..., :1]


class _GateSplit(nn.Module):
    """Zamba's mixer: the projection moved to axis 1, viewed as (B, X, 2, T), chunked on the
    size-2 axis into a value and a gate, each squeezed: their features are X, at axis 1 (taking
    the innermost axis of the split for the features left C over time)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x).transpose(1, 2).reshape(x.size(0), -1, 2, x.size(1))
        value, gate = h.chunk(2, dim=2)
        groups = gate.reshape(x.size(0), 2, 4, x.size(1)).transpose(0, 1)  # (2, B, 4, T): a group per head
        return value.squeeze(2)[:, :4] * groups[0]


def test_a_split_feature_axis_is_followed_as_all_its_parts() -> None:
    axes = _axes(_GateSplit(), torch.randn(2, 5, 8))
    assert axes["reshape"] == 2  # (B, X, 2, T): the innermost of X and the 2
    assert axes["squeeze"] == 1  # the 2 selected away: X, not time
    assert axes["reshape_1"] == 2 and axes["transpose_1"] == 2  # the gate's X split into groups
    assert axes["select"] == 1 and axes["mul"] == 1  # one group: its features at axis 1, not time


def test_the_feature_axis_follows_the_ops_that_move_it() -> None:
    axes = _axes(_Moves(), torch.randn(2, 5, 8))
    assert axes["linear"] == 2
    assert axes["view"] == 3 and axes["reshape"] == 2  # split into heads, then merged
    assert axes["transpose"] == 1 and axes["conv1d"] == 1
    assert axes["matmul"] == 1 and axes["mean"] == 1
    assert axes["amax"] is None  # reduced over the features: a size-1 axis is not one
    assert axes["unsqueeze"] == 2 and axes["add"] == 2


@pytest.mark.parametrize("fn", ["canonical", "orthogonal", "residual_update"])
def test_c_and_p_perp_over_an_axis_are_the_last_axis_moved(fn: str) -> None:
    """``dim=1`` is the function over the channels: the same values and gradients as moving
    them last and back (float64)."""
    g = torch.Generator().manual_seed(0)
    h, u = (torch.randn(2, 6, 3, 4, dtype=torch.float64, generator=g, requires_grad=True) for _ in range(2))
    alpha = torch.tensor(0.3, dtype=torch.float64)
    call = {"canonical": lambda d, m: canonical(m(h), dim=d),
            "orthogonal": lambda d, m: orthogonal(m(u), m(h), dim=d),
            "residual_update": lambda d, m: residual_update(m(h), m(u), alpha, dim=d)}[fn]
    over = call(1, lambda t: t)
    moved = call(-1, lambda t: t.movedim(1, -1)).movedim(-1, 1)
    assert torch.allclose(over, moved, rtol=1e-12, atol=1e-14)
    weights = torch.cos(torch.arange(over.numel(), dtype=torch.float64)).view_as(over)
    grads = [torch.autograd.grad((y * weights).sum(), (h, u), allow_unused=True) for y in (over, moved)]
    for a, b in zip(*grads, strict=True):
        assert (a is None) == (b is None) and (a is None or torch.allclose(a, b, rtol=1e-10, atol=1e-12))
    if fn == "canonical":
        assert torch.allclose(over.pow(2).mean(1), torch.ones(2, 3, 4, dtype=torch.float64), atol=1e-5)


class _ChannelCanonical(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = canonical(self.conv(x), dim=1)
        return h + orthogonal(self.conv(x * 2), h, dim=1)


def test_a_call_over_the_channels_is_regenerated_with_its_axis() -> None:
    """A model that calls C over axis 1 regenerates as that call (``dim = 1``), bit for bit."""
    torch.manual_seed(0)
    model, x = _ChannelCanonical(), torch.randn(2, 3, 5, 5)
    res = rewrite(model, (x,), to="identity")
    assert res.source.count("dim = 1") == 2, res.source
    assert differences(model, res.module, (x,)) == [] and differences(model, res.module, (x,), True) == []


def test_a_mixer_that_convolves_over_time_stays_causal() -> None:
    """Mamba's mixer moves its features to axis 1: C over the last axis there normalised over
    time, and every position of the rewritten model read the last token (hf:mamba: 15 of 16
    positions moved). C follows the features; the rewrite is causal like the model."""
    model, inputs = conv_mixer_lm()
    res = rewrite(model, inputs)
    assert res.complete, res.gct.unhandled
    assert "dim = 1" in res.source
    assert new_dependencies(model, res.module, inputs) == []


def test_a_feature_map_stream_is_canonical_over_its_channels() -> None:
    """A conv net's stream is canonical per pixel over its channels (the log says so); its
    GroupNorm, which normalises groups of channels over the whole map, is not C and stays."""
    model, inputs = conv_residual()
    res = rewrite(model, inputs)
    line = next(line for line in res.gct.log if line.startswith("[residual_stream] stream input"))
    assert "C acts over its channels, axis 1" in line, line
    assert not any(line.startswith("[branch_normalisers]") for line in res.gct.log), res.gct.log
    model2, inputs2 = learned_positions_lm()  # a (B, T, C) stream: nothing to say
    assert not any("feature map" in line for line in rewrite(model2, inputs2).gct.log)


def test_the_rewrite_refuses_to_call_a_model_that_mixes_positions_complete(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The measurement that judges the axis: with C over the last axis (the width) the dense
    conv net's rewrite makes every pixel of a row read the perturbed one, and the rewrite is
    incomplete, saying so; with C over the channels no output moves that the original's
    does not, and it is complete."""
    model, inputs = conv_residual(dense=True)
    res = rewrite(model, inputs)
    assert res.complete, res.gct.unhandled
    assert new_dependencies(model, res.module, inputs) == []
    monkeypatch.setattr("unitcheck.rewrite.layout.feature_axis", lambda node: None)  # the last axis throughout
    wrong = rewrite(model, inputs)
    assert not wrong.complete
    assert any("mixes positions" in u["reason"] for u in wrong.gct.unhandled), wrong.gct.unhandled


def test_a_head_added_to_the_upsampled_input_takes_the_input_unit() -> None:
    """``head(C(h)) + interpolate(x)``: the head's weight maps canonical coordinates to the
    image's unit, the one unit that makes the sum consistent; the rewrite declares it (it had
    left UC101 "p:head.0.weight and in:x"), the oracle agrees, and no pixel reads another the
    original's does not."""
    model, inputs = upsample_skip()
    res = rewrite(model, inputs)
    assert res.complete, (res.gct.unhandled, res.violations_left)
    assert "[parameter_gains] add@<root> -> head.0.weight declared with the unit in:x" in res.gct.log
    verdict = oracle.verify(res.module, inputs)
    assert verdict.disagreements == [] and verdict.checked == verdict.agreed > 0
    assert new_dependencies(model, res.module, inputs) == []


def test_float_noise_is_not_a_dependence() -> None:
    """A row that moves by rounding (hf:dbrx: 1e-6 of a largest logit of 3, its experts summing
    tokens in an order the batch's routing sets) has not moved; one that moves by a percent, or
    turns NaN in one run only, has."""
    from unitcheck.rewrite.mixing import _moved

    a = torch.full((1, 4, 8), 3.0)
    b = a.clone()
    b[0, 1, 2] += 1e-6
    b[0, 2, 5] += 0.03
    b[0, 3, 0] = float("nan")
    assert _moved(a, b).tolist() == [[False, False, True, True]]


def test_a_diffusion_unet_rewrites_complete_local_and_verified() -> None:
    """A UNet's patterns: each block's SiLU of the shared time embedding (the activation rule
    canonicalised it for the first block only: UC202 left in the others), the embedding's
    projection added to the feature map broadcast over its pixels (UC101 left: a sum with a
    broadcast term was taken for a bias), and the skip concatenated on the channels (each part C
    over its channels; over its width it would mix the pixels of a row, which the measurement
    sees: batch norm keeps the original local)."""
    model, inputs = tiny_unet()
    res = rewrite(model, inputs)
    assert res.complete, (res.gct.unhandled, res.violations_left)
    log = "\n".join(res.gct.log)
    assert "the C(a) above" in log and "[mixed_parts] add@down" in log and "[mixed_parts] cat@<root>" in log, log
    verdict = oracle.verify(res.module, inputs)
    assert verdict.disagreements == [] and verdict.checked == verdict.agreed > 0
    assert new_dependencies(model, res.module, inputs) == []


def test_a_denoising_loss_is_measured_in_its_target_unit() -> None:
    """``mse_loss(eps_pred, noise)`` on canonical coordinates has the unit in:noise^2 (UC302 was
    left): the loss is divided by a constant 1 declared in that unit, which changes no value."""
    model, inputs = tiny_unet(loss=True)
    res = rewrite(model, inputs)
    assert res.complete, (res.gct.unhandled, res.violations_left)
    assert res.units["mse_loss_scale"] == "in:noise^2"
    assert float(res.module.get_buffer("mse_loss_scale")) == 1.0
    assert not any(p.requires_grad for n, p in res.module.named_parameters() if "scale" in n)
    verdict = oracle.verify(res.module, inputs)
    assert verdict.disagreements == [] and verdict.checked == verdict.agreed > 0


class _ResidualOutputSR(nn.Module):
    """A super-resolution net whose output is its residual stream (``out = up(x); out = out +
    block(out)``), trained with an L1 loss against the high-resolution image, a second input."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                                                   nn.Conv2d(8, 3, 3, padding=1)) for _ in range(2)])

    def forward(self, x: torch.Tensor, hr: torch.Tensor) -> torch.Tensor:
        out = torch.nn.functional.interpolate(x, scale_factor=2.0, mode="bilinear")
        for block in self.blocks:
            out = out + block(out)
        return torch.nn.functional.l1_loss(out, hr)


def test_a_canonical_prediction_gets_a_gain_in_its_target_unit() -> None:
    """The stream ends on C, dimensionless, and the target has its own unit (UC101 was left:
    "1 and in:hr"): the prediction is scaled by a learned gain declared in:hr, initialised to 1,
    and the loss divided by a constant in:hr; the oracle agrees and the gain learns."""
    model, inputs = _ResidualOutputSR(), (torch.randn(2, 3, 8, 8), torch.randn(2, 3, 16, 16))
    res = rewrite(model, inputs)
    assert res.complete, (res.gct.unhandled, res.violations_left)
    assert res.units["l1_loss_gain"] == "in:hr" and res.units["l1_loss_scale"] == "in:hr"
    gain = res.module.get_parameter("l1_loss_gain")
    assert float(gain) == 1.0
    res.module(*inputs).backward()
    assert gain.grad is not None and float(gain.grad) != 0.0
    verdict = oracle.verify(res.module, inputs)
    assert verdict.disagreements == [] and verdict.checked == verdict.agreed > 0
    assert verdict.global_checked == verdict.global_agreed > 0


class _TemporalConvLM(nn.Module):
    """A temporal conv net that returns its loss alone: its stream (B, C, T) has its channels
    at axis 1, and C over the last axis is C over time."""

    def __init__(self, vocab: int = 32, d: int = 16) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.convs = nn.ModuleList([nn.Conv1d(d, d, 3, padding=2) for _ in range(2)])
        self.head = nn.Linear(d, vocab)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.emb(idx).transpose(1, 2)
        for conv in self.convs:
            x = x + torch.nn.functional.relu(conv(x)[..., : x.size(-1)])
        logits = self.head(x.transpose(1, 2))
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


def test_a_model_that_returns_its_loss_alone_is_measured_at_the_loss_input(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The positions of a model that returns a scalar loss are the rows its loss compares (what
    its log-softmax reads): with C over time the rewrite leaks later tokens into earlier rows
    and is incomplete; over the channels it is causal and complete."""
    idx = torch.randint(0, 32, (2, 12))
    model = _TemporalConvLM()
    res = rewrite(model, (idx, idx.roll(-1, 1)))
    assert res.complete, res.gct.unhandled
    assert new_dependencies(model, res.module, (idx, idx.roll(-1, 1))) == []
    monkeypatch.setattr("unitcheck.rewrite.layout.feature_axis", lambda node: None)
    wrong = rewrite(model, (idx, idx.roll(-1, 1)))
    assert any("the input of loss 0" in u["reason"] for u in wrong.gct.unhandled), wrong.gct.unhandled


def test_a_diffusion_transformer_rewrites_complete_and_verified() -> None:
    """DiT: every block reads the conditioning vector through its own SiLU (one C(c) for all),
    adaLN's ``1 + scale`` literal, gated residual branches, an einsum unpatchify that carries
    the channel axis, and the denoising loss in the noise's unit (it stopped at UC302)."""
    model, inputs = tiny_dit()
    res = rewrite(model, inputs)
    assert res.complete, (res.gct.unhandled, res.violations_left)
    assert sum("the C(a) above" in line for line in res.gct.log) == 2, res.gct.log
    assert res.units["mse_loss_scale"] == "in:noise^2"
    verdict = oracle.verify(res.module, inputs)
    assert verdict.disagreements == [] and verdict.checked == verdict.agreed > 0
    assert verdict.global_checked == verdict.global_agreed > 0


class _RefusesLargeInputs(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if float(x.abs().max()) > 5:
            raise ValueError("inputs are expected in [-5, 5]")
        return x * 2


def test_an_input_the_models_refuse_is_unmeasured_not_an_error() -> None:
    """The changed input is the models' to refuse: the measurement says it could not run (the
    rewrite then notes it), rather than failing the rewrite with the model's own error."""
    from unitcheck.rewrite.mixing import Unmeasured

    model = _RefusesLargeInputs()
    with pytest.raises(Unmeasured, match="refuse the changed input: ValueError: inputs are expected"):
        new_dependencies(model, model, (torch.full((2, 3, 4), 3.0),))


def test_a_row_of_logits_is_one_position() -> None:
    """A loss's logits (N, V) are N positions: hf:cpmant's original moves every row when the last
    token changes (its prompt attends both ways), 114 of 128 logits of one row by chance not
    at all; compared element by element, the rewrite's move of the other 14 was taken for a
    dependence it added."""
    from unitcheck.rewrite.mixing import _moved

    a = torch.ones(4, 8)
    b = a.clone()
    b[1, 3] = 2.0
    assert _moved(a, b, 0.0).tolist() == [False, True, False, False]
