"""Blocks of another model (``sam_mask_decoder``): built as their parent calls them."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from unitcheck.hf.parts import _block, _prompted_call, _recorded_call

from ..conftest import needs_hf


class _Block(nn.Module):
    def __init__(self, config: Any = None) -> None:
        super().__init__()
        self.config = config
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, flag: bool, mask: torch.Tensor | None = None, **kwargs: Any) -> torch.Tensor:
        return self.proj(x) if flag else x


class _Parent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.config = type("Cfg", (), {"block_config": object()})()
        self.block = _Block(self.config.block_config)
        self.other = _Block()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = ids.float()
        y = self.block(h, True, return_dict=True, cache=None)  # a None by name is as good as none
        y = self.block(y * 2, False)  # a second call: the first is the one recorded
        h.add_(1.0)  # the recorded input is a copy, not the parent's buffer
        return y


def test_the_first_call_is_recorded_by_name_and_defaults_are_left_out() -> None:
    parent = _Parent()
    ids = torch.arange(8).reshape(2, 4)
    call = _recorded_call(parent, {"ids": ids}, parent.block)
    assert call is not None and set(call) == {"x", "flag", "return_dict"}  # mask left at its default
    assert call["flag"] is True and call["return_dict"] is True
    assert torch.equal(call["x"], ids.float())  # a copy taken before the parent's in-place add
    assert _recorded_call(parent, {"ids": ids}, parent.other) is None  # never called


def test_a_block_is_found_by_class_or_by_the_sub_config_it_keeps() -> None:
    parent = _Parent()
    assert _block(parent, _Block, "block_config") is parent.block  # the first of its class
    assert _block(parent, None, "block_config") is parent.block  # the module keeping that sub-config
    assert _block(parent, None, "missing_config") is None
    parent.config.other_config = parent.other.config = object()  # two fields of one class (CLVP's encoders)
    assert _block(parent, _Block, "other_config") is parent.other  # the one keeping the field's config
    # a block built from its config's fields, not the object: the outermost named after the config
    assert _block(parent, None, "missing_config", "_BlockConfig") is parent.block
    assert _block(parent, None, "missing_config", "_ElsewhereConfig") is None


class _Prompted(nn.Module):
    """Calls its block on a prompt only where one is given, as SAM calls its prompt encoder."""

    def __init__(self) -> None:
        super().__init__()
        self.config = type("Cfg", (), {})()
        self.block = _Block()

    def forward(self, ids: torch.Tensor, points: torch.Tensor | None = None,
                boxes: torch.Tensor | None = None) -> torch.Tensor:
        r"""
        ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
            Tokens.
        points (`torch.FloatTensor` of shape `(batch_size, num_points, 3)`):
            Refused in this shape, as SAM refuses the points its docstring shapes.
        boxes (`torch.FloatTensor` of shape `(batch_size, num_boxes, 4)`):
            Boxes.
        """
        if points is not None:
            raise ValueError("points must be 4D")
        prompt = boxes[..., 0].repeat(1, 4) if boxes is not None else None
        return self.block(prompt, flag=prompt is not None)


def test_a_block_called_with_no_tensor_takes_the_first_documented_prompt_that_reaches_it() -> None:
    parent = _Prompted()
    ids = torch.zeros(2, 5, dtype=torch.long)
    assert _recorded_call(parent, {"ids": ids}, parent.block) == {"x": None, "flag": False}
    call, inputs, given = _prompted_call(parent, {"ids": ids}, parent.block, seed=0)
    assert call is not None and call["flag"] is True and call["x"].shape == (2, 4)
    assert set(inputs) == {"ids", "boxes"} and inputs["boxes"].shape == (2, 1, 4)  # one box: points refused
    assert given == "; given boxes (2, 1, 4)"
    _, inputs, given = _prompted_call(parent, {"ids": ids, "boxes": inputs["boxes"]}, parent.block, seed=0)
    assert given == "" and set(inputs) == {"ids", "boxes"}  # reached already: nothing added


@needs_hf
def test_sam_prompt_encoder_is_built_as_sam_calls_it_given_a_box() -> None:
    """SAM calls its prompt encoder with tensors only where a prompt is given: on pixels alone
    it passed None for every argument, and the type was refused. Given one box, which SAM's
    docstring shapes, the encoder gets a tensor, and the oracle agrees with its units."""
    from unitcheck import hf, oracle

    info: list[hf.Built] = []
    model, inputs = hf.build("sam_prompt_encoder", device="cpu", info=info)
    assert type(model).__name__ == "SamPromptEncoder" and info[0].layout.endswith("given input_boxes (2, 1, 4))")
    assert inputs["input_boxes"].shape == (2, 1, 4) and inputs["input_points"] is None
    res = oracle.verify(model, inputs)
    assert res.checked > 10 and res.checked == res.agreed


@needs_hf
def test_sam_mask_decoder_is_built_as_sam_calls_it() -> None:
    """``SamMaskDecoder`` takes image embeddings as wide as the decoder, a point axis and a
    ``multimask_output`` flag, which no input name says how to make: the builder took a pixel
    tensor for them, and the trace failed. Built from SAM's own call, it runs, traces, and the
    oracle agrees with every unit it infers."""
    from unitcheck import hf, oracle

    info: list[hf.Built] = []
    model, inputs = hf.build("sam_mask_decoder", {"iou_head_hidden_dim": 48}, device="cpu", info=info)
    assert type(model).__name__ == "SamMaskDecoder" and info[0].task == "part"
    assert info[0].layout.startswith("as sam calls it")
    assert model.get_submodule("iou_prediction_head.proj_in").out_features == 48  # the override reached it
    assert inputs["multimask_output"] is True
    width = model.iou_token.weight.shape[1]  # the decoder's hidden size
    assert inputs["image_embeddings"].dim() == 4 and inputs["image_embeddings"].shape[1] == width
    with torch.no_grad():
        masks = model(**inputs)[0]
    assert masks.dim() == 5
    _, alone = hf.build("sam_mask_decoder", batch=1, device="cpu")  # the parent is built at the batch asked
    assert alone["image_embeddings"].shape[0] == 1
    with pytest.raises(hf.OverrideError, match="no_such_field"):  # the user's key, before any parent is built
        hf.build("sam_mask_decoder", {"no_such_field": 3}, device="cpu")
    res = oracle.verify(model, inputs)
    assert res.checked > 100 and res.checked == res.agreed and res.violations == res.confirmed


@needs_hf
def test_a_sub_config_type_without_a_class_is_the_module_keeping_it() -> None:
    """``t5_gemma_module`` names no class: the module of T5Gemma that keeps its config is it."""
    from unitcheck import hf

    info: list[hf.Built] = []
    model, inputs = hf.build("t5_gemma_module", device="cpu", info=info)
    assert info[0].head == type(model).__name__ == "T5GemmaEncoder" and set(inputs) == {"input_ids"}
    with torch.no_grad():
        model(**inputs)


@needs_hf
@pytest.mark.parametrize(("model_type", "why"), [
    ("sam3_geometry_encoder", "sam3's forward does not call its Sam3GeometryEncoder"),  # boxes need torchvision
    ("vibevoice_diffusion", "vibevoice's forward does not call its VibeVoiceDiffusionHead"),
    ("gemma4_unified_audio", "holds no module keeping its Gemma4UnifiedAudioConfig"),  # it embeds audio itself
])
def test_a_block_its_parent_does_not_exercise_is_refused_with_the_reason(model_type: str, why: str) -> None:
    from unitcheck import hf

    with pytest.raises(hf.HFError, match="configures a block of another model") as err:
        hf.build(model_type, device="cpu")
    assert why in str(err.value) and "\n" not in str(err.value)


@needs_hf
def test_a_sub_model_no_made_input_passes_is_built_as_its_parent_calls_it() -> None:
    """Dia's decoder takes codes with a per-codebook axis and the encoder's states; no input the
    builder makes from names passes, and the trace failed ("not enough values to unpack"). Dia's
    own call of it (before Dia's loss fails on the labels) gives the inputs, and it runs."""
    from unitcheck import hf

    info: list[hf.Built] = []
    model, inputs = hf.build("dia_decoder", device="cpu", info=info)
    assert info[0].head == "DiaDecoder" and info[0].layout.startswith("as dia calls it")
    config: Any = model.config
    assert inputs["input_ids"].dim() == 3 and inputs["input_ids"].shape[-1] == config.num_channels
    assert inputs["encoder_hidden_states"].shape[-1] == config.cross_hidden_size
    with torch.no_grad():
        model(**inputs)


def test_a_call_is_kept_when_the_parent_fails_after_it_and_not_when_the_block_fails() -> None:
    class Failing(_Parent):
        def __init__(self, where: str) -> None:
            super().__init__()
            self.where = where

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            if self.where == "block":
                return self.block(ids.float()[..., :3], True)  # too narrow for the block's linear
            self.block(ids.float(), True)
            raise ValueError("the loss fails on its labels")

    ids = torch.arange(8).reshape(2, 4)
    after = Failing("after")
    assert set(_recorded_call(after, {"ids": ids}, after.block) or {}) == {"x", "flag"}
    inside = Failing("block")
    with pytest.raises(RuntimeError):
        _recorded_call(inside, {"ids": ids}, inside.block)

    class Retrying(_Parent):
        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            try:
                return self.block(ids.float()[..., :3], True)  # fails; the parent's own code catches it
            except RuntimeError:
                return self.block(ids.float(), True)

    retrying = Retrying()
    with pytest.raises(ValueError, match="fails on its first call"):  # the recorded call is the failing one
        _recorded_call(retrying, {"ids": ids}, retrying.block)


@needs_hf
def test_a_sub_model_whose_inputs_were_guessed_takes_its_parents_call() -> None:
    """SAM 3's mask decoder has no main input of its own: its inputs were made by name and its
    queries reshaped until a probe passed ((2, 8192, 64), 12 nodes traced). SAM 3's own call
    gives it the backbone's feature levels, and it traces the pyramid path (42 nodes). On the
    meta device the inputs stay real, so that a trace's CPU copy gets their values (PaddleOCR-VL's
    vision grid)."""
    from unitcheck import hf, oracle

    info: list[hf.Built] = []
    model, inputs = hf.build("sam3_mask_decoder", device="cpu", info=info)
    assert info[0].layout.startswith("as sam3 calls it") and info[0].head == "Sam3MaskDecoder"
    levels = inputs["backbone_features"]
    assert isinstance(levels, list) and len(levels) == 3 and levels[0].shape[-1] == 2 * levels[1].shape[-1]
    res = oracle.verify(model, inputs)
    assert res.ok and res.checked >= 30
    meta, meta_inputs = hf.build("sam3_mask_decoder", device="meta")
    assert next(meta.parameters()).is_meta and not meta_inputs["decoder_queries"].is_meta


def test_a_required_token_mask_recorded_full_is_padded_as_built_masks_are() -> None:
    """IDEFICS2 calls its perceiver with a mask of ones; transformers drops a full mask in eager
    and keeps it exported, so the null rewrite compared two paths (equal to rounding only). A
    required token mask is padded as the masks the builder makes are; an optional one is not."""

    class Masked(nn.Module):
        def forward(self, x: torch.Tensor, attention_mask: torch.Tensor,
                    encoder_attention_mask: torch.Tensor | None = None) -> torch.Tensor:
            return x * attention_mask[..., None]

    class Caller(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = Masked()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            full = torch.ones(x.shape[:2], dtype=torch.long)
            return self.block(x, full, encoder_attention_mask=full)

    caller = Caller()
    call = _recorded_call(caller, {"x": torch.randn(2, 8, 4)}, caller.block)
    assert call is not None
    assert bool(call["attention_mask"][0].all()) and call["attention_mask"][-1].tolist() == [1] * 6 + [0] * 2
    assert bool(call["encoder_attention_mask"].all())  # optional: as the parent gave it


@needs_hf
def test_a_parent_call_that_fails_is_said_in_the_builds_record() -> None:
    """Inkling's audio model has guessed inputs and a parent that never calls it: the type keeps
    its own candidate, and the record of what was tried says why the parent's call was not used."""
    from unitcheck import hf

    info: list[hf.Built] = []
    hf.build("inkling_audio", device="meta", info=info)
    assert "as inkling_mm_model calls it" not in info[0].layout
    assert any(t.startswith("as its parent calls it: ") and "does not call its InklingAudioModel" in t
               for t in info[0].tried), info[0].tried


@needs_hf
def test_a_block_its_parents_default_leaves_out_is_built_with_the_parents_switch_on() -> None:
    """IDEFICS builds its perceiver only with ``use_resampler`` on (off by default), from the
    fields of its ``IdeficsPerceiverConfig`` (no module keeps the object): the type was refused
    ("holds no module keeping its IdeficsPerceiverConfig"). The parent is built with its off
    ``use_*`` switches on, one at a time, and the block is found by its class's name."""
    from unitcheck import hf, oracle
    from unitcheck.hf.parts import _switches

    assert "use_resampler" in _switches("idefics")
    info: list[hf.Built] = []
    model, inputs = hf.build("idefics_perciever", device="cpu", info=info)
    assert type(model).__name__ == "IdeficsPerceiverResampler"
    assert info[0].layout.startswith("as idefics calls it") and info[0].layout.endswith("; use_resampler=True)")
    assert inputs["context"].dim() == 3
    res = oracle.verify(model, inputs)
    assert res.checked > 20 and res.checked == res.agreed
