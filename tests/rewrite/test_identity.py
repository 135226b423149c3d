"""The null rewrite (``--to identity``): the generated module equals the original bit for bit,
forward and gradients, in eval mode and in training mode under one seed. This is the code
generator's test, run over the bundled models and a set of transformers architectures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from unitcheck.models import build, names

from unitcheck.cli import main
from unitcheck.rewrite.api import rewrite
from unitcheck.rewrite.equal import differences
from unitcheck.tracer import trace

from ..conftest import needs_hf

# one of each pattern the generator must not bake in: dropout (gpt2, bert, roberta), casts
# relative to the dtype (olmo2, modernbert); the slow set adds a custom op (mixtral), lowered
# graphs (falcon), encoder-decoders and vision
HF_FAST = ["gpt2", "bert", "olmo2"]
HF_SLOW = ["falcon", "llama", "modernbert", "mixtral", "phi", "roberta", "gpt_neox", "gptj", "qwen2", "mistral",
           "gemma", "t5", "bart", "distilbert", "electra", "vit", "whisper", "deberta-v2", "bloom"]


def _check(model, inputs) -> None:  # type: ignore[no-untyped-def]
    res = rewrite(model, inputs, to="identity")
    for training in (False, True):
        diffs = differences(model, res.module, inputs, training)
        assert diffs == [], diffs


@pytest.mark.parametrize("name", [n for n in names() if n != "ngpt"])
def test_bundled_models_regenerate_exactly(name: str) -> None:
    _check(*build(name, **({"dropout": 0.1} if name == "gpt" else {})))


@pytest.mark.parametrize("name", ["gct", "qknorm"])
def test_regenerated_models_keep_their_declarations(name: str) -> None:
    """The original's ``__units__`` (GCT's step sizes and gains, dimensionless by design) are
    the regenerated module's too: without them it lints dirty where the original is clean."""
    from unitcheck import lint

    model, inputs = build(name)
    res = rewrite(model, inputs, to="identity")
    before, after = lint(model, inputs), lint(res.module, inputs)
    assert [(v.rule, v.module) for v in after.violations] == [(v.rule, v.module) for v in before.violations]
    if name == "gct":  # the fused residual update is called again, not inlined as its three calls
        assert res.source.count("residual_update(") == 2 * model.config.n_layer, res.source


@pytest.mark.slow
def test_ngpt_regenerates_exactly() -> None:
    _check(*build("ngpt"))


class SliceFilled(nn.Module):
    """A new tensor filled by slice assignment (DeepSeek's rotary split, RecurrentGemma's state):
    the capture lowers it to ``aten.copy``, which eager autograd cannot differentiate."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 3)
        self.b = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x.new_zeros(x.shape[0], 6)
        out[:, :3] = self.a(x)
        out[:, 3:] = self.b(x)
        return (out * out).mean()


def test_slice_assignment_regenerates_exactly() -> None:
    torch.manual_seed(0)
    _check(SliceFilled(), torch.randn(2, 4))


class TransposedFill(nn.Module):
    """Rows assigned into a new tensor from transposed sources (SuperPoint's descriptors): the
    destination stays contiguous, so the attention's key projection runs as one ``addmm``; laid
    out as the source, it ran as ``mm`` and ``add`` and the key bias's gradient (all rounding,
    as softmax cancels it) was summed in another order."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(24, 64)
        self.key = nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = [self.a(x[i]).t().contiguous() for i in range(x.shape[0])]
        out = torch.zeros((x.shape[0], x.shape[1], 64))
        for i, p in enumerate(parts):
            out[i, : p.shape[1]] = p.t()
        att = torch.softmax(out @ self.key(out).transpose(1, 2) / 8.0, dim=-1)
        return (att @ out).pow(2).sum()


def test_slice_assignment_keeps_the_destinations_layout() -> None:
    torch.manual_seed(0)
    _check(TransposedFill(), torch.randn(4, 64, 24))


