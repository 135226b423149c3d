"""The code generator is faithful to the model it rewrites: the four silent changes of issue 15
(aliased example inputs, training-mode ops, literal dtypes, missing imports) as regression tests,
and batch-norm statistics kept in training mode."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from unitcheck.models import build

from unitcheck.rewrite.api import rewrite
from unitcheck.rewrite.equal import differences
from unitcheck.runtime import layer_drop
from unitcheck.testing import same_computation
from unitcheck.tracer import TraceError, trace

from ..conftest import needs_hf
from .faithful_models import (
    ROUNDING_KERNELS,
    AssertsNoNaN,
    BetaDraw,
    BranchesOnAKeptSize,
    CheckpointsBlocks,
    ChunksOfItsOwn,
    ClampsItsInput,
    ClampsItsWeight,
    ClampsNonFinite,
    ClipsItsWeightData,
    ConvNorm,
    CustomOp,
    DeadDropout,
    DetachedMemory,
    DictBatch,
    DropsAcross,
    DropsLayers,
    DropsLowered,
    DropsWithoutGrad,
    EntropyPatcher,
    FailsAfterItsExperts,
    GatedByItsBuffer,
    GroupedExperts,
    KeepsAboveScore,
    KeepsItsRecorder,
    KeepsWeightNormed,
    LateField,
    LogSumExpSink,
    LongestPlusLength,
    LoopsOverExperts,
    LoweredCall,
    NoGradCycles,
    NoiseOfItsShape,
    NumpyMask,
    NumpySpecAugment,
    PositionTable,
    RecomputesItself,
    Recurrent,
    ReflectPReLU,
    RegulatesLength,
    Relative,
    RelativeTable,
    Resampling,
    RescalesOnce,
    Reversible,
    ScaledByArgument,
    ScaledWhenLong,
    SelectsFrames,
    ShiftFromSize,
    StraightThrough,
    StreamingChunks,
    SwitchesOnce,
    UnusedHostDraw,
    VariadicDicts,
    WeightNormConv,
    Windowed,
)

HERE = Path(__file__).resolve().parent


def test_aliased_example_inputs_keep_one_placeholder_per_argument() -> None:
    """A factory returning (x, x) as (idx, targets): the rewritten model still reads idx."""
    model, (x, _) = build("gpt", n_layer=1, n_embd=16, n_head=2)
    res = rewrite(model, (x, x))
    g = torch.Generator().manual_seed(1)
    a, b = (torch.randint(0, 65, x.shape, generator=g) for _ in range(2))
    with torch.no_grad():
        assert not torch.equal(res.module(a, b)[0], res.module(b, b)[0])


def test_dropout_stays_a_training_mode_op() -> None:
    """Dropout 0.1 traced in eval mode must still drop in train mode, with the same draws."""
    model, inputs = build("gpt", n_layer=1, n_embd=16, n_head=2, dropout=0.1)
    res = rewrite(model, inputs, to="identity")
    assert "self.training" in res.source
    assert same_computation(model, res.module, inputs, training=True)
    res.module.train()
    with torch.no_grad():
        torch.manual_seed(0)
        first = res.module(*inputs)[1]
        torch.manual_seed(1)
        assert not torch.equal(first, res.module(*inputs)[1])  # dropout is on


def test_casts_and_limits_follow_the_models_dtype() -> None:
    model, x = Relative(), torch.randn(2, 5, 8)
    res = rewrite(model, (x,), to="identity")
    assert "_float_dtype(self)" in res.source and "torch.finfo(_float_dtype(self)).min" in res.source
    assert same_computation(model, res.module, (x,))
    original, generated = copy.deepcopy(model).double(), copy.deepcopy(res.module).double()
    with torch.no_grad():
        assert torch.equal(original(x.double()), generated(x.double()))


@pytest.mark.parametrize(("model_cls", "op"), [(DetachedMemory, "detach"), (LogSumExpSink, "logsumexp"),
                                               (ReflectPReLU, "_prelu_kernel"), (ReflectPReLU, "reflection_pad2d"),
                                               (ReflectPReLU, "replication_pad2d"),
                                               (Resampling, "upsample_bicubic2d"),
                                               (Resampling, "_upsample_bilinear2d_aa"),
                                               (Resampling, "upsample_nearest2d"),
                                               (Resampling, "adaptive_avg_pool2d"),
                                               (DropsLowered, "torch.dropout(")])
def test_lowered_captures_keep_what_autograd_sees(model_cls: type[nn.Module], op: str) -> None:
    """A lowered capture (an in-place op in forward) keeps the op the model called where its
    decomposition differs in eager autograd: ``detach`` (an attached memory would add its own
    gradient), ``logsumexp``, PReLU and reflect or replicate padding (their decomposed backwards
    round differently: UVDoc's null rewrite differed in 320 gradients)."""
    torch.manual_seed(0)
    model = model_cls()
    x = torch.randn(2, 3, 16, 16) if model_cls in (ReflectPReLU, Resampling) else torch.randn(2, 5, 8) * 3
    if model_cls is DropsLowered:
        x = torch.randn(64, 8) * 3
    _regenerates_calling(model, x, op)


@pytest.mark.parametrize("name", sorted(ROUNDING_KERNELS))
def test_lowered_captures_call_the_kernels_that_round_otherwise(name: str) -> None:
    """GLU (Granite Speech's conformer), log-sigmoid, std, lerp, losses: each kept whole in a
    lowered capture, so the null rewrite computes the model's bits, eval and train."""
    torch.manual_seed(0)
    _regenerates_calling(LoweredCall(ROUNDING_KERNELS[name]), torch.randn(4, 6, 8), f"aten.{name}")


@pytest.mark.parametrize(("kind", "op"), [(nn.LSTM, "aten.lstm"), (nn.GRU, "aten.gru"), (nn.RNN, "aten.rnn_tanh")])
def test_recurrent_layers_call_their_own_kernels(kind: type[nn.Module], op: str) -> None:
    """An LSTM's unrolled decomposition differs from the kernel in the last bits (forward and
    gradients, eval and train): generated code calls the kernel. Lint keeps the layer whole
    too, since a rule covers it (one finding for the layer, where its pieces gave one a gate)."""
    from unitcheck.infer import trace_for_inference

    torch.manual_seed(0)
    model, x = Recurrent(kind), torch.randn(2, 5, 8)
    _regenerates_calling(model, x, op)
    lowered = trace_for_inference(model, x, dynamic=True)
    assert any(op in str(n.target) for n in lowered.graph.nodes)


def test_weight_normalisation_calls_its_fused_kernel() -> None:
    """wav2vec2's positional convolution normalises its weight over the last dimension, which the
    CPU computes in a fused kernel; the decomposition a lowered capture held rounded otherwise
    (the null rewrite differed from the model by 1e-8 in every gradient)."""
    torch.manual_seed(0)
    _regenerates_calling(WeightNormConv(), torch.randn(2, 9, 16), "aten._weight_norm")


def test_a_scatter_add_that_sums_in_thread_order_is_compared_deterministically() -> None:
    """The gradient of a table read at repeated indices (SAM's relative positions) is a CPU
    scatter-add whose sum follows thread timing: with two threads, such a gradient differed from
    its first run in 19 of 20 reruns, and SAM's null rewrite "differed" by 1e-9. Comparisons run with
    deterministic kernels, and the user's setting is restored."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch.manual_seed(0)
        model, x = RelativeTable(), torch.randn(2, 64, 64, 8)
        res = rewrite(model, (x,), to="identity")
        for training in (False, True):
            assert differences(model, res.module, (x,), training) == []
    finally:
        torch.set_num_threads(threads)
    assert not torch.are_deterministic_algorithms_enabled()


def _regenerates_calling(model: nn.Module, x: torch.Tensor, op: str) -> None:
    """The null rewrite calls ``op`` and equals the model bit for bit, eval and train."""
    res = rewrite(model, (x,), to="identity")
    assert op in res.source
    for training in (False, True):
        assert differences(model, res.module, (x,), training) == []


def test_a_model_that_cannot_run_in_another_dtype_still_regenerates() -> None:
    """The float64 capture is an inquiry, not a requirement: when the model fails in float64,
    the casts stay as captured and the note says why."""
    torch.manual_seed(0)
    # a literal that follows the dtype, and a float32 weight of its own that float64 rejects
    model = LoweredCall(lambda h: F.bilinear(h + torch.finfo(h.dtype).eps, h, torch.ones(3, 8, 8)).square().mean())
    x = torch.randn(4, 8)
    res = rewrite(model, (x,), to="identity")
    assert any("does not run in torch.float64" in note for note in res.notes)
    for training in (False, True):
        assert differences(model, res.module, (x,), training) == []


def _rotary_in_float64(h: torch.Tensor) -> torch.Tensor:
    """Ergo's rotary table: angles in float64 from integer positions, cast back to the stream's
    dtype; the float32 weight of its own makes a float64 copy fail."""
    pos = torch.arange(h.shape[-1], device=h.device).double() * 0.25
    return F.bilinear(h * torch.cos(pos).to(h.dtype), h, torch.ones(3, 8, 8))


def test_a_cast_back_from_a_dtype_the_model_chose_stays_where_no_dtype_was_compared() -> None:
    """Without a float64 capture to compare with, the casts between float dtypes go so that the
    model runs in its parameters' dtype; a cast from a dtype the model chose itself back to the
    stream's is what keeps the stream in that dtype. Dropped, Ergo's rotary tables stayed in
    float64 and its regenerated attention met float64 queries and float32 values."""
    torch.manual_seed(0)
    model, x = LoweredCall(_rotary_in_float64), torch.randn(4, 8)
    res = rewrite(model, (x,), to="identity")
    assert any("does not run in torch.float64" in note for note in res.notes)
    assert res.module(x).dtype == torch.float32
    for training in (False, True):
        assert differences(model, res.module, (x,), training) == []
    generated = copy.deepcopy(res.module).double()  # the casts follow the parameters' dtype
    assert generated(x.double()).dtype == torch.float64


def _no_float64_kernel(h: torch.Tensor) -> torch.Tensor:
    """A kernel without float64 (``_grouped_mm`` on CPU refuses it so), and a cast back from
    float64 angles to the stream's dtype."""
    if h.dtype == torch.float64:
        raise RuntimeError("Expected mat_a to be Float32, BFloat16 or Float16 matrix, got Double")
    pos = torch.arange(h.shape[-1], device=h.device).double() * 0.25
    return h * torch.cos(pos).to(h.dtype)


def test_a_model_without_float64_has_its_casts_compared_in_bfloat16() -> None:
    """Where the float64 capture fails for want of a kernel, a bfloat16 capture tells which casts
    follow the dtype (Ergo's experts go through ``_grouped_mm``): the cast back is written as the
    model's dtype, and the generated module runs in float64 where the oracle measures."""
    torch.manual_seed(0)
    model, x = LoweredCall(_no_float64_kernel), torch.randn(4, 8)
    res = rewrite(model, (x,), to="identity")
    assert not any("no literal follows the dtype" in note for note in res.notes), res.notes
    assert "dtype = _float_dtype(self)" in res.source
    for training in (False, True):
        assert differences(model, res.module, (x,), training) == []
    generated, x64 = copy.deepcopy(res.module).double(), x.double()
    want = (copy.deepcopy(model.lin).double()(x64) + 0.5) * torch.cos(torch.arange(8).double() * 0.25)
    out = generated(x64)
    assert out.dtype == torch.float64 and torch.allclose(out, want, rtol=1e-12, atol=1e-12)


def test_a_dead_dropout_still_draws() -> None:
    """Random ops whose results are unused survive lowering, so the generated code takes the
    same draws in the same order as the model."""
    torch.manual_seed(0)
    model, x = DeadDropout(), torch.randn(64, 8)
    res = rewrite(model, (x,), to="identity")
    assert res.source.count("torch.dropout(") == 2  # public calls: aten.dropout is torch.dropout
    assert differences(model, res.module, (x,), True) == []


def test_a_no_grad_region_keeps_its_gradient_cut() -> None:
    """HRM's early cycles run under ``torch.no_grad()``: lowering inlined the region, and the
    generated code propagated gradients through every cycle (hrm_text's null rewrite differed by
    up to 36.8 in a gradient). The region's values are detached where they leave it."""
    torch.manual_seed(0)
    model, x = NoGradCycles(), torch.randn(2, 5, 8)
    res = rewrite(model, (x,), to="identity")
    assert "detach" in res.source
    for training in (False, True):
        assert differences(model, res.module, (x,), training) == []


def test_a_parameter_updated_in_place_is_written_back_not_returned() -> None:
    """A parameter mutation is written back to the parameter, as a buffer update is; it was
    returned as an extra output (RWKV's null rewrite returned 6 tensors for 2)."""
    torch.manual_seed(0)
    model, x = ClampsItsWeight(), torch.randn(3, 4)
    res = rewrite(model, (x,), to="identity")
    generated = res.module
    with torch.no_grad():
        generated.lin.weight.copy_(torch.randn(4, 4))  # unclamped again
        out = generated(x)
    assert isinstance(out, torch.Tensor) and out.shape == (3, 4)
    assert float(generated.lin.weight.abs().max()) <= float(torch.tensor(0.1))
    assert torch.equal(out, x @ generated.lin.weight.T + generated.lin.bias)


def test_a_weight_clipped_through_data_is_clipped_before_the_layer_reads_it() -> None:
    """``weight.data.clamp_()`` in training mode: the capture is an export (no fallback), the
    generated training graph writes the clipped weight back where it computes it, and the layer
    then reads the parameter, so its gradient is the layer's (not None, not masked)."""
    torch.manual_seed(0)
    model, x = ClipsItsWeightData(), torch.randn(3, 4)
    assert trace(model, (x,), training=True).method == "export"
    res = rewrite(model, (x,), to="identity")
    train = res.source[res.source.index("def _forward_train"):]
    assert train.index("update_buffer(") < train.index("F.linear(x")
    for training in (False, True):
        assert differences(model, res.module, (x,), training) == []
    generated = res.module.train()
    with torch.no_grad():
        generated.lin.weight.fill_(1.0)
    generated(x).backward()
    assert float(generated.lin.weight.abs().max()) == pytest.approx(0.1)
    assert generated.lin.weight.grad is not None and bool((generated.lin.weight.grad != 0).any())


def test_generated_code_imports_the_module_that_registers_a_custom_op(tmp_path: Path) -> None:
    res = rewrite(CustomOp(), (torch.randn(2, 8),), to="identity")
    assert "import tests.rewrite.faithful_models" in res.source
    path = tmp_path / "model.py"
    path.write_text(res.source)
    script = ("import importlib.util, sys, torch; spec = importlib.util.spec_from_file_location('m', sys.argv[1]); "
              "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
              "print(m.Rewritten()(torch.ones(1, 8)).shape)")
    run = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120,
                         cwd=HERE.parents[1])
    assert run.returncode == 0, run.stderr[-2000:]


