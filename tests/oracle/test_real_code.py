"""What real models do inside forward, each once, as the smallest model that does it: the oracle
must measure it in float64 end to end, without an internal error, and agree with the engine."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from unitcheck import lint, oracle


def _verified(model: nn.Module, inputs: object, fingerprint: bool = True) -> oracle.OracleResult:
    res = oracle.verify(model, inputs, with_fingerprint=fingerprint)
    assert res.ok, [str(d) for d in res.disagreements]
    assert res.checked == res.agreed > 0
    return res


def _rows(res: oracle.OracleResult) -> dict[str, oracle.FingerprintRow]:
    """The fingerprint's rows by generator."""
    return {r.generator: r for r in res.fingerprint or []}


class CastsToFloat32(nn.Module):
    """Hugging Face style: an RMSNorm that upcasts, a head whose logits are cast with .float()."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(8, 16, bias=False)
        self.norm = nn.Parameter(torch.ones(16))
        self.head = nn.Linear(16, 5, bias=False)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.up(x).to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm
        logits = self.head(h).float()
        return F.cross_entropy(logits, y)


def test_casts_to_float32_keep_the_fingerprint_in_float64() -> None:
    res = _verified(CastsToFloat32(), (torch.randn(6, 8), torch.randint(0, 5, (6,))))
    assert res.raised_casts, "the float32 casts were not raised"
    head = next(r for r in res.fingerprint or [] if "head" in r.generator)
    # the head's weight moves the (unitful) logits: a real, measurable rate, not a float32 zero
    assert not head.predicted_gauge and head.measured > 1e-3 and head.match
    assert head.methods_agree and set(head.methods) >= {"backprop", "finite_difference", "jvp"}


def test_float8_casts_are_raised_like_the_other_lower_precision_casts() -> None:
    """A cast to float8 is a lower-precision float cast like ``.float()``: the oracle keeps the
    value at float64 there too (it multiplied the float8 value by a scale, which CPU kernels do
    not implement: Kolibri 1.1's verify stopped with an internal error)."""
    from ..rules.fixtures import FIXTURES

    res = _verified(*FIXTURES["copysign_fake_quantiser"](), fingerprint=False)  # Kolibri's round trip
    assert res.raised_casts


class OffsetGain(nn.Module):
    """Gemma-style norm: x / rms(x) * (1 + w)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.w = nn.Parameter(torch.zeros(8))
        self.out = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * (1.0 + self.w)
        return F.cross_entropy(self.out(h), y)


def test_a_unit_offset_gain_is_dimensionless() -> None:
    model, inputs = OffsetGain(), (torch.randn(4, 8), torch.randint(0, 3, (4,)))
    report = lint(model, inputs)
    assert "UC103" not in {v.rule for v in report.violations}
    assert all("Var(" not in v.message for v in report.violations)
    res = _verified(model, inputs)
    assert not any(r.generator == "p:w" for r in res.fingerprint or [])  # w is a pure number


@torch.library.custom_op("unitcheck_test::blackbox", mutates_args=())
def blackbox(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ w)


@blackbox.register_fake
def _(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[0], w.shape[1])


def _bb_backward(ctx, g):  # type: ignore[no-untyped-def]
    x, w = ctx.saved_tensors
    d = g * (1 - torch.tanh(x @ w) ** 2)
    return d @ w.T, x.T @ d


blackbox.register_autograd(_bb_backward, setup_context=lambda ctx, inputs, output: ctx.save_for_backward(*inputs))


class Unknown(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pre = nn.Linear(6, 6, bias=False)
        self.w = nn.Parameter(torch.randn(6, 6) * 0.3)
        self.norm = nn.LayerNorm(6)
        self.out = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = blackbox(self.norm(self.pre(x)), self.w)
        return F.cross_entropy(self.out(h), y)


def test_an_op_with_no_rule_consumes_its_inputs_generators() -> None:
    model, inputs = Unknown(), (torch.randn(5, 6), torch.randint(0, 2, (5,)))
    assert "UC901" in {v.rule for v in lint(model, inputs).violations}
    res = oracle.verify(model, inputs, with_fingerprint=True)
    rows = _rows(res)
    # w reaches the loss only through the op nobody knows: not gauge, and measured so
    assert not rows["p:w"].predicted_gauge and rows["p:w"].match
    assert all(r.match for r in rows.values())


class EvalBatchNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn(self.conv(x))).mean((2, 3))
        return F.cross_entropy(self.head(h), y)


def test_eval_mode_batch_norm() -> None:
    model = EvalBatchNorm()
    with torch.no_grad():  # running statistics that are not the identity
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
    _verified(model.eval(), (torch.randn(2, 3, 8, 8), torch.randint(0, 2, (2,))))


class Float32Constant(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        scale = torch.tensor([0.5, 1.0, 2.0, 4.0], dtype=torch.float32).to(h.dtype)  # DeBERTa-v2
        eye = torch.ones(4, dtype=torch.float32)
        return (h * scale + 0 * eye).sum(-1)


def test_float32_constants_built_in_forward() -> None:
    _verified(Float32Constant(), torch.randn(3, 4), fingerprint=False)


class SliceAssign(nn.Module):
    """DeepSeek-style: a new tensor filled by slice assignment."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 3, bias=False)
        self.b = nn.Linear(4, 3, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.a(x), self.b(x)
        out = a.new_zeros(x.shape[0], 6)
        out[:, :3] = a
        out[:, 3:] = b * 2
        return out


def test_slice_assignment_into_a_new_tensor() -> None:
    res = oracle.verify(SliceAssign(), torch.randn(2, 4))
    assert res.violations == res.confirmed == 1  # a's and b's scales meet in one tensor
    assert res.checked == res.agreed and res.global_checked == res.global_agreed


class UninitialisedFill(nn.Module):
    """MiniCPM3-style: ``new_empty`` filled by two slice assignments (uninitialised memory)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 3, bias=False)
        self.b = nn.Linear(4, 3, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x.new_empty(x.shape[0], 6)
        out[:, :3].copy_(self.a(x))
        out[:, 3:].copy_(self.b(x))
        return out


class UninitialisedPad(nn.Module):
    """An uninitialised buffer used as padding, as a method call and as a function."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        pad = h.new_empty(h.shape[0], 2) + torch.empty_like(h[:, :2])
        return torch.cat([h, pad * 0.0], dim=-1)


@pytest.mark.parametrize(("model_cls", "method"), [
    (UninitialisedFill, "export"), (UninitialisedPad, "export"), (UninitialisedPad, "fx")])
def test_uninitialised_buffers(model_cls: type[nn.Module], method: str) -> None:
    res = oracle.verify(model_cls(), torch.randn(2, 4), with_fingerprint=False, method=method)
    assert res.ok, [str(d) for d in res.disagreements]
    assert res.checked == res.agreed > 0 and res.global_checked == res.global_agreed


class EmptyPart(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        empty = h[:, :0]  # a zero-width slice, as padding code makes
        h = torch.cat([h, empty * 3], dim=-1)
        return F.mse_loss(h / h.norm(dim=-1, keepdim=True), y / y.norm(dim=-1, keepdim=True))


def test_empty_tensors() -> None:
    res = _verified(EmptyPart(), (torch.randn(3, 4), torch.randn(3, 4)))
    assert res.grad_checked == res.grad_agreed > 0


class ComplexRotary(nn.Module):
    """Llama-1 style rotary embedding through complex numbers."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(8, 8, bias=False)
        self.k = nn.Linear(8, 8, bias=False)
        freqs = torch.outer(torch.arange(5.0), 1.0 / 10000 ** (torch.arange(0, 8, 2) / 8))
        self.register_buffer("freqs_cis", torch.polar(torch.ones_like(freqs), freqs), persistent=False)

    def rotate(self, x: torch.Tensor) -> torch.Tensor:
        xc = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * self.freqs_cis).flatten(-2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k = self.rotate(self.q(x)), self.rotate(self.k(x))
        return (q * k).sum(-1)


def test_complex_rotary_embeddings() -> None:
    model, x = ComplexRotary(), torch.randn(2, 5, 8)
    assert lint(model, x).coverage == 1.0
    res = _verified(model, x, fingerprint=False)
    assert res.global_checked == res.global_agreed > 0


class IntegerOutputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.fc(x)
        return h.sum(-1), h.argmax(-1), h > 0


@pytest.mark.parametrize("model_cls, inputs", [(IntegerOutputs, (torch.randn(3, 4),))])
def test_integer_and_bool_outputs(model_cls: type[nn.Module], inputs: tuple[torch.Tensor, ...]) -> None:
    res = oracle.verify(model_cls(), inputs)
    assert res.ok and res.checked == res.agreed > 0


class KinkNearOne(nn.Module):
    """A ReLU whose input crosses zero 5e-5 (relative) above the scale of the weight: the
    central difference at h = 1e-4 straddles the kink although the loss is flat at c = 1."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.w * x - t).sum() + (self.w * x).pow(2).mean()


def test_a_kink_inside_the_step_is_resolved_by_a_smaller_step() -> None:
    inputs = (torch.ones(3), torch.full((3,), 1 + 5e-5))
    res = oracle.verify(KinkNearOne(), inputs, with_fingerprint=True, redraw=False)
    row = _rows(res)["p:w"]
    assert row.methods_agree, row.methods
    # the step that agreed is not the first: the first straddles the kink (0.25 off)
    assert abs(row.methods["finite_difference"] - row.methods["backprop"]) < 1e-6 * abs(row.methods["backprop"])


class ReluResidual(nn.Module):
    """ResNet style: a branch added to a stream before a ReLU. Scaling the branch moves the
    elements near zero across the kink, so a central difference errs by O(h), not O(h^2)."""

    def __init__(self) -> None:
        super().__init__()
        self.branch = nn.Linear(16, 64)
        self.head = nn.Linear(64, 3)

    def forward(self, x: torch.Tensor, stream: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.head(F.relu(stream + self.branch(x))), y)


def test_kinks_do_not_make_the_finite_difference_a_disagreement() -> None:
    """Every pre-activation sits 3e-5 (relative) from the kink: a central difference at h = 1e-4
    crosses them all, one at a smaller step converges to the exact rate: no disagreement."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 16, generator=g, dtype=torch.float64), torch.randint(0, 3, (32,), generator=g)
    model64, _, _ = oracle.prepare(ReluResidual(), (x, torch.zeros(32, 64), y))
    with torch.no_grad():
        stream = -model64.branch(x) * (1 - 3e-5)
    res = oracle.verify(model64, (x, stream, y), with_fingerprint=True, redraw=False)
    assert [d for d in res.disagreements if d.mode == "fingerprint"] == [], [str(d) for d in res.disagreements]
    branch = next(r for r in res.fingerprint or [] if "branch" in r.generator)
    assert branch.methods_agree and abs(branch.methods["finite_difference"] - branch.rate) <= 1e-6 * abs(branch.rate)


def test_global_mode_on_a_graph_with_symbolic_output_sizes() -> None:
    """A dynamic (or replayed) capture records symbolic sizes; the global probe is drawn at the
    run's real output shape (exaone4_5_vision failed with "SymIntArrayRef expected to contain only
    concrete integers")."""
    from unitcheck.infer import infer_units
    from unitcheck.tracer import trace

    model = nn.Linear(8, 4).double()
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    tg = trace(model, (x,), dynamic=True)
    assert any(isinstance(d, torch.SymInt) for n in tg.graph.nodes
               if isinstance(n.meta.get("val"), torch.Tensor) for d in n.meta["val"].shape)
    res = oracle.verify_graph(infer_units(model, (x,), traced=tg))
    assert res.ok and res.checked == res.agreed > 0


class ClampedGate(nn.Module):
    """A limit (``clamp(x, -50000, 50000)``, as fp16 guards write it): a violation only inputs
    beyond the limit show."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x).clamp(min=-50000.0, max=50000.0)


def test_a_literal_threshold_is_confirmed_beyond_the_recorded_magnitudes() -> None:
    res = oracle.verify(ClampedGate(), torch.randn(3, 4), with_fingerprint=False)
    assert res.violations == res.confirmed >= 1
    assert res.ok, [str(d) for d in res.disagreements]


class PaddedTiedEmbedding(nn.Module):
    """Pegasus-style: a tied embedding with ``padding_idx``, whose backward zeroes the padding
    row's gradient although the loss depends on that row (the head reads it)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(8, 4, padding_idx=0)
        self.fc = nn.Linear(4, 4)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        h = self.fc(self.emb(ids))
        h = h / h.norm(dim=-1, keepdim=True)
        return F.cross_entropy((h @ self.emb.weight.t()).flatten(0, 1), labels)


@pytest.mark.parametrize("method", ["export", "fx"])
def test_padding_rows_count_in_the_measured_rate(method: str) -> None:
    ids = torch.tensor([[0, 3, 5, 0], [2, 0, 7, 1]])
    inputs = (ids, torch.tensor([1, 0, 2, 3, 0, 4, 5, 6]))
    res = oracle.verify(PaddedTiedEmbedding(), inputs, with_fingerprint=True, method=method)
    assert res.ok, [str(d) for d in res.disagreements]
    assert res.fingerprint and all(r.methods_agree for r in res.fingerprint)


class ThreeTables(nn.Module):
    """LayoutLMv3-style: several embedding tables concatenated; every table's scale reaches the
    loss through the one cat, not only the first two that differ."""

    def __init__(self) -> None:
        super().__init__()
        self.tables = nn.ModuleList(nn.Embedding(8, 2) for _ in range(3))
        self.fc = nn.Linear(6, 5)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        h = torch.cat([t(ids) for t in self.tables], dim=-1)
        return F.cross_entropy(self.fc(h), labels)


def test_every_operand_of_a_mismatched_combine_is_consumed() -> None:
    res = oracle.verify(ThreeTables(), (torch.tensor([1, 2, 3, 4]), torch.tensor([0, 1, 2, 3])),
                        with_fingerprint=True)
    assert res.fingerprint is not None
    tables = [r for r in res.fingerprint if "tables" in r.generator]
    assert len(tables) == 3 and all(r.match and not r.predicted_gauge for r in tables), tables


class AudioPart(nn.Module):
    """Higgs-Audio-style: the audio positions (``ids == token``) get their own norm's scale, the
    rest the text norm's, through ``masked_scatter``."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(8, 4)
        self.audio = nn.Linear(4, 4, bias=False)
        self.text = nn.Linear(4, 4, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.emb(ids)
        mask = (ids == 7).unsqueeze(-1)
        h = h.masked_scatter(mask, self.audio(h[ids == 7]))
        return h.masked_scatter(~mask, self.text(h[ids != 7]))


def test_a_violation_the_example_leaves_empty_is_unexercised_not_refuted() -> None:
    text_only = oracle.verify(AudioPart(), torch.tensor([[1, 2, 3, 4]]))
    assert text_only.ok, [str(d) for d in text_only.disagreements]
    assert text_only.unexercised and text_only.violations == text_only.confirmed
    mixed = oracle.verify(AudioPart(), torch.tensor([[1, 7, 3, 7]]))
    assert mixed.ok and not mixed.unexercised and mixed.confirmed >= 1


class IndicesFromValues(nn.Module):
    """CLVP-style: token ids computed from activations (here ``(|h| + 1).long()``, a UC103) index
    a table; under the draw they leave it, so the rescaled model itself fails."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.table = nn.Embedding(3, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        ids = (h.abs() * 2.0 + 1.0).long()
        return self.table(ids).sum(-1) + h


def test_a_rescaled_run_that_fails_downstream_of_a_violation_is_judged_locally() -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 4)
    res = oracle.verify(IndicesFromValues(), x * 0.3)
    assert res.ok, [str(d) for d in res.disagreements]
    assert res.violations == res.confirmed >= 1
    assert any("global mode not run" in n for n in res.notes), res.notes


class Float32Padding(nn.Module):
    """FastSpeech2-style: a branch on a value (export cannot follow it, so the capture is a
    recorded real run) and a buffer made ``dtype=torch.float`` that a float64 copy fills."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.out = nn.Conv1d(3, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        width = 3 if bool(x.sum() > -1e9) else 4
        h = torch.zeros(x.shape[0], width, 2, dtype=torch.float)
        h[:, :2] = self.fc(x).unsqueeze(1).expand(-1, 2, -1)
        return self.out(h.float())


def test_a_recorded_run_of_a_float64_copy_keeps_float64() -> None:
    _verified(Float32Padding(), torch.randn(2, 4), fingerprint=False)


class RejectsItsInputs(nn.Module):
    """Fuyu-style: a check on values (image tokens against features) that capture defers to a
    runtime assertion, which the example's own values fail."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        torch._check((ids == 7).sum().item() == 2, lambda: "tokens do not match features")
        return self.fc(x)


def test_a_model_that_rejects_its_own_inputs_is_a_user_error() -> None:
    with pytest.raises(oracle.OracleError, match="fails on its own example inputs"):
        oracle.verify(RejectsItsInputs(), (torch.randn(2, 4), torch.tensor([1, 2, 3])))


class FarThreshold(nn.Module):
    """A comparison with a literal far above the recorded values (``h > 1000``, a UC103): only
    inputs that reach it show that the mask depends on the scale."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        return torch.where(h > 1000.0, 0.0, 1.0).sum() + h.norm() / h.norm()


def test_a_far_threshold_on_an_index_output_is_confirmed() -> None:
    res = oracle.verify(FarThreshold(), torch.randn(3, 4))
    assert res.ok, [str(d) for d in res.disagreements]
    assert res.violations == res.confirmed >= 1


class UnusedHead(nn.Module):
    """SigLIP-for-classification-style: a pooling head computed (with a violation inside) and
    returned, but the loss reads another path; its weights are gauge for the loss."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.head = nn.Linear(4, 4)
        self.cls = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.fc(x)
        h = h / h.norm(dim=-1, keepdim=True)
        pooled = torch.tanh(self.head(h))  # UC202, read by nobody's loss
        return F.cross_entropy(self.cls(h), labels), pooled


def test_a_violation_the_loss_does_not_read_consumes_nothing() -> None:
    res = oracle.verify(UnusedHead(), (torch.randn(3, 4), torch.tensor([0, 1, 2])), with_fingerprint=True)
    assert res.fingerprint is not None
    head = [r for r in res.fingerprint if "head" in r.generator]
    assert head and all(r.predicted_gauge and r.match for r in head), head
    assert res.ok, [str(d) for d in res.disagreements]


class SplineBounds(nn.Module):
    """VITS-style spline bounds (``x >= -5``, ``x <= 5``) on values well inside them: random
    witnesses rarely straddle a bound; inputs placed at ``bound / sqrt(c)`` do."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        inside = (h >= -5.0) & (h <= 5.0)
        return torch.where(inside, 1.0, 0.0).sum() + h.norm() / h.norm()


def test_a_bound_is_confirmed_by_inputs_that_straddle_it() -> None:
    res = oracle.verify(SplineBounds(), torch.randn(2, 4) * 0.1)
    assert res.ok, [str(d) for d in res.disagreements]
    assert res.violations == res.confirmed == 2


class TextOnlyExample(nn.Module):
    """A speech model given text only: the audio tower's output is placed at no position
    (``masked_scatter`` with an all-False mask), so its weights do not move the loss, whatever
    violations the tower holds."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(8, 4)
        self.audio = nn.Linear(4, 4)
        self.head = nn.Linear(4, 8)

    def forward(self, ids: torch.Tensor, audio: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        h = self.emb(ids)
        feats = torch.tanh(self.audio(audio))  # UC202 inside the tower
        h = h.masked_scatter((ids == 7).unsqueeze(-1), feats)
        h = h / h.norm()  # one norm over all rows: where rows mix, their scales do too
        return F.cross_entropy(self.head(h).flatten(0, 1), labels)


def test_a_tower_the_example_never_places_is_gauge() -> None:
    ids, labels = torch.tensor([[1, 2, 3, 4]]), torch.tensor([1, 2, 3, 4])
    res = oracle.verify(TextOnlyExample(), (ids, torch.randn(4, 4), labels), with_fingerprint=True)
    assert res.ok, [str(d) for d in res.disagreements]
    tower = [r for r in res.fingerprint or [] if "audio" in r.generator]
    assert tower and all(r.predicted_gauge and r.match for r in tower), tower
    placed = oracle.verify(TextOnlyExample(), (torch.tensor([[1, 7, 3, 7]]), torch.randn(4, 4), labels),
                           with_fingerprint=True)
    assert placed.ok and any(not r.predicted_gauge for r in placed.fingerprint or [] if "audio" in r.generator)


class ParallelUpdate(nn.Module):
    """GCT's orthogonalised update of an update parallel to the stream: the difference is zero
    in exact arithmetic (float64 noise, which a later normaliser amplifies)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        h = h / h.norm(dim=-1, keepdim=True)
        u = 1.7 * h
        orth = u - (u * h).sum(-1, keepdim=True) / (h * h).sum(-1, keepdim=True) * h
        return torch.rms_norm(orth, [4], eps=1e-6) * 3.0 + h


def test_rounding_noise_and_what_a_normaliser_makes_of_it_follow_no_law() -> None:
    torch.manual_seed(0)
    _verified(ParallelUpdate(), torch.randn(3, 4), fingerprint=False)


def test_a_gradient_that_cancels_to_zero_is_rounding_noise() -> None:
    """xLSTM's GCT rewrite: the gradient of its exponential gates' stabiliser is zero in exact
    arithmetic, and in float64 it kept 9.0e-12 of the rounding of the terms that cancel (at a
    value of 1.9, against a loss of 6.15): checked as a scaling law, that noise was reported as a
    disagreement. A gradient with a first-order effect on the loss of 1e-9 still counts."""
    from unitcheck.oracle.compare import rounding_noise

    value = torch.full((4,), 1.9)
    assert rounding_noise(torch.full((4,), 9.0e-12), value, 6.15)
    assert not rounding_noise(torch.full((4,), 6.15e-9 / 1.9), value, 6.15)


def test_a_graph_too_large_for_the_oracle_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNITCHECK_ORACLE_MEMORY_GB", "0.000001")  # about 1 KiB
    with pytest.raises(oracle.OracleError, match="would hold about"):
        oracle.verify(IndicesFromValues(), torch.randn(64, 4))
    monkeypatch.setenv("UNITCHECK_ORACLE_MEMORY_GB", "1")
    oracle.verify(ParallelUpdate(), torch.randn(64, 4))


def test_a_model_whose_float64_copy_is_too_large_is_refused_before_the_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nemotron-H Omni at its default size holds 2.7 billion parameters: the oracle's float64
    copy of them (21 GiB) was made before any check, and the kernel killed the process (the zoo's
    worker died in verify). The copy is refused in one line first; a graph check cannot see it."""
    monkeypatch.setenv("UNITCHECK_ORACLE_MEMORY_GB", str(6 * 2**20 / 2**30))  # 6 MiB
    wide = nn.Linear(1024, 1024)  # 8 MiB in float64, its graph's values a few KiB
    copies: list[nn.Module] = []
    monkeypatch.setattr(nn.Module, "__deepcopy__", lambda self, memo: copies.append(self), raising=False)
    with pytest.raises(oracle.OracleError, match="float64 copy of the model's parameters .* about 0.0 GiB"):
        oracle.verify(wide, torch.randn(2, 1024))
    assert copies == []


class TopQueries(nn.Module):
    """Informer-style ProbSparse attention: a context of mean values, its top-u rows overwritten
    by attention outputs (``context[rows, top] = attn``). The output rows' units differ (a UC101
    in index_put); with u as large as the sequence every row is overwritten and the mean never
    reaches the output."""

    def __init__(self, top: int) -> None:
        super().__init__()
        self.top = top
        self.v = nn.Linear(4, 4, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = self.v(x)
        context = v.mean(-2, keepdim=True).expand_as(v).clone()
        scores = (x @ x.transpose(-1, -2)).softmax(-1)
        top = scores.amax(-1).topk(self.top, dim=-1).indices
        rows = torch.arange(x.shape[0])[:, None]
        context[rows, top] = scores[rows, top] @ v
        return context


@pytest.mark.parametrize("top", [2, 5])
def test_an_index_put_that_overwrites_every_row_is_unexercised(top: int) -> None:
    torch.manual_seed(0)
    res = oracle.verify(TopQueries(top), torch.randn(2, 5, 4))
    assert res.ok, [str(d) for d in res.disagreements]
    assert res.violations >= 1
    if top == 5:  # every row overwritten: the mixing cannot be confirmed on these values
        assert any("index_put" in u for u in res.unexercised), res.unexercised
    else:
        assert not res.unexercised
    assert res.confirmed == res.violations


class LayerScaled(nn.Module):
    """ConvNeXt/CaiT-style: a residual branch multiplied by a learned layer scale initialised
    tiny. The stream's scale still reaches the loss through ``h + gamma * f(norm(h))``, damped
    by gamma (1e-3 gamma of the sensitivity here, the norms without eps so that only gamma acts):
    small, not zero, and it must not fall under the gauge threshold (1e-7 called it gauge)."""

    def __init__(self, gamma: float) -> None:
        super().__init__()
        self.down = nn.Linear(6, 8, bias=False)
        self.norm = nn.LayerNorm(8, eps=0.0)
        self.fc = nn.Linear(8, 8)
        self.gamma = nn.Parameter(torch.full((8,), gamma))
        self.out_norm = nn.LayerNorm(8, eps=0.0)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.down(x)
        h = h + self.gamma * F.gelu(self.fc(self.norm(h)))
        return F.cross_entropy(self.head(self.out_norm(h)), y)


@pytest.mark.parametrize("gamma", [1e-4, 1e-6])
def test_a_tiny_layer_scale_is_not_called_gauge(gamma: float) -> None:
    torch.manual_seed(0)
    res = _verified(LayerScaled(gamma), (torch.randn(4, 6), torch.tensor([0, 1, 2, 0])))
    row = _rows(res)["p:down.weight"]
    assert not row.predicted_gauge and row.match and row.measured < 1e-3 * gamma * 10


class ThresholdRouting(nn.Module):
    """BLT's entropy patcher, DeepSeek-V4's indexer: a projection whose only way to the loss is a
    discrete choice (a threshold here, top-k indices there). The threshold is a UC103 and the
    rescaled model chooses otherwise, but the loss is locally constant along the projection's
    scale: D_g L is exactly 0, so the fingerprint predicts gauge."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Linear(4, 1, bias=False)
        self.a = nn.Linear(4, 4, bias=False)
        self.head = nn.Linear(4, 3, bias=False)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        choose = self.gate(x) > 0.1
        h = self.a(x)
        h = torch.where(choose, h, 2.0 * h)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return F.cross_entropy(self.head(h), y)


def test_a_projection_that_reaches_the_loss_only_through_a_choice_is_gauge() -> None:
    torch.manual_seed(0)
    res = _verified(ThresholdRouting(), (torch.randn(6, 4), torch.tensor([0, 1, 2, 0, 1, 2])))
    assert res.violations >= 1
    row = _rows(res)["p:gate.weight"]
    assert row.predicted_gauge and row.rate == 0.0 and row.match


class PostNormBranch(nn.Module):
    """OLMo-2-style: each branch normalised before it joins the stream, ``h + norm(W h)``. W is a
    gauge direction only with the norm's eps rescaled alongside it, so the floors' share of D_g L
    cancels the weights' share exactly and its truncation error is all that is left."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(7, 8)
        self.branch = nn.Linear(8, 8, bias=False)
        with torch.no_grad():  # a small branch, so that eps is a fair share of its mean square
            self.branch.weight.mul_(0.01)
        self.gain = nn.Parameter(torch.ones(8))
        self.head = nn.Linear(8, 7, bias=False)

    def forward(self, ids: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        b = self.branch(h)
        h = h + b * torch.rsqrt(b.pow(2).mean(-1, keepdim=True) + 1e-5) * self.gain
        return F.cross_entropy(self.head(h).flatten(0, 1), y.flatten())


def test_a_normalised_branch_is_gauge_to_the_floors_own_precision() -> None:
    torch.manual_seed(0)
    ids = torch.randint(0, 7, (2, 5))
    res = _verified(PostNormBranch(), (ids, ids.roll(1, -1)))
    row = _rows(res)["p:branch.weight"]
    assert row.predicted_gauge and row.methods["floors"] != 0.0 and row.measured < 1e-11, row


class FaintBranch(nn.Module):
    """MobileNet-V2's batch norms after a saturated ReLU6, distilled: a branch that mixes a
    normalised value with the raw one (a UC101, so ``w`` is not gauge) and reaches the loss
    scaled by 1e-14. Its whole effect is below the loss's own rounding, so only the chain rule
    (backprop, and the floors' share node by node) can measure it; a difference of the loss
    cannot tell it from gauge."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(7, 8)
        self.w = nn.Linear(8, 8, bias=False)
        self.head = nn.Linear(8, 7, bias=False)

    def forward(self, ids: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        b = self.w(h)
        n = b * torch.rsqrt(b.pow(2).mean(-1, keepdim=True) + 1e-6)
        h = h + 1e-14 * (n + b)
        return F.cross_entropy(self.head(h).flatten(0, 1), y.flatten())


def test_a_branch_below_the_losss_rounding_is_measured_by_the_chain_rule() -> None:
    torch.manual_seed(0)
    ids = torch.randint(0, 7, (2, 5))
    res = _verified(FaintBranch(), (ids, ids.roll(1, -1)))
    row = _rows(res)["p:w.weight"]
    assert not row.predicted_gauge and row.match and abs(row.rate) < 1e-12 and row.threshold < 1e-6, row


class DetachedPositions(nn.Module):
    """XGLM/M2M-100-style sinusoidal positions: a buffer read through ``.detach()`` and added to
    the token embeddings (so it shares their unit). The loss depends on the buffer's scale
    whatever autograd is told; D_g L must count that path like the finite difference does."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(7, 8)
        self.register_buffer("positions", torch.randn(5, 8))
        self.head = nn.Linear(8, 7, bias=False)

    def forward(self, ids: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids) + self.positions.detach()
        return F.cross_entropy(self.head(h).flatten(0, 1), y.flatten())


def test_a_detached_buffer_counts_in_the_measured_rate() -> None:
    torch.manual_seed(0)
    ids = torch.randint(0, 7, (2, 5))
    res = _verified(DetachedPositions(), (ids, ids.roll(1, -1)))
    row = _rows(res)["p:embed.weight"]
    assert row.methods_agree and "b:positions" not in row.generator, row
    assert any("positions" in leaf for leaf in row.leaves), row.leaves


class OneKeyAttention(nn.Module):
    """VideoPrism's spatial attention on a one-patch frame: soft-capped logits (a tanh of a
    unitful value, UC202, consuming the q and k projections) go into a softmax over a single
    key, which is 1 whatever they are. No derivative reaches q or k: D_g L is exactly 0 and the
    violation, though real, moves nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(4, 4, bias=False)
        self.k = nn.Linear(4, 4, bias=False)
        self.v = nn.Linear(4, 3, bias=False)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = torch.tanh((self.q(x) * self.k(x)).sum(-1, keepdim=True))  # one key per query
        return F.cross_entropy(logits.softmax(-1) * self.v(x), y)


def test_a_violation_no_derivative_leaves_consumes_nothing() -> None:
    torch.manual_seed(0)
    res = _verified(OneKeyAttention(), (torch.randn(6, 4), torch.tensor([0, 1, 2, 0, 1, 2])))
    assert res.violations >= 1
    rows = _rows(res)
    assert rows["p:q.weight"].predicted_gauge and rows["p:q.weight"].rate == 0.0
    assert not rows["p:v.weight"].predicted_gauge and rows["p:v.weight"].match


class ClassTokenOnly(nn.Module):
    """CvT's last layer: a class token and the spatial rows projected apart and joined (a cat of
    different units, UC101, consuming both projections), then only the class token read. The
    spatial projection's weights get exactly zero gradient: the loss does not see them."""

    def __init__(self) -> None:
        super().__init__()
        self.cls = nn.Linear(4, 4, bias=False)
        self.spatial = nn.Linear(4, 4, bias=False)
        self.head = nn.Linear(4, 3, bias=False)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        z = torch.cat([self.cls(x[:, :1]), self.spatial(x[:, 1:])], dim=1)
        return F.cross_entropy(self.head(z[:, 0]), y)


def test_a_generator_the_loss_does_not_see_is_gauge() -> None:
    torch.manual_seed(0)
    res = _verified(ClassTokenOnly(), (torch.randn(3, 5, 4), torch.tensor([0, 1, 2])))
    assert res.violations >= 1
    rows = _rows(res)
    assert rows["p:spatial.weight"].predicted_gauge and rows["p:spatial.weight"].rate == 0.0
    assert not rows["p:cls.weight"].predicted_gauge


class NormalisedRouter(nn.Module):
    """DBRX-style MoE routing: softmax over the router's logits (a violation), top-k, weights
    divided by their own L1 norm. With k = 1 the weight is exactly 1, so the loss cannot see the
    router, and its float64 gradient is rounding (t/v - v t/v^2), not 0."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k
        self.inp = nn.Linear(8, 8)
        self.router = nn.Linear(8, 4, bias=False)
        self.experts = nn.Parameter(torch.randn(4, 8, 8) / 3)
        self.out = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        v, i = torch.topk(F.softmax(self.router(h), dim=-1), self.k, dim=-1)
        v = v / torch.norm(v, p=1, dim=-1, keepdim=True)
        e = torch.einsum("tkd,tkde->te", h.unsqueeze(1).expand(-1, self.k, -1) * v.unsqueeze(-1), self.experts[i])
        return F.cross_entropy(self.out(e), y)


@pytest.mark.parametrize("k", [1, 2])
def test_a_gradient_that_is_rounding_is_not_a_derivative(k: int) -> None:
    torch.manual_seed(0)
    res = _verified(NormalisedRouter(k), (torch.randn(6, 8), torch.randint(0, 3, (6,))))
    router = _rows(res)["p:router.weight"]
    assert router.match and router.predicted_gauge == (k == 1), router
    # with two experts the normalised weights depend on the router's scale; with one the rate
    # is rounding, which the threshold covers although it is large against the rounding-sized
    # sensitivity
    assert (router.measured > 1e-3 and abs(router.rate) > 1e-6) if k == 2 else abs(router.rate) < 1e-15, router


class IdsInFloats(nn.Module):
    """Pix2Struct's input in small: each row is a position id stored as a float, then features.
    The ids are read with ``.long()`` (UC204), the features projected; the sum is normalised."""

    def __init__(self) -> None:
        super().__init__()
        self.pos = nn.Embedding(8, 6)
        self.proj = nn.Linear(3, 6)
        self.norm = nn.LayerNorm(6)
        self.head = nn.Linear(6, 2)

    def forward(self, rows: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.proj(rows[:, 1:]) + self.pos(rows[:, 0].long()))
        return F.cross_entropy(self.head(h), y)


def test_ids_truncated_from_a_float_input_are_measured_without_crossing_their_jumps() -> None:
    """Moving the input's whole-number ids by the fingerprint's relative jitter (1e-9) moved some
    across a jump of the truncation (1.0 down to 0.99999999 is id 0): the jittered gradients
    said the UC101 sum's derivative was rounding, so its generators were predicted gauge and
    measured otherwise; and the central difference along the input measured the jumps. The
    truncated input stays put in the jitter, and its direction's finite difference is no
    finding."""
    ids = torch.arange(1, 7, dtype=torch.float64)[:, None].float()
    rows = torch.cat([ids, torch.randn(6, 3, generator=torch.Generator().manual_seed(0))], dim=1)
    model, inputs = IdsInFloats(), (rows, torch.randint(0, 2, (6,), generator=torch.Generator().manual_seed(1)))
    assert {"UC204", "UC101"} <= {v.rule for v in lint(model, inputs).violations}
    res = _verified(model, inputs)
    rows_by_gen = _rows(res)
    assert rows_by_gen and all(r.match for r in rows_by_gen.values()), [
        (g, r.predicted_gauge, r.measured) for g, r in rows_by_gen.items() if not r.match]
    assert not rows_by_gen["p:proj.weight"].predicted_gauge


class SharedBound(nn.Module):
    """Gemma 3n's audio conformer: one 0-d buffer bounds two clamps at different scales (its
    gradient clipping, 1e10), so the second clamp mixes units, and the example never reaches it."""

    def __init__(self, bound: float) -> None:
        super().__init__()
        self.a = nn.Linear(64, 64)
        self.b = nn.Linear(64, 64)
        self.clip = nn.Buffer(torch.tensor(bound), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.clamp(self.a(x), -self.clip, self.clip)
        h = torch.clamp(self.b(torch.tanh(h)), -self.clip, self.clip)
        return h.pow(2).mean()


@pytest.mark.parametrize("bound", [1e10, 3.0])
def test_a_bound_held_in_a_scalar_tensor_is_a_threshold_the_witnesses_reach(bound: float) -> None:
    """Fresh witnesses drew the two bounds independently, so min above max clamped everything
    to one bound (equivariant); the bound's own value is a threshold, as a literal is."""
    model, x = SharedBound(bound), torch.randn(2, 4, 64)
    assert [v.rule for v in lint(model, x).violations].count("UC101") == 1
    res = oracle.verify(model, x)
    assert res.ok and res.violations == res.confirmed == 2, [str(d) for d in res.disagreements]


class Float32Weights(nn.Module):
    """SLANet's decoder in small: weights made in float32 whatever the model's dtype, so its
    float64 copy fails where they meet a float64 activation."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = torch.softmax(torch.ones(x.shape[0], 1, x.shape[1], dtype=torch.float32), -1)
        return torch.matmul(w, torch.tanh(self.inp(x))).pow(2).mean()


def test_a_model_that_makes_float32_tensors_is_verified_from_its_own_dtype() -> None:
    res = oracle.verify(Float32Weights(), torch.randn(2, 3, 4))
    assert res.ok and res.checked == res.agreed > 0 and res.violations == res.confirmed == 1, res


class ThresholdOfAPeak(nn.Module):
    """VITS compares 0-d values with literals (``h.abs().amax() >= 5``): the 0-d value is what
    is compared, not a threshold, so the witnesses must move it."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        return torch.where(h.abs().amax() >= 5.0, h / 5.0, h).pow(2).mean()


def test_a_compared_scalar_is_moved_by_the_witnesses_not_kept_as_a_threshold() -> None:
    res = oracle.verify(ThresholdOfAPeak(), torch.randn(4, 8) * 0.01)  # the draw alone never reaches 5
    assert res.ok and res.violations == res.confirmed == 2, [str(d) for d in res.disagreements]


class GroupedExperts(nn.Module):
    """transformers' MoE experts on CPU: one grouped product over the tokens sorted by expert."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(2, 8, 4))

    def forward(self, x: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        return F.grouped_mm(x, self.w, offs=offs).square().sum()


def test_grouped_products_are_measured_in_float64() -> None:
    """``_grouped_mm``'s CPU kernel has no float64: GLM-4V-MoE's oracle stopped at its first
    expert ("Expected mat_a to be Float32, BFloat16 or Float16 matrix, got Double")."""
    res = _verified(GroupedExperts(), (torch.randn(6, 8), torch.tensor([2, 6], dtype=torch.int32)))
    assert any("w" in r.generator for r in res.fingerprint or [])


class ValueOnlyScale(nn.Module):
    """Ergo style: attention whose logits carry a unit (UC201), with values from a projection of
    their own, normalised after attention. Attention is linear in its values, so scaling the value
    projection scales the output and the norm removes it: a gauge direction despite the violation."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(8, 8, bias=False) for _ in range(3))
        self.head = nn.Linear(8, 5, bias=False)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        q, k, v = (p(x).view(2, 3, 2, 4).transpose(1, 2) for p in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(6, 8)
        return F.cross_entropy(self.head(F.rms_norm(a, (8,))), y)


def test_attention_with_unitful_logits_keeps_the_unit_of_its_values() -> None:
    """The value projection's scale passes through attention whatever the logits: the engine
    predicts it a gauge direction and the measurement agrees (it had called it consumed by the
    UC201, so Ergo's fingerprint predicted a gauge direction broken that measured 1.8e-11)."""
    g = torch.Generator().manual_seed(0)
    res = oracle.verify(ValueOnlyScale(), (torch.randn(6, 8, generator=g), torch.randint(0, 5, (6,), generator=g)),
                        with_fingerprint=True)
    assert res.ok, [str(d) for d in res.disagreements]
    rows = {r.generator.split(":")[-1].split(".")[0]: r for r in res.fingerprint or []}
    assert rows["v"].predicted_gauge and rows["v"].match
    assert not rows["q"].predicted_gauge and rows["q"].match


class BetaTime(nn.Module):
    """PI0: a flow-matching time drawn from a Beta distribution in forward (``dist.sample``)."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(4, 3)
        self.alpha = nn.Parameter(torch.tensor(1.5))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        t = torch.distributions.Beta(self.alpha, torch.tensor(1.0)).sample((x.shape[0],))
        return F.cross_entropy(self.head(x) * t[:, None], y)


def test_a_draw_without_a_derivative_is_taken_as_given() -> None:
    """Autograd has no derivative for the Beta draw (aten::_sample_dirichlet), and the trace does
    not keep the no_grad that ``sample`` runs under: the oracle takes the value drawn as given,
    as the model does, and measures every gradient through the rest (it refused PI0 and PI0.5)."""
    res = oracle.verify(BetaTime(), (torch.randn(5, 4), torch.randint(0, 3, (5,))), with_fingerprint=True)
    assert res.ok, [str(d) for d in res.disagreements]
    rows = {r.generator: r for r in res.fingerprint or []}
    assert rows["p:head.weight"].match and rows["in:x"].match


def test_an_op_without_a_derivative_is_a_one_line_refusal() -> None:
    """An op outside the draws autograd cannot differentiate either: the gradients cannot be
    measured, which the oracle says (an OracleError, exit 2), not an internal error."""

    class NoDerivative(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = nn.Linear(4, 3)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(self.head(x) * torch.special.zeta(x, torch.full_like(x, 2.0)).sum(), y)

    with pytest.raises(oracle.OracleError, match="gradients cannot be measured.*zeta"):
        oracle.verify(NoDerivative(), (torch.rand(5, 4) + 2, torch.randint(0, 3, (5,))), with_fingerprint=True)


class _OldWeightNorm(nn.Module):
    """A TCN block with the old hook-based ``nn.utils.weight_norm``, called once: the module then
    holds the weight it computed as a plain attribute, which deepcopy refuses."""

    def __init__(self) -> None:
        super().__init__()
        with warnings.catch_warnings():  # deprecated in favour of parametrizations.weight_norm
            warnings.simplefilter("ignore")
            self.conv = nn.utils.weight_norm(nn.Conv1d(4, 4, 3, padding=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.relu(self.conv(x))


def test_a_module_holding_a_computed_weight_is_verified() -> None:
    """``--verify`` on the old ``weight_norm`` was an internal error (deepcopy of a non-leaf)."""
    torch.manual_seed(0)
    model, x = _OldWeightNorm(), torch.randn(2, 4, 6)
    model(x)
    res = _verified(model, (x,), fingerprint=False)
    assert res.checked > 0


class RawLogitAttention(nn.Module):
    """Attention on raw projections (UC201 at the attention: its logits scale with the weights'
    norms), explicit or fused, over ``keys`` positions."""

    def __init__(self, fused: bool) -> None:
        super().__init__()
        self.fused = fused
        self.q, self.k, self.v = (nn.Linear(8, 8, bias=False) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.q(x), self.k(x), self.v(x)
        if self.fused:
            return F.scaled_dot_product_attention(q, k, v)
        return (q @ k.transpose(-1, -2)).softmax(-1) @ v


@pytest.mark.parametrize("fused", [False, True])
def test_attention_over_one_key_has_no_logit_violation(fused: bool) -> None:
    """Attention over a single key weights it by 1 whatever the logits (Dia's decoder called on
    its one start frame): the logits' scale cannot reach the output. The softmax rule knew it
    for an axis of size 1; the fused rule reported UC201, and the oracle refuted it."""
    torch.manual_seed(0)
    one, six = (oracle.verify(RawLogitAttention(fused), torch.randn(2, keys, 8)) for keys in (1, 6))
    assert one.ok and six.ok, [str(d) for d in one.disagreements + six.disagreements]
    assert six.violations >= 1 and six.confirmed == six.violations
    assert one.violations == 0 and one.checked == one.float_nodes