class TrimsToShorter(nn.Module):
    """Two streams trimmed to the shorter one before they are concatenated (NeuCodec's semantic
    and acoustic features): ``a[..., :n]`` of the whole length is ``a`` itself in eager, so the
    gradient reaches the projections as a strided slice of the concatenation's gradient; a view
    would hand them a new contiguous copy instead."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv1d(16, 8, 3, padding=1)
        self.b = nn.Conv1d(16, 8, 3, padding=1)
        self.fc = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        a, b = self.a(x), self.b(y)
        n = min(a.shape[-1], b.shape[-1])
        return self.fc(torch.cat([a[..., :n], b[..., :n]], dim=1).transpose(1, 2)).pow(2).sum()


def _gradient_layouts(model: nn.Module, *inputs: torch.Tensor) -> list[tuple[int, ...]]:
    """The strides of the output gradient each convolution's backward receives."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[tuple[int, ...]] = []

    class Strides(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if func is torch.ops.aten.convolution_backward.default:
                seen.append(tuple(args[0].stride()))
            return func(*args, **(kwargs or {}))

    with Strides():
        model(*inputs).backward()
    return seen


def test_a_slice_of_the_whole_length_is_the_tensor_itself() -> None:
    torch.manual_seed(0)
    model, x, y = TrimsToShorter(), torch.randn(2, 16, 12), torch.randn(2, 16, 12)
    res = rewrite(model, (x, y), to="identity")
    assert "index_slice" in res.source
    eager = _gradient_layouts(model, x, y)
    assert eager and all(s[1] == 1 for s in eager)  # a slice of the transposed gradient, not a copy
    assert _gradient_layouts(res.module, x, y) == eager
    _check(model, (x, y))
    shorter = torch.randn(2, 16, 9)
    assert torch.equal(res.module(x, shorter), model(x, shorter))  # a real slice where it trims


class TensorOfReads(nn.Module):
    """A tensor built from Python sequences of 0-d tensors: window offsets read off an integer
    input (Qwen3-ASR's ``torch.tensor(cu_chunk_lens)``) and an index made of tuples of them
    (UDOP's ``mask[rows, cols] = False`` after ``zip(*ind)``). Eager copies their values; a
    capture whose tensors hold no data cannot."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        offsets = [0]
        for n in lens:
            offsets += [n, 1]
        ends = torch.tensor(offsets).cumsum(0)
        keep = torch.ones(x.shape[:2], dtype=torch.bool)
        rows, cols = zip(*torch.stack([torch.arange(len(lens)), lens - 1], -1))
        keep[rows, cols] = False
        return (self.proj(x) * keep[..., None]).sum() + ends[-1]


def test_a_tensor_made_from_a_list_of_tensors_regenerates_exactly() -> None:
    torch.manual_seed(0)
    model, inputs = TensorOfReads(), (torch.randn(2, 5, 8), torch.tensor([3, 5]))
    assert trace(model, inputs, dynamic=True).method == "export"
    res = rewrite(model, inputs, to="identity")
    for training in (False, True):
        assert differences(model, res.module, inputs, training) == []


class FrozenAttention(nn.Module):
    """A frozen encoder run under ``torch.no_grad()`` (NeuCodec's semantic encoder) whose
    attention mask is computed from weights: there eager's SDPA takes the fused CPU kernel,
    which it refuses for a mask that requires grad, so generated code that computes the region
    with grad on takes the math kernel and rounds otherwise."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.bias = nn.Parameter(torch.randn(8, 8))
        self.out = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            q, k, v = self.qkv(x).view(x.shape[0], 8, 3, 2, 8).permute(2, 0, 3, 1, 4)
            h = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=self.bias * 0.5)
            h = h.transpose(1, 2).reshape(x.shape[0], 8, 16)
        return self.out(h).pow(2).mean()


def test_a_no_grad_region_runs_without_grad_again() -> None:
    torch.manual_seed(0)
    model, x = FrozenAttention(), torch.randn(2, 8, 16)
    res = rewrite(model, x, to="identity")
    for training in (False, True):
        assert differences(model, res.module, x, training) == []
    assert torch.is_grad_enabled()  # the region's end gives grad mode back
    with torch.no_grad():  # and gives back what it found
        res.module(x)
        assert not torch.is_grad_enabled()


def test_flex_attention_regenerates_exactly_with_its_score_function() -> None:
    """A model calling ``flex_attention`` (its score function reads a learned per-head slope):
    the capture failed on meta ("only supported on CUDA, CPU..."), and the score and mask
    functions, graphs the operator takes, had no code. They are static methods of the generated
    module; the slope's reads stay the capture's own indexing, so its gradient reaches it."""
    from .pattern_models import flex_attention_lm

    model, inputs = flex_attention_lm()
    res = rewrite(model, inputs, to="identity")
    assert "@staticmethod" in res.source and "torch.ops.higher_order.flex_attention(" in res.source
    assert "buffer_index" in res.source
    for training in (False, True):
        assert differences(model, res.module, inputs, training) == []
    res.module(*inputs)[1].backward()
    slopes = res.module.get_parameter("attn.slopes")
    assert slopes.grad is not None and bool(slopes.grad.abs().sum() > 0)


def test_flex_attention_with_a_document_mask_follows_its_input() -> None:
    """A block mask built from an input (document ids) is computed in the generated module, not
    frozen from the example: equal on another layout of documents too."""
    from .pattern_models import DocumentMaskedAttention, documents

    torch.manual_seed(0)
    model, x = DocumentMaskedAttention(), torch.randn(2, 16, 16)
    res = rewrite(model, (x, documents(6, 10)), to="identity")
    for training in (False, True):
        assert differences(model, res.module, (x, documents(6, 10)), training) == []
    assert differences(model, res.module, (x, documents(3, 5, 8)), False) == []


class NoBackwardHere(nn.Module):
    """A kernel with no backward on this device, as transformers' compiled flex_attention on CPU:
    the forward refuses gradients when it runs for real."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() and not torch.compiler.is_exporting():
            raise RuntimeError("no backward on this device")
        return self.proj(x)


def test_a_model_without_gradients_here_is_told_apart_from_one_that_fails() -> None:
    from unitcheck.errors import UsageError

    model, x = NoBackwardHere(), torch.randn(2, 8)
    res = rewrite(model, x, to="identity")
    with pytest.raises(UsageError, match=r"cannot compute gradients here in eval mode \(its forward with gradients "
                                         r"fails: RuntimeError: no backward on this device; without them it runs\)"):
        differences(model, res.module, x, False)


class CompiledChild(nn.Module):
    """torchtitan's per-block compile: a child wrapped by ``torch.compile``."""

    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(16)
        self.mlp = torch.compile(nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 16)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.ln(x))