def test_batch_norm_statistics_in_training_mode() -> None:
    """Training mode updates the running statistics: the generated module keeps both graphs."""
    torch.manual_seed(0)
    model, x = ConvNorm(), torch.randn(4, 3, 8, 8)
    res = rewrite(model, (x,), to="identity")
    assert "_forward_train" in res.source
    assert same_computation(model, res.module, (x,), training=True)
    assert same_computation(model, res.module, (x,), training=False)


def test_an_image_keeps_its_size_and_the_generated_module_says_so() -> None:
    """Image sizes are fixed at the example's (the batch stays free): the generated module runs
    at any batch and refuses another image size with a one-line error naming the input."""
    torch.manual_seed(0)
    model, x = Windowed(), torch.randn(2, 3, 12, 10)
    res = rewrite(model, (x,), to="identity")
    assert same_computation(model, res.module, (x,), training=False)
    assert same_computation(model, res.module, (torch.randn(5, 3, 12, 10),), training=False)
    with pytest.raises(ValueError, match=r"^x: expected sizes \(\*, 3, 12, 10\), got \(2, 3, 16, 16\)"):
        res.module(torch.randn(2, 3, 16, 16))


def test_a_model_export_cannot_size_symbolically_regenerates_at_the_example_sizes() -> None:
    """Where export fails with symbolic sizes and symbolic tracing fails too (UnivNet's
    ``torch.randn(shape, generator=None)``), the capture fixes every size at the example's, says
    so, and the generated module checks its input's sizes."""
    model, x = NoiseOfItsShape(), torch.randn(2, 5, 8)
    res = rewrite(model, (x,), to="identity")
    assert any("sizes fixed at the example's" in n for n in res.notes)
    assert same_computation(model, res.module, (x,), training=False)
    assert same_computation(model, res.module, (x,), training=True)
    with pytest.raises(ValueError, match=r"^x: expected sizes \(2, 5, 8\), got \(2, 6, 8\)"):
        res.module(torch.randn(2, 6, 8))