def test_a_compiled_submodule_is_compared_run_eagerly() -> None:
    """Inductor's kernels round otherwise than the ops they fuse (the gradients differed by up
    to 8e-6), and the generated module holds the ops: both models are compared run eagerly, and
    a note names what the model compiles."""
    torch.manual_seed(0)
    model, x = CompiledChild(), torch.randn(2, 8, 16)
    res = rewrite(model, x, to="identity")
    assert any("runs mlp compiled (torch.compile)" in n for n in res.notes), res.notes
    for training in (False, True):
        assert differences(model, res.module, x, training) == []


class CachedAnchors(nn.Module):
    """A method memoised with transformers' ``compile_compatible_method_lru_cache`` (RT-DETR's
    anchors), which skips its cache only while compiling."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def anchors(self, n: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.linspace(0.0, 1.0, n, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) * self.anchors(8, x.dtype)


@needs_hf
def test_a_memoised_method_does_not_keep_what_the_capture_computed() -> None:
    """Under eager paths the library's compile checks answer "not compiling"; the memo then
    kept the capture's fake anchors, and the model's next eager call returned them."""
    from transformers.pytorch_utils import compile_compatible_method_lru_cache

    class Model(CachedAnchors):
        anchors = compile_compatible_method_lru_cache(maxsize=4)(CachedAnchors.anchors)

    torch.manual_seed(0)
    model, x = Model(), torch.randn(2, 8)
    res = rewrite(model, x, to="identity")
    for training in (False, True):
        assert differences(model, res.module, x, training) == []


class UpdatesAView(nn.Module):
    """Gemma 3n's AltUp: a permuted matrix product updated in place (``p += h``). Eager's
    gradient reaches the product laid out as the product, so its coefficient gradients are
    summed as eager sums them only when the generated code updates the view in place too."""

    def __init__(self) -> None:
        super().__init__()
        self.coefs = nn.Linear(64, 16)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        coefs = self.coefs(h[0]).reshape(*h.shape[1:3], 4, 4).permute(0, 1, 3, 2)
        p = torch.matmul(h.permute(1, 2, 3, 0), coefs).permute(3, 0, 1, 2)
        p += h
        return p.contiguous().pow(2).sum()


def test_an_update_of_a_view_is_made_in_place_as_the_model_makes_it() -> None:
    torch.manual_seed(0)
    model, h = UpdatesAView(), torch.randn(4, 2, 16, 64)
    res = rewrite(model, h, to="identity")
    assert "aten.add_.Tensor" in res.source
    _check(model, h)


class UpdatesItsInputsView(nn.Module):
    """An update through a view of the caller's tensor is the caller's business: the generated
    module computes it functionally and writes the input back, never in place on a leaf."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        x.t().mul_(2.0)
        return y.sum() + x.sum()