@pytest.mark.parametrize(("model", "example", "inside", "outside", "said"), [
    # ``if x.shape[1] > 8``: export narrows the length to 9 and up; a shorter input would run the
    # long branch silently
    # (the feature size, fixed by the projection, is checked as fixed)
    (ScaledWhenLong, (2, 16, 4), [(3, 12, 4), (3, 9, 4)], (2, 4, 4), r"\(\*, 9\.\., 4\), got \(2, 4, 4\)"),
    # a position table bounds the length; export's own lower bound of 2 (it specialises sizes 0
    # and 1) is not the model's, so a single position still runs
    (PositionTable, (2, 6, 4), [(2, 1, 4), (2, 8, 4)], (2, 9, 4), r"\(\*, \.\.8, 4\), got \(2, 9, 4\)"),
])
def test_a_branch_on_a_size_holds_only_in_the_range_it_was_taken_for(
        model: type[nn.Module], example: tuple[int, ...], inside: list[tuple[int, ...]], outside: tuple[int, ...],
        said: str) -> None:
    """The generated module computes the model for sizes in the range export narrowed a size to,
    in both modes, and refuses a size outside it, naming the range."""
    torch.manual_seed(0)
    m = model()
    res = rewrite(m, (torch.randn(*example),), to="identity")
    for shape, training in zip(inside, (False, True)):
        assert same_computation(m, res.module, (torch.randn(*shape),), training=training)
    with pytest.raises(ValueError, match=r"^x: expected sizes " + said):
        res.module(torch.randn(*outside))


def test_an_argument_the_capture_fixed_is_checked_not_ignored() -> None:
    """A float argument and an optional tensor passed as None are constants in the graph: the
    generated module takes them, computes the model for the example's values and refuses others
    (it would otherwise multiply by the example's scale whatever it is given)."""
    torch.manual_seed(0)
    model, x = ScaledByArgument(), torch.randn(2, 5, 4)
    res = rewrite(model, (x, 2.0, None), to="identity")
    assert same_computation(model, res.module, (x, 2.0, None), training=False)
    with pytest.raises(ValueError, match=r"^scale: this module was generated for scale=2\.0, got 3\.0"):
        res.module(x, 3.0, None)
    with pytest.raises(ValueError, match=r"^mask: this module was generated for mask=None, got a Tensor"):
        res.module(x, 2.0, torch.ones(2, 5, 4))


def test_a_branch_on_finite_activations_holds_the_finite_path_and_asserts_it() -> None:
    """DETR's clamp of overflowed activations branches on the activations (after a dropout, so on
    a draw too): the capture holds the path finite values take, which is the model's on every
    healthy step, and the generated module refuses other values at the line that tests them
    instead of computing the finite path for them."""
    import inspect

    lines, start = inspect.getsourcelines(ClampsNonFinite.forward)
    in_training, always = (start + next(i for i, line in enumerate(lines) if test in line)
                           for test in ("torch.isinf(h)", "torch.isfinite(h)"))
    torch.manual_seed(0)
    model, x = ClampsNonFinite(), torch.randn(2, 5, 4)
    res = rewrite(model, (x,), to="identity")
    assert any("whether activations are finite" in n and f"faithful_models.py:{in_training}" in n for n in res.notes)
    assert same_computation(model, res.module, (x,), training=True)
    assert same_computation(model, res.module, (x,), training=False)
    overflowed = x.clone()
    overflowed[0, 0, 0] = float("inf")
    for line, training in ((always, False), (in_training, True)):
        res.module.train(training)
        with pytest.raises(RuntimeError, match=rf"values tested at .*faithful_models.py:{line} are not finite"):
            res.module(overflowed)


def test_a_branch_on_a_buffers_value_holds_its_path_and_asserts_it() -> None:
    """A branch on a floating-point buffer alone (EoMT's mask probabilities) is the model's state:
    the capture holds the branch its value takes, as for an integer buffer, where it was refused
    as a branch on float data; the generated module asserts it, so a module whose buffer has
    since changed fails by name instead of computing the old branch."""
    torch.manual_seed(0)
    model, x = GatedByItsBuffer(), torch.randn(3, 4)
    res = rewrite(model, (x,), to="identity")
    assert any("buffer" in n for n in res.notes), res.notes
    for training in (False, True):
        assert same_computation(model, res.module, (x,), training=training)
    res.module.eval()
    res.module.probs[1] = 1.0  # the second mask turned on: the held branch skipped it
    with pytest.raises(RuntimeError, match=r"a buffer's value branched on at .*faithful_models.py:\d+"):
        res.module(x)


def test_a_count_of_a_finiteness_test_is_a_finiteness_test() -> None:
    """I-BERT asserts ``x_max.isnan().sum() == 0``: the count of NaN compared with 0 is a test of
    finite values (0 for them), so the finite path is held and asserted, where it was refused as
    a branch on activations."""
    torch.manual_seed(0)
    model, x = AssertsNoNaN(), torch.randn(2, 5, 4)
    res = rewrite(model, (x,), to="identity")
    for training in (False, True):
        assert same_computation(model, res.module, (x,), training=training)
    res.module.eval()
    with pytest.raises(RuntimeError, match=r"values tested at .*faithful_models.py:\d+ are not finite"):
        res.module(torch.full_like(x, float("nan")))


def test_the_finite_path_is_held_even_when_the_example_is_not_finite() -> None:
    """The path held is the finite values' one whatever values the capture saw: real-tensor
    propagation gives DETR's encoder activations NaN that the eager model never computes, and an
    example may overflow itself. Captured from such an example, the module computes the model on
    finite inputs and refuses the example."""
    torch.manual_seed(0)
    model, x = ClampsNonFinite(), torch.randn(2, 5, 4)
    overflowed = x.clone()
    overflowed[0, 0, 0] = float("inf")
    res = rewrite(model, (overflowed,), to="identity")
    assert same_computation(model, res.module, (x,), training=True)
    assert same_computation(model, res.module, (x,), training=False)
    with pytest.raises(RuntimeError, match=r"values tested at .*faithful_models.py:\d+ are not finite"):
        res.module(overflowed)


def test_a_branch_on_an_integer_value_and_a_size_is_decided_by_the_example() -> None:
    """A value read from an integer input is metadata the example decides, and the graph
    asserts it; an input's size in the same condition is not a value read from data (it was
    taken for one, refusing Mimi's and PocketTTS's padding). Another decision fails loudly."""
    torch.manual_seed(0)
    model = LongestPlusLength()
    res = rewrite(model, (torch.randn(2, 8, 4), torch.tensor([5, 8])), to="identity")
    assert same_computation(model, res.module, (torch.randn(2, 8, 4), torch.tensor([3, 8])), training=False)
    assert same_computation(model, res.module, (torch.randn(2, 6, 4), torch.tensor([5, 6])), training=True)
    with pytest.raises(RuntimeError, match=r"Runtime assertion failed for expression 10 < s\d+ \+ u\d+"):
        res.module(torch.randn(2, 2, 4), torch.tensor([1, 2]))


def test_an_input_updated_in_place_is_updated_not_returned() -> None:
    """Export returns an in-place update of an input as an extra output; the generated module
    writes it into the caller's tensor, as the model does, and returns what the model returns."""
    model, ids = ClampsItsInput(), torch.tensor([[1, 7, 3], [6, 2, 0]])
    res = rewrite(model, (ids.clone(),), to="identity")
    mine, theirs = ids.clone(), ids.clone()
    assert torch.equal(res.module(mine), model(theirs))
    assert torch.equal(mine, theirs) and not torch.equal(mine, ids)
    assert same_computation(model, res.module, (ids.clone(),), training=True)