def test_an_update_of_an_inputs_view_stays_functional() -> None:
    torch.manual_seed(0)
    model, x = UpdatesItsInputsView(), torch.randn(8, 8)
    res = rewrite(model, x.clone(), to="identity")
    assert "aten.mul_" not in res.source
    a, b = x.clone(), x.clone()
    with torch.no_grad():
        assert torch.equal(model(a), res.module(b))
    assert torch.equal(a, b) and not torch.equal(a, x)


@needs_hf
@pytest.mark.parametrize("arch", HF_FAST)
def test_hf_models_regenerate_exactly(arch: str) -> None:
    from unitcheck.hf import build as hf_build

    _check(*hf_build(arch))


@needs_hf
@pytest.mark.slow
@pytest.mark.parametrize("arch", HF_SLOW)
def test_more_hf_models_regenerate_exactly(arch: str) -> None:
    from unitcheck.hf import build as hf_build

    _check(*hf_build(arch))


def test_identity_command_checks_equality_and_records_lint(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "id"
    code = main(["rewrite", "gpt", "--set", "n_layer=1", "--set", "dropout=0.1", "--to", "identity", "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "complete: equal to the original bit for bit" in text
    manifest = json.loads((out / "unitcheck.json").read_text())
    lint = manifest["lint"]
    assert manifest["to"] == "identity" and manifest["complete"] is True
    assert lint["before"]["violations"] == lint["after"]["violations"] > 0
    assert lint["before"]["by_rule"] == lint["after"]["by_rule"]


@needs_hf
def test_masks_take_the_path_the_model_takes_in_eager() -> None:
    """transformers drops a mask it can prove full when it is not compiled, and materialises it
    when exported; Phi-4's vision attention sets ``is_causal``, so eager attends causally and the
    exported path does not. The capture takes eager's path, and where that fixed the batch size
    (real values, through ``nn.MultiheadAttention``) another batch is refused by name."""
    from unitcheck.hf import build as hf_build

    model, inputs = hf_build("phi4_multimodal_vision")
    res = rewrite(model, inputs, to="identity")
    for training in (False, True):
        assert differences(model, res.module, inputs, training) == []
    pixels = torch.randn(3, *inputs["pixel_values"].shape[1:])
    res.module.load_state_dict(model.state_dict())
    model.eval(), res.module.eval()
    try:
        out = res.module(pixel_values=pixels)
    except ValueError as err:
        assert "pixel_values: expected sizes" in str(err)
    else:
        assert torch.equal(out[0], model(pixel_values=pixels).last_hidden_state)


@needs_hf
def test_a_users_attention_mask_keeps_every_mask() -> None:
    """An attention mask passed in decides the mask path on its values: the capture keeps the
    exported path, which holds any mask, so padding the rewritten model is given is honoured.
    The result says so: on a mask without padding eager drops the mask, and the two paths agree
    to rounding only (hf:idefics2_perceiver's gradients by 4e-9)."""
    from unitcheck.hf import build as hf_build

    model, inputs = hf_build("llama")
    ids = inputs["input_ids"]
    res = rewrite(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, to="identity")
    assert any("computes otherwise in eager where an input's values decide" in n and "modeling_llama.py" in n
               for n in res.notes), res.notes
    padded = torch.ones_like(ids)
    padded[0, :5] = 0
    for training in (False, True):
        assert differences(model, res.module, {"input_ids": ids, "attention_mask": padded}, training) == []


@needs_hf
@pytest.mark.parametrize("arch", ["idefics2_perceiver", "muse_glimmer_assistant"])
def test_a_required_attention_mask_is_built_with_padding_so_both_paths_keep_it(arch: str) -> None:
    """These require an attention mask (the second one named by its failure, then widened).
    Built full, eager dropped it and the capture (refused eager's path: the mask is an input)
    kept it, so the null rewrite was equal to rounding only (idefics2_perceiver's latents'
    gradient by 4e-9). A built token mask pads the tail of its last row, and the two paths are
    the same computation."""
    from unitcheck.hf import build as hf_build

    model, inputs = hf_build(arch)
    mask = inputs["attention_mask"]
    assert bool(mask[0].all()) and not bool(mask[-1].all()) and bool(mask[-1, 0])
    res = rewrite(model, inputs, to="identity")
    for training in (False, True):
        assert differences(model, res.module, inputs, training) == []


@needs_hf
@pytest.mark.slow  # about 45 s: export unrolls the rule's loops three times (eval, training, dtype)
def test_a_library_that_computes_otherwise_when_exported_is_regenerated_as_in_eager() -> None:
    """Qwen3.5's gated-delta rule solves its triangular systems with ``solve_triangular`` in
    eager and by forward substitution when ``is_torchdynamo_exporting()``; the two round
    otherwise, so the capture answers the library's export check as eager does."""
    from transformers.models.qwen3_5.modeling_qwen3_5 import torch_chunk_gated_delta_rule

    class DeltaRule(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(8, 3 * 8)
            self.gates = nn.Linear(8, 2 * 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q, k, v = self.qkv(x).unflatten(-1, (3, 2, 4)).unbind(2)
            g, beta = self.gates(x).unflatten(-1, (2, 2)).unbind(2)
            out, _ = torch_chunk_gated_delta_rule(q, k, v, -torch.nn.functional.softplus(g), beta.sigmoid(),
                                                  chunk_size=4, use_qk_l2norm_in_kernel=True)
            return out.pow(2).mean()

    torch.manual_seed(0)
    _check(DeltaRule(), torch.randn(2, 4, 8))


class _Vanishing(nn.Module):
    """A deep random network in eval mode whose features vanish: normalising them divides 0 by
    0 (ALIGN's image embeddings from a small EfficientNet at 32x32)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x) * 0.0
        return h / h.norm(dim=-1, keepdim=True) + self.proj.bias


def test_nan_where_the_model_computes_nan_is_equal() -> None:
    """Bit for bit, NaN in the same places is the same result: the comparison reported ALIGN's
    regenerated module as different (250 differences, "max difference nan") because NaN is not
    equal to itself. NaN in other places is still a difference."""
    model, x = _Vanishing(), torch.randn(3, 4)
    res = rewrite(model, (x,), to="identity")
    with torch.no_grad():
        assert model(x).isnan().all()
    for training in (False, True):
        assert differences(model, res.module, (x,), training) == []

    class Other(_Vanishing):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.where(x > 0, super().forward(x), x)

    assert any("output 0 differs" in d for d in differences(model, Other(), (x,)))


def test_generated_code_calls_the_public_api() -> None:
    """Issue 15's readable output: where an ATen op has a public call that dispatches to it with
    the same arguments, the generated code writes that call (``F.linear``, ``x.view``,
    ``torch.softmax``...), and the model still regenerates bit for bit."""
    model, inputs = build("gpt", dropout=0.1)
    res = rewrite(model, inputs, to="identity")
    src = res.source
    assert "import torch.nn.functional as F" in src
    assert "F.linear(" in src and "F.layer_norm(" in src and "F.gelu(" in src and "torch.embedding(" in src
    assert ".reshape(" in src and ".transpose(" in src and "F.scaled_dot_product_attention(" in src
    for op in ("aten.linear.", "aten.layer_norm.", "aten.view.", "aten.transpose.", "aten.add.Tensor", "aten.gelu."):
        assert op not in src, op
    for training in (False, True):
        assert differences(model, res.module, inputs, training) == []