def test_a_comparison_too_large_for_memory_is_refused_up_front(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison runs both models a step: a decoder that upsamples a long input would be
    killed for memory (VibeVoice's acoustic decoder in the zoo), so the size is checked first,
    from the capture's symbolic sizes at the example's."""
    from unitcheck.errors import UsageError
    from unitcheck.graphs import float_bytes
    from unitcheck.rewrite.equal import check_fits_in_memory

    model, x = nn.Sequential(nn.Upsample(scale_factor=64.0), nn.Conv1d(4, 4, 3)), torch.randn(2, 4, 16)
    graph = rewrite(model, (x,), to="identity").gct.traced.graph
    check_fits_in_memory(graph)  # 2 x 4 x 1024 floats a value: well inside any budget
    monkeypatch.setenv("UNITCHECK_ORACLE_MEMORY_GB", str(100 * 2**10 / 2**30))  # 100 KiB
    with pytest.raises(UsageError, match=r"^comparing the regenerated module with the model would hold about"):
        check_fits_in_memory(graph)
    # one model's step at a time: its values and their gradients (both models at once refused
    # SAM at 18 GiB, whose whole null rewrite peaks at 8.5 GiB resident)
    need = 2 * float_bytes(graph)
    monkeypatch.setenv("UNITCHECK_ORACLE_MEMORY_GB", str(1.01 * need / 2**30))
    check_fits_in_memory(graph)
    monkeypatch.setenv("UNITCHECK_ORACLE_MEMORY_GB", str(0.99 * need / 2**30))
    with pytest.raises(UsageError):
        check_fits_in_memory(graph)


@pytest.mark.parametrize("configured", [False, True])
def test_autograd_functions_keep_their_backward(configured: bool) -> None:
    """An autograd.Function with its own backward (straight-through rounding) is called again,
    not differentiated through the traced forward (which would give zero gradients); also with
    a dict of literals among its arguments (YOSO's config: its null rewrite differed by 0.39)."""
    model, x = StraightThrough(configured), torch.randn(3, 8)
    res = rewrite(model, (x,), to="identity")
    assert ("ConfiguredThrough" if configured else "RoundThrough") in res.source
    assert same_computation(model, res.module, (x,), training=True)


def test_a_function_from_a_torch_module_is_imported_from_it() -> None:
    """PI0: the Beta draw's ``_Dirichlet.apply`` was written as the attribute path
    ``torch.distributions.dirichlet._Dirichlet_apply``, which does not exist (an internal error
    in the zoo's null rewrite)."""
    model, x = BetaDraw(), torch.randn(5, 4)
    res = rewrite(model, (x,), to="identity")
    assert "from torch.distributions.dirichlet import _Dirichlet as" in res.source
    for training in (False, True):
        assert differences(model, res.module, (x,), training) == [], training


def test_a_module_applying_a_function_generated_code_cannot_call_is_kept_whole() -> None:
    """Reformer: an autograd.Function over a list of layers (forward without grad, layers run
    again in backward) is kept whole in the module that applies it; inlined, the generated
    module had no gradients. Its backward refuses eval mode, and so must the generated one's;
    its layers reseed from the system's entropy, which the comparison draws from the seed."""
    torch.manual_seed(0)
    model, x = Reversible(), torch.randn(3, 8)
    res = rewrite(model, (x,), to="identity")
    assert res.kept == ["encoder"], res.kept
    for training in (False, True):
        assert differences(model, res.module, (x,), training) == [], training


def test_a_function_the_model_itself_applies_is_refused_not_inlined() -> None:
    with pytest.raises(TraceError, match="only a submodule that applies one can be kept whole"):
        rewrite(RecomputesItself(), (torch.randn(3, 8),), to="identity")


def test_a_backward_only_the_model_refuses_is_a_difference() -> None:
    torch.manual_seed(0)
    model, x = Reversible(), torch.randn(3, 8)
    inlined = nn.Sequential(model.inp, *model.encoder.layers, model.out)
    inlined.forward = lambda x: model.out(model.encoder.layers[1](model.encoder.layers[0](model.inp(x)))
                                          / model.inp(x).abs().amax()).sum()
    assert differences(model, inlined, (x,), False) == [
        "eval: the model's backward raised AssertionError: train me in training mode, the generated module's ran"]


def test_two_training_steps_under_one_seed_agree_when_the_model_reseeds_from_entropy() -> None:
    torch.manual_seed(0)
    model, x = Reversible(), torch.randn(3, 8)
    assert differences(model, copy.deepcopy(model), (x,), True) == []


class RejectsItsInputs(nn.Module):
    """A model whose own check fails on the example (as multimodal models reject text without
    media tokens): the capture on meta defers the check, the comparison runs it."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.compiler.is_exporting() and bool((x > 100).any()) is False:
            raise ValueError("Audio features and audio tokens do not match, tokens: 0, features: 4")
        return self.lin(x)


def test_a_model_that_fails_on_its_own_inputs_is_a_user_error() -> None:
    from unitcheck.errors import UsageError

    model, x = RejectsItsInputs(), torch.randn(2, 4)
    res = rewrite(model, (x,), to="identity")
    with pytest.raises(UsageError, match="fails on its own example inputs in eval mode: ValueError: Audio"):
        differences(model, res.module, (x,), False)


def test_model_outputs_compare_and_return_in_declaration_order() -> None:
    """QianfanOCR's nested output held its fields in another order under export than eagerly,
    and the null rewrite was reported as differing (a (2, 17, 64) output against a (2, 4, 64)
    one): both sides now flatten every ModelOutput in declaration order."""
    torch.manual_seed(0)
    model, x = LateField(), torch.randn(2, 5, 8)
    assert list(model(x).encoder.keys()) == ["last", "states", "pooled"]
    res = rewrite(model, (x,), to="identity")
    shapes = [tuple(t.shape) for t in res.module(x)]
    assert shapes == [(2, 5, 3), (2, 5, 8), (2, 1, 8), (2, 5, 8)]  # logits, last, pooled, states
    for training in (False, True):
        assert differences(model, res.module, (x,), training) == []


def test_a_model_whose_state_decides_its_next_call_is_not_regenerated() -> None:
    """RWKV's first eval call rescales its weights in place and sets ``layers_are_rescaled``;
    later calls skip the rescaling. The generated module held the first call's graph and
    rescaled on every call (and cut the weights' gradients). The capture lists the state the
    forward set and leaves the model as it was; code generation captures again from that state,
    finds another graph, and refuses."""
    from unitcheck.tracer import TraceError, trace

    torch.manual_seed(0)
    model, x = RescalesOnce(), torch.randn(4, 8)
    expected = copy.deepcopy(model).eval()(x)
    g = trace(model, (x,))
    assert g.state_changes == ["rescaled: False -> True"]
    assert model.rescaled is False
    assert torch.equal(model.eval()(x), expected)  # the model still rescales on its first call
    with pytest.raises(TraceError, match=r"sets its own state \(rescaled: False -> True\), and the next call"):
        rewrite(RescalesOnce(), (x,), to="identity")


def test_a_model_that_sets_itself_up_on_its_first_call_regenerates_its_later_calls() -> None:
    """BigBird switches to full attention on a short input and re-initialises its attention once,
    a draw from torch's generator: generated from the first call, the module drew on every call,
    so from the second training step its dropout masks were not the model's. It is generated
    from the calls after the first."""
    torch.manual_seed(0)
    model, x = SwitchesOnce(), torch.randn(2, 6, 8)
    res = rewrite(model, (x,), to="identity")
    assert model.attention_type == "block_sparse"
    assert "uniform" not in res.source
    assert any("sets its own state on its first call (attention_type: 'block_sparse' -> 'original_full')" in n
               for n in res.notes)
    model(x)  # the model's own first call
    for training in (True, False):
        assert differences(model, res.module, (x,), training) == []


def test_state_set_from_the_input_alone_still_regenerates() -> None:
    """Swin sets a stage's shift to 0 whenever the window covers the input: the next call computes
    the same graph, so the model regenerates, equal to the original."""
    torch.manual_seed(0)
    model, x = ShiftFromSize(), torch.randn(2, 3, 8)
    res = rewrite(model, (x,), to="identity")
    assert model.shift == 1
    assert differences(model, res.module, (x,), False) == []


def test_a_draw_from_numpy_is_not_baked_into_generated_code() -> None:
    """SpecAugment masks come from ``np.random``: a capture in training mode held one mask as a
    constant, and the generated module applied it at every step. The capture sees the draw, and
    code generation refuses; linting (eval mode) is unaffected."""
    from unitcheck.tracer import TraceError, trace

    model, x = NumpyMask(), torch.randn(2, 6, 8)
    assert trace(model, (x,)).host_draws == []
    assert trace(model, (x,), training=True).host_draws == ["numpy"]
    with pytest.raises(TraceError, match="draws from numpy's random generator, and the graph holds the draw"):
        rewrite(model, (x,), to="identity")


def test_numpy_draws_of_a_library_function_and_a_layer_drop_are_drawn_by_generated_code() -> None:
    """wav2vec2 draws its SpecAugment mask in a module-level function and its LayerDrop with
    ``np.random.random()``: both become ops that draw from numpy when the generated module runs,
    so it draws what the model draws (equal under every seed the comparison takes) and a new mask
    at each step (not the capture's)."""
    torch.manual_seed(0)
    model, x = NumpySpecAugment(), torch.randn(2, 12, 8)
    res = rewrite(model, (x,), to="identity")
    assert "torch.ops.unitcheck.host_call" in res.source and "span_mask" in res.source
    assert "torch.ops.unitcheck.numpy_rand" in res.source
    for training in (False, True):
        assert differences(model, res.module, (x,), training) == []
    res.module.train()
    with torch.no_grad():
        steps = [res.module(x) for _ in range(4)]
    assert any(not torch.equal(steps[0], s) for s in steps[1:])


def test_a_method_of_the_model_that_draws_from_numpy_is_called_by_generated_code() -> None:
    """Phi-4-multimodal's audio encoder draws its chunk layout in a method (``_streaming_mask``),
    which reads nothing of the model but its mode: the capture refused it as a data-dependent
    branch. The method becomes a host call like a module-level function, with its mode for
    ``self``, so the generated module draws a layout at each training step as the model does."""
    import numpy as np

    torch.manual_seed(0)
    np.random.seed(0)
    model, x = StreamingChunks(), torch.randn(2, 7, 8)
    res = rewrite(model, (x,), to="identity")
    assert "torch.ops.unitcheck.host_call" in res.source and "_chunk_mask" in res.source
    for training in (False, True):
        assert differences(model, res.module, (x,), training) == []
    res.module.train()
    with torch.no_grad():
        steps = [res.module(x) for _ in range(6)]
    assert any(not torch.equal(steps[0], s) for s in steps[1:])


def test_a_draw_that_decides_a_constant_is_refused() -> None:
    """Where no host call can stand for the method that draws, the branch on the draw computes
    outside the graph and the graph holds its result as a constant: the generated module applied
    one chunk layout at every training step (output differed by 0.76 from the model's) while
    `rewrite` exited 0. The capture with every draw the other way holds another constant, and
    the capture refuses."""
    model, x = ChunksOfItsOwn(), torch.randn(2, 7, 8)
    with pytest.raises(TraceError, match="decides a constant the graph holds"):
        rewrite(model, (x,), to="identity")


def test_a_host_draw_the_graph_does_not_use_still_regenerates() -> None:
    """MusicGen draws from Python's generator on every call for a layer drop of 0: captured again
    one draw further on, the graph is the same, so the model regenerates, equal to the original."""
    from unitcheck.tracer import trace

    model, x = UnusedHostDraw(), torch.randn(2, 6, 8)
    assert trace(model, (x,), training=True).host_draws == ["random"]
    res = rewrite(model, (x,), to="identity")
    for training in (False, True):
        assert differences(model, res.module, (x,), training) == []


def test_ops_inside_a_no_grad_region_keep_their_module_paths() -> None:
    """Lowering inlined a ``torch.no_grad()`` region with the region's metadata on every op, so
    HRM's blocks inside its early cycles were attributed to the model that opened the region:
    their residual adds were not seen as residual, and 15 of hrm_text's 39 were left raw by the
    GCT rewrite (6 UC101 after it)."""
    from unitcheck.fxutil import module_path
    from unitcheck.tracer import trace

    model, x = NoGradCycles(), torch.randn(2, 5, 8)
    g = trace(model, (x,), dynamic=True)
    lin = [n for n in g.graph.nodes if n.op == "call_function" and "linear" in str(n.target)]
    assert len(lin) == 3  # two cycles inside the region, one outside
    assert [module_path(n) for n in lin] == ["lin"] * 3


@pytest.mark.parametrize("model_cls", [DropsLayers, DropsAcross, DropsWithoutGrad])
def test_layer_drop_skips_the_layers_the_model_skips(model_cls: type[nn.Module]) -> None:
    """LayerDrop branches on a random draw in training. The capture holds the path on which
    every layer runs; the generated module branches on each draw as the model does, so that
    under every seed it skips the same layers, draws the same numbers and updates the same
    batch-norm statistics (compared bit for bit by ``differences``)."""
    torch.manual_seed(0)
    model = model_cls()
    x = tuple(torch.randn(2, 5, 4) for _ in range(2 if model_cls is DropsAcross else 1))
    res = rewrite(model, x, to="identity")
    assert any("LayerDrop" in n for n in res.notes)
    layers = [layer for stack in model.children() if isinstance(stack, nn.ModuleList) for layer in stack]
    calls: list[int] = []
    for layer in layers:
        layer.register_forward_hook(lambda *_: calls.append(1))
    ran = []
    for seed in range(8):
        before = len(calls)
        assert not differences(model, res.module, x, True, seed=seed), seed
        ran.append(len(calls) - before)
    assert len(set(ran)) > 1  # the seeds dropped different numbers of layers
    assert same_computation(model, res.module, x, training=False)
    # one comparison runs several seeds for such a module: one that never drops a layer differs
    assert res.module.__unitcheck_draws__ == len(layers)
    names = res.module.forward.__globals__
    call = next(k for k, v in names.items() if v is layer_drop)
    names[call] = lambda read, kept, layer, dropped, *inputs: layer(*inputs)
    try:
        assert differences(model, res.module, x, True)
    finally:
        names[call] = layer_drop


def test_a_grouped_product_regenerates_and_runs_in_float64() -> None:
    """Generated code calls ``_grouped_mm``'s kernel, as the model does in eager (the same bits);
    the CPU kernel has no float64, where the oracle measures, so there it computes every group's
    product and keeps each token's, which export captures (a loop over the offsets' values did
    not)."""
    torch.manual_seed(0)
    model, x = GroupedExperts(), torch.randn(10, 8)
    res = rewrite(model, (x,), to="identity")
    assert "_grouped_mm" in res.source
    for training in (False, True):
        assert differences(model, res.module, (x,), training) == []
    original, x64 = copy.deepcopy(model).double(), x.double()
    with pytest.raises(RuntimeError, match="Float32"):  # the model itself cannot
        original(x64)
    expert = original.router(x64).argmax(-1)  # the loop, written out
    want = torch.stack([x64[i] @ original.w[e] for i, e in enumerate(expert.tolist())]).sum(-1) + x64[:, 0]
    generated = copy.deepcopy(res.module).double()
    assert torch.allclose(generated(x64), want, rtol=1e-12, atol=1e-12)
    assert trace(generated, (x64,), dynamic=True).method == "export"  # as `units DIR --verify` captures it


def test_frames_kept_by_an_integer_mask_regenerate_beside_a_layer_drop() -> None:
    """A layer drop sends the training capture through real values, where a boolean mask's
    count, once compared with a constant by torch's own stride check, lost its symbol ("Pending
    unbacked symbols ... not in returned outputs"); and a mask expanded to a float stream's shape
    counted as read from float data. OmniASR did not regenerate. The count is the mask's, an
    integer input's, and the example's value decides it."""
    torch.manual_seed(0)
    model = SelectsFrames()
    inputs = (torch.randn(2, 5, 8), torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]))
    res = rewrite(model, inputs, to="identity")
    for training in (False, True):
        assert differences(model, res.module, inputs, training) == [], training
    assert res.module(*inputs).shape == (8,)
    with pytest.raises(TraceError, match="data-dependent branch"):  # the frames' values are still the stream's
        rewrite(SelectsFrames(by_values=True), inputs, to="identity")


def test_a_submodule_that_branches_on_its_data_is_kept_whole(tmp_path: Path) -> None:
    """An experts module that loops over the experts a batch hit cannot be one graph: the capture
    keeps it whole and the generated module calls it (DBRX, Switch). Equal in both modes, also on
    a batch whose routing the example never took, and after saving and loading."""
    from unitcheck.rewrite.api import write_rewrite
    from unitcheck.rewrite.save import load

    torch.manual_seed(0)
    model = LoopsOverExperts()
    x = torch.randn(2, 6, 8)
    res = rewrite(model, (x,), to="identity")
    assert res.kept == ["experts.0", "experts.1"] and res.source.count("faithful_models:_HitExperts'") == 2, res.source
    assert any("kept whole" in n and "_HitExperts" in n for n in res.notes), res.notes
    assert res.source.count("= _object(") == 1  # the config they share is built once and shared
    made = [getattr(res.module.experts, i) for i in "01"]
    assert made[0].config is made[1].config == model.experts[0].config
    other = torch.randn(3, 11, 8) * 3  # other sizes and other experts hit
    for inputs in ((x,), (other,)):
        for training in (False, True):
            assert differences(model, res.module, inputs, training) == [], (inputs[0].shape, training)
    write_rewrite(res, str(tmp_path), "LoopsOverExperts", (x,))
    loaded = load(str(tmp_path))
    for training in (False, True):
        assert differences(model, loaded, (other,), training) == [], training


def test_a_model_that_fails_on_its_example_after_a_kept_module_says_so_in_one_line() -> None:
    """Recording a kept module's calls runs the model for real; a model that fails there on its
    own example is the user's one-line error, not a traceback (exit 3)."""
    from unitcheck.errors import UsageError

    with pytest.raises(UsageError, match=r"^the model fails on its own example inputs in eval mode: RuntimeError"):
        rewrite(FailsAfterItsExperts(), (torch.randn(2, 6, 8),), to="identity")


def test_a_module_whose_call_cannot_be_written_down_is_not_kept() -> None:
    """Generated code must pass the kept module what the model passes it: an argument it cannot
    write down (an object) leaves the capture's failure standing, with the reason beside it."""
    model = LoopsOverExperts(options={"cache": object()})
    with pytest.raises(TraceError, match=r"data-dependent branch.*experts.0 cannot be kept whole: .*type object"):
        rewrite(model, (torch.randn(2, 6, 8),), to="identity")


def test_a_kept_module_with_weight_normalisation_is_rebuilt() -> None:
    """Weight normalisation swaps a module's class for one made at run time: a kept module
    holding one is rebuilt from the class it had, with its parametrization registered again."""
    torch.manual_seed(0)
    model = KeepsWeightNormed()
    x = torch.randn(2, 4, 7)
    res = rewrite(model, (x,), to="identity")
    assert "_parametrized(" in res.source and res.kept == ["inner"], (res.kept, res.source)
    for training in (False, True):
        assert differences(model, res.module, (x,), training) == [], training


def test_a_module_whose_inner_outputs_are_recorded_by_hooks_is_not_kept() -> None:
    """transformers records hidden states with hooks it puts on layers for the call: kept whole,
    a module's layers would not run in the capture and the record would be empty (XCodec's
    ``torch.stack`` of none). The capture's failure stands, with that reason."""
    model = LoopsOverExperts(records=True)
    with pytest.raises(TraceError, match=r"experts.0 cannot be kept whole: .*hook on its submodule drop"):
        rewrite(model, (torch.randn(2, 6, 8),), to="identity")


@needs_hf
def test_the_model_that_collects_its_layers_records_is_kept_in_their_place() -> None:
    """XCodec in small: a HuBERT whose encoder branches on LayerDrop's draw in training, its
    hidden states recorded by transformers' hooks on the layers. The encoder cannot be kept whole
    alone; the HuBERT that put the hooks there and collects what they record can (before, the
    capture refused). Equal in both modes, also at another length; the rebuilt HuBERT is not
    marked hooked, so it hooks its own layers."""
    from transformers import HubertConfig, HubertModel

    class SemanticFeatures(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            cfg = HubertConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                               conv_dim=(8, 8), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=4,
                               num_conv_pos_embedding_groups=2, layerdrop=0.1, mask_time_prob=0.0)
            self.semantic = HubertModel(cfg)
            self.head = nn.Linear(16, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            hidden = self.semantic(x, output_hidden_states=True).hidden_states
            return self.head(torch.stack(hidden, 1).mean(1))

    torch.manual_seed(0)
    model, x = SemanticFeatures(), torch.randn(2, 400)
    res = rewrite(model, (x,), to="identity")
    assert res.kept == ["semantic"], res.kept
    assert any("semantic is kept whole in place of semantic.encoder" in n for n in res.notes), res.notes
    assert "_output_capturing_hooks_installed" not in res.source
    assert "unitcheck_runtime_expect_structure(semantic, " in res.source  # its result read as it was
    for training in (False, True):
        assert differences(model, res.module, (x,), training) == [], training
    assert differences(model, res.module, (torch.randn(3, 480),), False) == []


def test_a_kept_modules_result_of_another_structure_is_refused() -> None:
    """The graph reads a kept module's result by the keys and positions of the capture: a result
    with an item fewer (a layer LayerDrop skipped, its hidden state not recorded) or more would
    fail deep inside or be read in part; it is refused, saying where it differs."""
    from unitcheck.runtime import expect_structure

    t = torch.zeros(1)
    template = {"kind": "dict", "cls": None, "keys": ["last_hidden_state", "hidden_states"],
                "items": [{"tensor": 0}, {"kind": "tuple", "items": [{"tensor": 1}, {"tensor": 2}]}]}
    expect_structure({"last_hidden_state": t, "hidden_states": (t, t)}, template, "semantic")
    for hidden in ((t,), (t, t, t)):
        with pytest.raises(ValueError, match=rf"^semantic: the result\['hidden_states'\] has {len(hidden)} items "
                                             r"\(2 when this module was generated\)"):
            expect_structure({"last_hidden_state": t, "hidden_states": hidden}, template, "semantic")
    with pytest.raises(ValueError, match=r"has the keys \['last_hidden_state'\]"):
        expect_structure({"last_hidden_state": t}, template, "semantic")


def test_a_users_own_hook_under_a_hooked_submodel_is_not_kept() -> None:
    """Only transformers' recording hooks are collected by the model that put them there: a hook
    of the user's under such a model would be lost by the rebuilt module, and the capture's failure
    stands, with that reason."""
    with pytest.raises(TraceError, match=r"semantic.encoder cannot be kept whole: .*hook on its submodule layers.0"):
        rewrite(KeepsItsRecorder(), (torch.randn(2, 5, 8),), to="identity")


def test_a_distributions_parameter_check_is_not_a_branch_of_the_graph() -> None:
    """``Categorical(logits=...)`` checks its logits when built (a branch on their values, which
    export cannot follow): captured with the checks off, the model regenerates, equal."""
    torch.manual_seed(0)
    model, x = EntropyPatcher(), torch.randn(2, 6, 8)
    distribution = torch.distributions.Distribution
    before = distribution._validate_args  # (torch.compile turns the checks off for the process)
    distribution.set_default_validate_args(True)
    try:
        res = rewrite(model, (x,), to="identity")
        assert distribution._validate_args  # the default is back after the capture
    finally:
        distribution.set_default_validate_args(before)
    assert res.kept == []
    for training in (False, True):
        assert differences(model, res.module, (x,), training) == [], training


def test_a_size_only_the_kept_module_decides_follows_its_call() -> None:
    """How many rows a kept module returns may be its own to decide (keypoints above a score):
    the capture gives that size a symbol of its own, so the generated module computes with the
    count its call returns, not the example's. (An example count of 0 or 1 is taken for a fixed
    size, as a broadcast dimension is: the example here keeps several rows.)"""
    torch.manual_seed(4)
    model = KeepsAboveScore()
    x, other = torch.randn(2, 6, 8), torch.randn(3, 7, 8)
    counts = [int((model.select.score(model.proj(t).flatten(0, 1)) > 0).sum()) for t in (x, other)]
    assert 1 < counts[0] != counts[1], counts
    res = rewrite(model, (x,), to="identity")
    assert res.kept == ["select"]
    for inputs in ((x,), (other,)):
        for training in (False, True):
            assert differences(model, res.module, inputs, training) == [], (inputs[0].shape, training)


def test_a_kept_size_the_model_branches_on_is_the_examples() -> None:
    """Where a size a kept module decides cannot stay its own (the model branches on it, or
    computes with it in a way export cannot follow: Encodec's convolutions' lengths), the capture
    takes the example's and says so; the generated module is equal at the example's sizes."""
    from unitcheck.tracer import SIZES_FIXED

    torch.manual_seed(0)
    model, x = BranchesOnAKeptSize(), torch.randn(2, 9, 4)
    res = rewrite(model, (x,), to="identity")
    assert res.kept == ["halve"] and any(n.startswith(SIZES_FIXED) and "kept modules" in n for n in res.notes), res.notes
    for training in (False, True):
        assert differences(model, res.module, (x,), training) == [], training


def test_a_library_function_that_branches_on_its_data_is_kept_whole() -> None:
    """A branch inside a module-level function of the model's library, called from the model's
    own forward (FastSpeech2's ``length_regulator``): the function is kept whole, and the
    generated module imports and calls it. Equal on an input whose durations differ."""
    torch.manual_seed(0)
    model = RegulatesLength()
    x, other = torch.randn(6, 4), torch.randn(9, 4) * 2
    res = rewrite(model, (x,), to="identity")
    assert res.kept == ["fn:tests.rewrite.faithful_models:regulate"], res.kept
    assert "import regulate" in res.source and "regulate(" in res.source.split("def forward", 1)[1]
    for inputs in ((x,), (other,)):
        for training in (False, True):
            assert differences(model, res.module, inputs, training) == [], (inputs[0].shape, training)


def test_a_forward_that_takes_a_dict_batch_keeps_its_arguments() -> None:
    """``model(batch)`` with a dict batch: the capture sees the flat tensors, and the generated
    forward took them (``batch_input_ids, batch_masks_0, batch_labels``), so the generated module
    could not be called as the original is (the rewrite's own lint of it failed: "missing a
    required argument"). It takes ``batch`` and reads the tensors out of it."""
    torch.manual_seed(0)
    model = DictBatch()
    ids = torch.randint(0, 16, (2, 5))
    batch = {"input_ids": ids, "masks": [torch.ones(2, 5)], "labels": ids.roll(1, 1)}
    res = rewrite(model, (batch,), to="identity")
    assert "def forward(self, batch):" in res.source
    assert "self._forward_flat(batch['input_ids'], batch['masks'][0], batch['labels'])" in res.source
    for training in (False, True):
        assert differences(model, res.module, (batch,), training) == [], training
    varied = VariadicDicts()
    example = (({"a": torch.randn(2, 4)}, torch.randn(2, 4)), {"gain": torch.randn(2, 4)})
    res = rewrite(varied, example, to="identity")
    assert "def forward(self, *parts, **extras):" in res.source
    assert "self._forward_flat(parts[0]['a'], parts[1], extras['gain'])" in res.source
    for training in (False, True):
        assert differences(varied, res.module, example, training) == [], training


def test_reentrant_activation_checkpointing_is_the_function_it_recomputes() -> None:
    """``checkpoint(block, x, use_reentrant=True)`` runs the block without grad in forward: the
    capture held it so, and the generated module had no gradients at all (the GCT rewrite of such
    a model was called complete and could not train). The checkpoint is captured as the block;
    the generated module equals the original, gradients included, and the notes say it does not
    checkpoint."""
    torch.manual_seed(0)
    model, x = CheckpointsBlocks(), torch.randn(3, 8, requires_grad=True)
    res = rewrite(model, (x,), to="identity")
    for training in (False, True):
        assert differences(model, res.module, (x,), training) == [], training
    assert "_set_grad_enabled(False)" not in res.source
    assert any("reentrant activation checkpoint" in n for n in res.notes)


class FirstArgumentNone(nn.Module):
    """Makes a tensor on its input's device, with its first argument None (SAM's prompt encoder
    given a box and no points)."""

    def forward(self, points: torch.Tensor | None, boxes: torch.Tensor) -> torch.Tensor:
        base = points if points is not None else boxes
        return boxes * 2 + torch.ones(boxes.shape, device=base.device)


def test_a_factory_follows_a_tensor_input_not_a_none_one() -> None:
    model, boxes = FirstArgumentNone(), torch.randn(2, 1, 4)
    res = rewrite(model, {"points": None, "boxes": boxes}, to="identity")
    assert "boxes.device" in res.source and "points.device" not in res.source
    assert same_computation(model, res.module, {"points": None, "boxes": boxes}, training=False)
