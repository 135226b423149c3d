"""Hugging Face architectures built from their config classes with random weights."""

from __future__ import annotations

import json
import math
import typing
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

from unitcheck import oracle
from unitcheck.infer import infer_units

from .conftest import needs_hf

ARCHS = ["gpt2", "llama", "mistral", "bert", "t5"]

# Types that the first hf: builder could not build or trace (issue 14): forced SDPA, size fields
# left at their defaults, list-valued fields, vision and audio inputs.
ZOO = ["swin", "mobilebert", "bart", "gptj", "codegen", "deepseek_v3", "whisper", "bloom", "gemma2",
       "deberta-v2", "convnext", "resnet", "mamba"]


@needs_hf
@pytest.mark.parametrize("arch", ARCHS)
def test_inference_coverage_and_oracle(arch: str) -> None:
    from unitcheck.hf import build

    model, inputs = build(arch)
    ug = infer_units(model, inputs)
    assert ug.coverage >= 0.98, f"uncovered: {dict(ug.unknown_ops)}"
    assert sum(ug.unknown_ops.values()) == round((1 - ug.coverage) * ug.compute_nodes)
    assert ug.violations, "random-weight HF transformers are not unit-consistent"
    res = oracle.verify(model, inputs)
    assert res.disagreements == [], [str(d) for d in res.disagreements[:5]]
    assert res.checked == res.agreed and res.violations == res.confirmed
    assert res.checked + res.violations + len(res.unchecked) + len(res.unexercised) == res.float_nodes
    assert not res.unexercised  # text models: every violation is exercised by their text
    assert not res.unchecked or ug.coverage < 1.0
    assert res.global_checked == res.global_agreed and res.global_checked > 0


@needs_hf
def test_gpt2_reports_attention_and_logits() -> None:
    from unitcheck.hf import build

    model, inputs = build("gpt2")
    rules = [v.rule for v in infer_units(model, inputs).violations]
    assert rules.count("UC201") == 2 and rules.count("UC102") == 4 and rules[-1] == "UC301"


@needs_hf
def test_bad_model_type_and_field_are_clear_errors() -> None:
    from unitcheck.hf import HFError, build

    with pytest.raises(HFError, match="unknown Hugging Face model type"):
        build("not_a_model")
    with pytest.raises(HFError, match="no field 'nope'"):
        build("gpt2", {"nope": 1})


@needs_hf
def test_the_attention_implementation_is_set_by_name() -> None:
    """``--set attn_implementation=flex_attention`` builds the model on that attention (a
    constructor argument, not a config field); the lint then reads flex_attention's logits."""
    from unitcheck.hf import HFError, build
    from unitcheck.linter import lint

    model, inputs = build("llama", {"attn_implementation": "flex_attention"})
    assert model.config._attn_implementation == "flex_attention"
    found = [v for v in lint(model, inputs).violations if v.rule == "UC201"]
    assert found and all(v.node.startswith("flex_attention") for v in found)
    with pytest.raises(HFError, match="attn_implementation must be one of eager, sdpa, flex_attention"):
        build("llama", {"attn_implementation": "flash"})


@needs_hf
def test_near_names_get_a_did_you_mean() -> None:
    from unitcheck.hf import HFError, resolve_type

    with pytest.raises(HFError, match=r"did you mean deberta-v2\b"):
        resolve_type("deberta_v2")
    with pytest.raises(HFError, match="did you mean .*llama"):
        resolve_type("lama")


@needs_hf
@pytest.mark.parametrize("arch", ZOO)
def test_zoo_types_lint_from_the_command_line(arch: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``unitcheck lint hf:X`` builds on the meta device and traces: exit 0 or 1, never 2 or 3."""
    from unitcheck.cli import main

    code = main(["lint", f"hf:{arch}", "--format", "json", "--fail-on", "never"])
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out)["summary"]
    assert summary["nodes"] > 20


@needs_hf
def test_unbuildable_type_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    from unitcheck.cli import main
    from unitcheck.hf import head_classes, model_types
    from unitcheck.hf.parts import _parents

    # a configuration-only type, no other type's part
    orphan = next(t for t in model_types() if not head_classes(t) and not _parents(t))
    code = main(["lint", f"hf:{orphan}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "no model class" in err


# -- shrinking keeps the architecture's relations --------------------------------------------


@needs_hf
def test_size_coupled_fields_shrink_together() -> None:
    from unitcheck.hf import make_config

    mobile = make_config("mobilebert")
    assert mobile.hidden_size == 64 and mobile.embedding_size <= mobile.hidden_size
    assert mobile.true_hidden_size == mobile.intra_bottleneck_size
    gptj = make_config("gptj")
    assert 0 < gptj.rotary_dim <= gptj.n_embd // gptj.n_head
    ds = make_config("deepseek_v3")
    assert ds.qk_head_dim == ds.qk_nope_head_dim + ds.qk_rope_head_dim <= 32
    assert ds.n_routed_experts <= 4 and ds.num_experts_per_tok <= 2 and ds.num_hidden_layers <= 6
    assert ds.first_k_dense_replace < ds.num_hidden_layers  # an MoE layer remains
    whisper = make_config("whisper")
    assert whisper.d_model % whisper.encoder_attention_heads == 0 and whisper.max_source_positions <= 32
    bart = make_config("bart")
    assert (bart.encoder_layers, bart.decoder_layers) == (2, 2)


@needs_hf
def test_specaugment_spans_fit_the_small_example_in_training() -> None:
    """wav2vec2's example waveform yields 9 frames, fewer than its default SpecAugment span of 10:
    a training-mode forward raised ("`mask_length` has to be smaller than `sequence_length`")."""
    from unitcheck import hf

    model, inputs = hf.build("wav2vec2", device="cpu")
    assert model.config.mask_time_length <= 2 and model.config.mask_time_prob > 0
    model.train()
    with torch.no_grad():
        model(**inputs)


@needs_hf
def test_a_width_one_config_must_share_with_another_follows_it() -> None:
    """Janus puts image features projected to the vision config's ``projection_dim`` into the
    text embeddings: the defaults leave 2048 against 4096, and after the shrink 128 against 64,
    so the model refused its example ("Image features and image tokens do not match")."""
    from unitcheck import hf

    model, inputs = hf.build("janus", device="cpu")
    assert model.config.vision_config.projection_dim == model.config.text_config.hidden_size
    with torch.no_grad():
        model.eval()(**inputs)


@needs_hf
def test_axial_positions_fit_the_example_in_training() -> None:
    """Reformer's training mode takes only sequences as long as its axial position shape's
    product (4096 by default): on the 16-token example it raised, so no training-mode check
    (null rewrite, oracle in training mode) could run on it."""
    from unitcheck import hf

    model, inputs = hf.build("reformer", device="cpu")
    model.train()
    with torch.no_grad():
        model(**inputs)


@needs_hf
def test_a_speech_model_gets_the_targets_it_trains_on() -> None:
    """FastSpeech 2 raises in training mode unless it is given each token's duration, pitch and
    energy and the target spectrogram, so no training-mode check could run on it. The durations
    decide the spectrogram's length: a spectrogram of another length fails the loss."""
    from unitcheck import hf

    model, inputs = hf.build("fastspeech2_conformer", device="cpu")
    frames = inputs["duration_labels"].sum(dim=1).max()
    assert inputs["spectrogram_labels"].shape[1] == frames
    model.train()
    with torch.no_grad():
        out = model(**inputs)
    assert torch.isfinite(out[0]).all()


@needs_hf
def test_an_unrolled_decoding_loop_is_shrunk() -> None:
    """SLANet's table decoder runs ``max_text_length + 1`` steps in its forward, each one unrolled
    in the graph: at the default 500 its capture held 11275 nodes and the null rewrite ran past
    the zoo's ten minutes."""
    from unitcheck.hf import SMALL_DEFAULTS, make_config

    assert make_config("slanet").max_text_length == SMALL_DEFAULTS["decode_steps"] < 500


@needs_hf
def test_a_stack_counted_in_stages_keeps_its_stage_lists_together() -> None:
    """Swin2SR's six residual groups are its layer count (``num_layers`` is ``len(depths)``): its
    head counts were cut to two stages and not shrunk while its depths kept six, and every small
    plan failed ("hidden size (64) is not a multiple of the number of attention heads (6)"), so
    the oracle met the default model (30.9 GiB). The stages kept are kept in every list."""
    from unitcheck.hf import SMALL_DEFAULTS, make_config

    cfg = make_config("swin2sr")
    assert len(cfg.depths) == len(cfg.num_heads) == cfg.num_layers <= SMALL_DEFAULTS["layers"]
    assert all(d <= 2 for d in cfg.depths) and all(cfg.embed_dim % h == 0 for h in cfg.num_heads)
    assert cfg.embed_dim < 180


@needs_hf
def test_a_group_count_the_model_fixes_scales_every_width_alike() -> None:
    """Emu3's VQ-VAE builds its group norms with 32 groups whatever the config says: the shrunk
    16 base channels failed every small plan ("num_channels (16) must be divisible by num_groups
    (32)") and the build kept 270M parameters, over the oracle's memory. Every width doubles,
    so the attention's hidden_size stays base_channels x the last multiplier."""
    from unitcheck import hf

    info: list[hf.Built] = []
    model, _ = hf.build("emu3_vqgan", device="meta", info=info)
    cfg = model.config
    assert info[0].plan.startswith("small") and "base_channels x2" in info[0].plan
    assert cfg.base_channels % 32 == 0 and cfg.hidden_size == cfg.base_channels * cfg.channel_multiplier[-1]
    assert sum(p.numel() for p in model.parameters()) < 20_000_000


@needs_hf
def test_perceivers_latent_width_and_self_attention_stack_are_shrunk() -> None:
    """Perceiver's latents are ``d_latents`` wide (1280) through ``num_self_attends_per_block``
    (26) layers: neither was read as a width or a layer count, so the small build kept 260M
    parameters and the oracle refused it (12.0 GiB over its 11.8 GiB budget)."""
    from unitcheck.hf import SMALL_DEFAULTS, make_config

    cfg = make_config("perceiver")
    assert cfg.d_latents < 1280 and cfg.d_latents % cfg.num_self_attention_heads == 0
    assert cfg.num_self_attends_per_block <= SMALL_DEFAULTS["layers"]


@needs_hf
def test_list_valued_fields_and_per_layer_kinds() -> None:
    from unitcheck.hf import make_config

    swin = make_config("swin")
    assert all(d <= 2 for d in swin.depths) and len(swin.num_heads) == len(swin.depths)
    dims = [swin.embed_dim * 2**i for i in range(len(swin.depths))]
    assert all(d % h == 0 for d, h in zip(dims, swin.num_heads))
    gemma2 = make_config("gemma2")
    assert len(gemma2.layer_types) == gemma2.num_hidden_layers
    assert set(gemma2.layer_types) == {"sliding_attention", "full_attention"}  # one layer of each kind
    convnext = make_config("convnext")
    assert max(convnext.hidden_sizes) <= 128 and len(convnext.hidden_sizes) == 4


@needs_hf
def test_layer_indices_into_a_sibling_config_follow_its_shrink() -> None:
    """Molmo2's adapter reads vision layers [24, 18] of a 25-layer vision tower: after the tower
    shrinks, the indices name layers it still has (the small plan was rejected, and the build fell
    back to the full-size default: 8.7B parameters); dots.3's audio adapter input must equal the
    audio width (its build fell back to the layers-only plan: 18.9B parameters)."""
    from unitcheck.hf import make_config

    dots = make_config("dots3_note")  # an input size that equals its tower's width follows it
    assert dots.audio_config.adapter_input_size == dots.audio_config.hidden_size < 1280
    molmo = make_config("molmo2")
    n = molmo.vision_config.num_hidden_layers
    assert n < 25 and all(-n <= i < n for i in molmo.adapter_config.vision_feature_layer)


@needs_hf
def test_indices_of_layers_read_are_mapped_and_lists_of_layer_kinds_derived() -> None:
    """Mllama's vision tower reads the outputs of layers [3, 7, 15, 23, 30]: after the shrink the
    indices name layers it has (derived again, they overran two layers and the tower failed). Its
    text model's ``cross_attention_layers`` say which layers are of another kind, one in five:
    mapped onto two kept layers they made both cross-attention layers, which skip without images
    (the traced text model computed nothing: 196 nodes became 68, no violation left to find)."""
    from unitcheck.hf import make_config

    vision = make_config("mllama_vision_model")
    n = vision.num_hidden_layers
    assert vision.intermediate_layers_indices and all(0 <= i < n for i in vision.intermediate_layers_indices)
    text = make_config("mllama_text_model")
    assert len([i for i in text.cross_attention_layers if i < text.num_hidden_layers]) < text.num_hidden_layers


@needs_hf
def test_a_compound_scaled_network_shrinks_to_its_base() -> None:
    """EfficientNet-B7 and ALIGN's vision tower list their base network's channels, which the
    model multiplies by ``width_coefficient`` beside a stem width it hard-codes (32): scaling the
    lists broke the stem, and both fell back to the layers-only plan at 600x600 (64M and 78M
    parameters; EfficientNet's null rewrite would have held 15.7 GiB). The small build is the base
    network (coefficients 1, head at its base width), and ALIGN's projection follows its last stage."""
    from unitcheck.hf import Built, build, make_config

    eff = make_config("efficientnet")
    assert (eff.width_coefficient, eff.depth_coefficient, eff.hidden_dim) == (1.0, 1.0, 1280)
    assert eff.in_channels[0] == 32 and list(eff.out_channels) == [16, 24, 40, 80, 112, 192, 320]
    align = make_config("align")
    assert align.projection_dim == align.vision_config.out_channels[-1] == 320
    for name in ("efficientnet", "align"):
        info: list[Built] = []
        model, inputs = build(name, device="meta", info=info)
        assert info[0].plan == "small" and inputs["pixel_values"].shape[-1] <= 64
        assert sum(p.numel() for p in model.parameters()) < 8e6


@needs_hf
def test_an_output_channel_count_named_in_the_singular_is_a_width() -> None:
    """Phi-4-multimodal's audio encoder convolves its hidden states into
    ``depthwise_separable_out_channel`` and ``ext_pw_out_channel`` channels, both its width: left
    at 1024 beside a width of 64, every small plan failed (48M parameters at layers-only)."""
    from unitcheck.hf import Built, build, make_config

    cfg = make_config("phi4_multimodal_audio")
    assert cfg.depthwise_separable_out_channel == cfg.ext_pw_out_channel == cfg.hidden_size < 1024
    info: list[Built] = []
    build("phi4_multimodal_audio", device="meta", info=info)
    assert info[0].plan == "small"


@needs_hf
def test_a_group_count_equal_to_a_width_follows_it() -> None:
    """Mimi upsamples with a depthwise transposed convolution, ``upsample_groups`` (512) groups
    over its 512 channels: left at 512 beside a width of 64, "in_channels must be divisible by
    groups" refused every small plan of Mimi, its decoder, CSM and Pocket TTS's tokenizers (80M
    parameters at layers-only)."""
    from unitcheck.hf import Built, build, make_config

    cfg = make_config("mimi")
    assert cfg.upsample_groups == cfg.hidden_size < 512
    bit = make_config("bit")  # group normalisation: its 32 groups must divide widths shrunk to 8
    assert all(w % bit.num_groups == 0 for w in (bit.embedding_size, *bit.hidden_sizes))
    # its quantiser's width, named as a dimension, is its codebooks' (the cdist of the two failed)
    assert cfg.vector_quantization_hidden_dimension == cfg.codebook_dim < 256
    for name in ("mimi", "csm", "bit"):
        info: list[Built] = []
        build(name, device="meta", info=info)
        assert info[0].plan == "small", name


@needs_hf
def test_a_word_as_long_as_the_stack_is_not_one_letter_per_layer() -> None:
    """BigBird's ``attention_type`` "block_sparse" has 12 letters and BigBird 12 layers: read as
    one kind of layer a letter, it was cut to "block_sp", which the config refused, and the build
    fell back to the full-size default (128M parameters, 834 s in the zoo). A pattern of a few
    kinds (Nemotron-H's hybrid layers) is still one per layer."""
    from unitcheck.hf import Built, build, make_config

    cfg = make_config("big_bird")
    assert cfg.attention_type == "block_sparse" and cfg.num_hidden_layers == 2
    info: list[Built] = []
    model, _ = build("big_bird", device="meta", info=info)
    assert info[0].plan == "small" and sum(p.numel() for p in model.parameters()) < 1e6
    nemotron = make_config("nemotron_h")
    assert len(nemotron.hybrid_override_pattern) == nemotron.num_hidden_layers < 52


@needs_hf
def test_a_towers_neck_and_its_fourier_features_follow_the_shrink() -> None:
    """SAM's vision tower adds positional embeddings made of the sines and cosines of
    ``num_pos_feats`` random features to its neck (``output_channels``, twice as wide): left at
    128 beside a shrunk neck, SAM and SAM-HQ fell back to layers-only at 1024x1024. SLANeXt's
    ``post_conv_in_channels`` is its SAM tower's neck, which the tower's own ratio shrinks."""
    from unitcheck.hf import Built, build, make_config

    sam = make_config("sam").vision_config
    assert 2 * sam.num_pos_feats == sam.output_channels < 256
    slanext = make_config("slanext")
    assert slanext.post_conv_in_channels == slanext.vision_config.output_channels < 256
    for name in ("sam", "slanext"):
        info: list[Built] = []
        build(name, device="meta", info=info)
        assert info[0].plan == "small", name


@needs_hf
def test_a_backbone_returns_the_stages_its_parent_chose() -> None:
    """UperNet's default ResNet backbone returns four stages, which UperNet's head reads: rebuilt
    from its shrunk fields alone, the backbone took its class's default (the last stage only),
    every small plan failed with "list index out of range", and the build fell back to the full
    default config (66M parameters)."""
    from unitcheck.hf import Built, build, make_config

    assert make_config("upernet").backbone_config.out_features == ["stage1", "stage2", "stage3", "stage4"]
    assert make_config("deformable_detr").backbone_config.out_indices == [2, 3, 4]  # its three levels
    info: list[Built] = []
    build("upernet", device="meta", info=info)
    assert info[0].plan == "small"


@needs_hf
def test_a_video_tower_takes_its_clips_frames_as_one_batch() -> None:
    """X-CLIP's vision tower takes ``(clips * frames, C, H, W)`` and views it as clips of
    ``num_frames``: two images made ``2 // 4 = 0`` clips ("shape '[0, 4, 64]' is invalid") and the
    type did not trace."""
    from unitcheck.hf import Built, build

    info: list[Built] = []
    model, inputs = build("xclip_vision_model", device="meta", info=info)
    assert info[0].probed and info[0].layout == "pixel_values (frames in the batch)"
    assert inputs["pixel_values"].shape[0] == 2 * model.config.num_frames


@needs_hf
def test_stage_widths_and_feature_maps_follow_the_shrink() -> None:
    """SAM 2's Hiera backbone lists its stages' widths (``embed_dim_per_stage``) and its image size
    as unset fields the class fills with full-size constants; its neck lists the stages' widths
    reversed and the feature maps of a 1024x1024 image; its prompt encoder embeds prompts on the
    grid of the last map. Left at full size beside a shrunk width, every small plan failed and the
    build fell back to layers-only at 1024x1024 (its null rewrite would have held 13.1 GiB)."""
    from unitcheck.hf import Built, build, make_config

    cfg = make_config("sam2")
    backbone, vision, prompt = cfg.vision_config.backbone_config, cfg.vision_config, cfg.prompt_encoder_config
    assert backbone.embed_dim_per_stage[0] == backbone.hidden_size < 96
    assert vision.backbone_channel_list == backbone.embed_dim_per_stage[::-1]
    side = backbone.image_size[0]
    assert side == prompt.image_size <= 64
    assert vision.backbone_feature_sizes == [[side // 4] * 2, [side // 8] * 2, [side // 16] * 2]
    assert prompt.image_size // prompt.patch_size == vision.backbone_feature_sizes[-1][0]
    info: list[Built] = []
    _, inputs = build("sam2", device="meta", info=info)
    assert info[0].plan == "small" and inputs["pixel_values"].shape[-1] == side


@needs_hf
def test_inputs_a_model_asks_for_in_training_only_are_given() -> None:
    """Molmo2 runs on ``input_ids`` in eval mode and raises "`mm_token_type_ids` is required as a
    model input when training": the training captures of ``--to identity`` failed on it."""
    from unitcheck.hf import build

    model, inputs = build("molmo2", device="meta")
    assert "mm_token_type_ids" in inputs and inputs["mm_token_type_ids"].shape == inputs["input_ids"].shape


@needs_hf
def test_lengths_of_feature_inputs_cover_every_frame() -> None:
    """A required length argument of a model fed feature frames counts those frames (in waveform
    samples where it says so), not the token count: dots.3's audio encoder got 16 samples for
    64 frames, kept one valid frame after downsampling, and its attention over one key made the
    oracle refute UC201."""
    from unitcheck.hf import build, make_config

    hop = make_config("dots3_note_audio_encoder").hop_length
    _, inputs = build("dots3_note_audio_encoder", device="meta")
    frames = inputs["input_features"].shape[-1]
    assert inputs["chunk_sample_lengths"].tolist() == [frames * hop] * inputs["input_features"].shape[0]


@needs_hf
def test_set_overrides_win_and_reach_sub_configs() -> None:
    from unitcheck.hf import make_config

    cfg = make_config("llama", {"num_attention_heads": 8, "hidden_size": 128})
    assert cfg.head_dim == 16 and cfg.num_attention_heads == 8  # derived from the overrides
    llava = make_config("llava", {"text_config.num_hidden_layers": 3})
    assert llava.text_config.num_hidden_layers == 3 and llava.text_config.hidden_size == 64


def test_set_values_parse_lists() -> None:
    """``--set axial_pos_shape=[4,4]`` is a list of ints (it was the string "[4,4]", which a
    config's typed field rejects)."""
    from unitcheck.hf import parse_value

    assert parse_value("[4,4]") == [4, 4]
    assert parse_value("[ 0.5, true , none]") == [0.5, True, None]
    assert parse_value("[]") == [] and parse_value("[a]") == ["a"] and parse_value("4") == 4


@needs_hf
def test_inputs_follow_the_main_input_name() -> None:
    from unitcheck.hf import Built, build

    cases = {
        "resnet": ("pixel_values", 4),
        "whisper": ("input_features", 3),
        "wav2vec2": ("input_values", 2),
        "gpt2": ("input_ids", 2),
    }
    for arch, (name, rank) in cases.items():
        info: list[Built] = []
        model, inputs = build(arch, device="meta", info=info)
        assert inputs[name].dim() == rank, (arch, {k: v.shape for k, v in inputs.items()})
        assert info[0].probed, (arch, info[0].tried[:2])
        assert "labels" in inputs or info[0].task == "base", arch  # a loss wherever the head has one


@needs_hf
def test_image_text_pairs_carry_one_image_token_per_feature() -> None:
    from unitcheck.hf import build, make_config

    model, inputs = build("llava", device="meta")
    token = make_config("llava").image_token_id
    assert set(inputs) >= {"input_ids", "pixel_values", "labels"}
    assert int((inputs["input_ids"] == token).sum()) > 0
    ids = inputs["input_ids"][inputs["input_ids"] != token]
    assert int(ids.max()) < token and ids.dtype == torch.long


@needs_hf
def test_attention_implementation_is_chosen_by_the_model() -> None:
    from unitcheck.hf import build

    bloom, _ = build("bloom", device="meta")  # no SDPA in this architecture: eager
    llama, _ = build("llama", device="meta")
    assert bloom.config._attn_implementation == "eager"
    assert llama.config._attn_implementation == "sdpa"


@needs_hf
def test_unset_kv_head_count_becomes_one_per_head() -> None:
    """NemotronConfig leaves num_key_value_heads None and its attention divides by it."""
    from unitcheck.hf import build, make_config

    cfg = make_config("nemotron")
    assert cfg.num_key_value_heads == cfg.num_attention_heads
    build("nemotron", device="meta")


VERIFIED = [
    "llama",
    pytest.param("cohere", marks=pytest.mark.slow),
    pytest.param("nemotron", marks=pytest.mark.slow),
    pytest.param("mixtral", marks=pytest.mark.slow),
    pytest.param("resnet", marks=pytest.mark.slow),
    pytest.param("swin", marks=pytest.mark.slow),
    # its SAM tower at the declared 1e-10 init: 75/78 generators (see the test below)
    pytest.param("unlimited_ocr", marks=pytest.mark.slow),
]


@needs_hf
@pytest.mark.parametrize("arch", VERIFIED)
def test_units_verify_passes_at_hf_default_sizes(arch: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Oracle (local, global) and the radial fingerprint on float32 HF code with casts, (1 + w)
    gains, MoE grouped matmuls, eval batch norm and ReLU kinks (issue 14)."""
    from unitcheck.cli import main

    code = main(["units", f"hf:{arch}", "--verify"])
    out = capsys.readouterr().out
    assert code == 0, out[-2000:]
    fp = next(line for line in out.splitlines() if line.startswith("fingerprint:"))
    matched, total = fp.split()[1].split("/")
    assert matched == total and int(total) > 0


@needs_hf
def test_fields_a_default_config_leaves_unset_are_completed() -> None:
    """Some default configs leave unset what their model code reads (checkpoints set it):
    ``head_dim`` (Ministral, Hunyuan), a vocabulary map (Emu3, Chameleon)."""
    from unitcheck.hf import Built, build, make_config

    cfg = make_config("ministral")
    assert cfg.head_dim == cfg.hidden_size // cfg.num_attention_heads
    assert make_config("nemotron").num_key_value_heads == make_config("nemotron").num_attention_heads
    for arch in ("ministral", "emu3", "nemotron"):
        info: list[Built] = []
        build(arch, device="meta", info=info)
        assert info[0].probed, (arch, info[0].tried[:2])


@needs_hf
def test_a_hard_coded_rotary_section_is_scaled_to_the_rotary_dim() -> None:
    """GLM-4V's text rotary code defaults ``mrope_section`` to sizes written for its checkpoint's
    rotary dim; the probe's failure says which sizes it needs, and the config gets them."""
    from unitcheck.hf import Built, build

    info: list[Built] = []
    model, _ = build("glm4v_text", device="meta", info=info)
    assert info[0].probed and "mrope_section" in info[0].plan
    rope = model.config.rope_parameters
    head = model.config.hidden_size // model.config.num_attention_heads
    assert sum(rope["mrope_section"]) == head // 2


@needs_hf
def test_optional_inputs_the_model_asks_for_are_made_from_their_names() -> None:
    """"You have to specify bbox", "`visual_feats` cannot be `None`": the probe's error names
    the argument, which is made from its name and sized by the config field named after it."""
    from unitcheck.hf import Built, build, make_config

    cases = {"bros": {"bbox"}, "lxmert": {"visual_feats", "visual_pos"},
             "decision_transformer": {"states", "actions", "returns_to_go", "timesteps"}}
    for arch, names in cases.items():
        info: list[Built] = []
        _, inputs = build(arch, device="meta", info=info)
        assert info[0].probed and set(inputs) >= names, (arch, set(inputs), info[0].tried[:2])
    lx = make_config("lxmert")
    _, inputs = build("lxmert", device="meta")
    assert inputs["visual_feats"].shape[-1] == lx.visual_feat_dim and inputs["visual_pos"].shape[-1] == lx.visual_pos_dim
    box = build("bros", device="meta")[1]["bbox"]
    assert box.dtype == torch.long and bool((box[..., 2:] > box[..., :2]).all())


@needs_hf
def test_a_sub_model_class_gets_its_sub_config_and_codebook_inputs() -> None:
    """The auto mapping pairs Musicgen's composite config with ``MusicgenForCausalLM``, whose
    ``config_class`` is the decoder's; its ids hold one row per codebook."""
    from unitcheck.hf import Built, build

    info: list[Built] = []
    model, inputs = build("musicgen", device="meta", info=info)
    books = model.config.num_codebooks
    assert info[0].probed and type(model).__name__ == "MusicgenForCausalLM"
    assert inputs["input_ids"].shape[0] == 2 * books and inputs["labels"].shape[-1] == books


@needs_hf
def test_backbone_channels_stay_consistent_across_configs() -> None:
    """RT-DETR feeds its backbone's stages 2-4 into its encoder: the backbone keeps the outputs
    its parent chose, and the encoder's input channels follow the backbone's scaled widths;
    HGNetV2's stage lists stay chained (each stage's input is the previous stage's output)."""
    from unitcheck.hf import make_config

    rt = make_config("rt_detr")
    backbone = rt.backbone_config
    assert backbone.out_indices == [2, 3, 4]
    assert list(rt.encoder_in_channels) == [backbone.hidden_sizes[i - 1] for i in backbone.out_indices]
    hg = make_config("hgnet_v2")
    assert list(hg.stage_in_channels[1:]) == list(hg.stage_out_channels[:-1])
    assert hg.stem_channels[0] == 3 and hg.stem_channels[-1] == hg.stage_in_channels[0]


@needs_hf
def test_patch_rows_are_offered_where_the_forward_accepts_their_shapes() -> None:
    """SigLIP2 takes NaFlex patch rows with ``spatial_shapes`` as an optional argument (a plain
    image fails in its patch projection): an optional ``spatial_shapes`` offers the layout too."""
    from unitcheck.hf import Built, build

    info: list[Built] = []
    model, inputs = build("siglip2", device="meta", info=info)
    assert info[0].probed, info[0].tried[:2]
    assert "spatial_shapes" in inputs and inputs["pixel_values"].dim() == 3


@needs_hf
def test_an_input_is_remade_at_the_shape_its_first_layer_asks_for() -> None:
    """Granite Speech 5 projects its input frames straight away; none of the feature counts its
    config names fits ("[160, 64] X [320, 64]"): the input is remade as wide as the projection."""
    from unitcheck.hf import Built, build

    info: list[Built] = []
    model, inputs = build("granite_speech5_encoder", device="meta", info=info)
    assert info[0].probed, info[0].tried[:2]
    assert inputs["input_features"].shape[-1] == 320 and "as [2, 80, 320]" in info[0].layout


def test_reshape_candidates_come_only_from_inputs_the_message_shows() -> None:
    from unitcheck.hf.shapes import _reshaped

    inputs = {"x": torch.zeros(2, 16, 70), "ids": torch.zeros(2, 16, dtype=torch.long)}
    conv = "Given groups=1, weight of size [32, 1, 7], expected input[2, 16, 70] to have 1 channels, but got 16 channels"
    assert _reshaped(conv, inputs) == [("x", (2, 1, 70))]
    assert _reshaped(conv.replace("[2, 16, 70]", "[2, 17, 70]"), inputs) == []  # a deeper layer: not guessed
    assert _reshaped(conv.replace("[2, 16, 70]", "[2, 16, 76]"), inputs) == [("x", (2, 1, 70))]  # padded by the conv
    mm = "a and b must have same reduction dim, but got [32, 70] X [320, 64]."
    assert _reshaped(mm, inputs) == [("x", (2, 16, 320)), ("x", (2, 320))]  # per position, or one per example
    # a broadcast against a fixed-size tensor: the trailing dims become its own, unless that
    # would make an input of over 2**25 elements (TVP's frames read as 64 x 448 x 448 each)
    frames = {"pixel_values": torch.zeros(2, 4, 64, 64, 3)}
    said = ("Attempting to broadcast a dimension of length 448 at -1! Mismatching argument at index 1 had "
            "torch.Size([448, 448]); but expected shape should be broadcastable to [{}]")
    assert _reshaped(said.format("2, 4, 64, 64, 3"), frames) == []
    assert _reshaped(said.format("2, 3, 64, 64"), {"pixel_values": torch.zeros(2, 3, 64, 64)}) == [
        ("pixel_values", (2, 3, 448, 448))]


def test_a_projection_reading_pooled_rows_remakes_the_one_input_as_wide() -> None:
    """Molmo2's adapter pools its patch features into one query per token before a projection
    reads them ("[2, 64] X [128, 64]": two tokens, no input of two rows): the one floating input
    as wide as the operand is remade as wide as the projection reads. With two such inputs the
    message does not say which, and nothing is guessed."""
    from unitcheck.hf.shapes import _reshaped

    why = "a and b must have same reduction dim, but got [2, 64] X [128, 64]."
    idx = torch.zeros(2, 16, dtype=torch.long)
    assert _reshaped(why, {"image_features": torch.zeros(2, 16, 64), "idx": idx}) == [("image_features", (2, 16, 128))]
    assert _reshaped(why, {"a": torch.zeros(2, 16, 64), "b": torch.zeros(2, 8, 64), "idx": idx}) == []
    assert _reshaped(why, {"x": torch.zeros(2, 64), "y": torch.zeros(2, 16, 64)}) == [("x", (2, 128))]  # x is it


def test_a_projection_between_two_layers_gets_the_width_the_first_makes() -> None:
    """Llama 4's vision projector reads ``intermediate_size`` features from a pixel shuffle that
    makes ``hidden_size / ratio**2`` of them, a tie its default config (and any shrink) breaks:
    "[32, 256] X [472, 344]" names no input, so the config field as wide as the projection reads
    becomes as wide as it was given. Where an input is the operand shown, the input is remade
    instead, and the config is left alone."""
    from unitcheck.hf.repair import _repair

    cfg = SimpleNamespace(hidden_size=64, intermediate_size=472, projector_input_dim=344, num_channels=3)
    why = "RuntimeError: a and b must have same reduction dim, but got [32, 256] X [472, 344]."
    image = {"pixel_values": torch.zeros(2, 3, 64, 64)}
    assert [f[1:3] for f in _repair(cfg, why, image)] == [("intermediate_size", 256)]
    assert _repair(cfg, why, {"x": torch.zeros(2, 16, 256)}) == ()  # an input is the operand: remade instead
    assert _repair(cfg, "mat1 and mat2 shapes cannot be multiplied (32x256 and 472x344)", image)[0][2] == 256


def test_a_mask_made_from_the_queries_alone_is_given_as_long_as_the_keys() -> None:
    """DFlash (Muse Glimmer's assistant) prepends context states to its keys but makes its mask
    from the queries: a traced run cannot skip it, so a padding mask as long as the keys is given."""
    from unitcheck.hf.shapes import _reshaped, _with_shapes

    why = ("RuntimeError: Attempting to broadcast a dimension of length 32 at -1! Mismatching argument at index 1 "
           "had torch.Size([2, 1, 32, 32]); but expected shape should be broadcastable to [2, 4, 32, 64] "
           "[at: attn_output = torch.nn.functional.scaled_dot_product_attention(query, key, value, "
           "attn_mask=attention_mask)]")
    inputs = {"noise_embeds": torch.zeros(2, 32, 64)}
    assert _reshaped(why, inputs) == [("attention_mask", (2, 64))]
    mask = _with_shapes(inputs, (("attention_mask", (2, 64)),), 0)["attention_mask"]
    # a token mask: the first row whole, the last quarter of the last row padded (so eager keeps
    # the mask as the exported path does)
    assert mask.dtype == torch.long and bool((mask[0] == 1).all())
    assert mask[-1].tolist() == [1] * 48 + [0] * 16


@needs_hf
@pytest.mark.parametrize("model_type", ["llama4_vision_model", "muse_glimmer_assistant"])
def test_projections_that_read_another_width_are_answered(model_type: str) -> None:
    """Ways to fail "a and b must have same reduction dim": Llama 4's vision projector (a config
    tie), DFlash's context states (an input as wide as the layers it concatenates, then a mask as
    long as the keys). (PI0's robot state, one vector per example, is answered on transformers
    5.24, where its projection fails that way; 5.25 fails first at a concatenation, which no rule
    answers yet: :func:`test_reshape_candidates_come_only_from_inputs_the_message_shows` covers the
    candidate.)"""
    from unitcheck.hf import Built, build

    info: list[Built] = []
    model, inputs = build(model_type, device="meta", info=info)
    cfg = model.config
    if model_type == "llama4_vision_model":
        assert info[0].probed and cfg.intermediate_size == int(cfg.hidden_size / cfg.pixel_shuffle_ratio ** 2)
    else:
        assert info[0].probed, info[0].tried[:2]
        assert inputs["context_hidden_states"].shape[-1] == cfg.hidden_size * len(cfg.target_layer_ids)
        assert inputs["attention_mask"].shape[-1] == inputs["context_hidden_states"].shape[1] + inputs["noise_embeds"].shape[1]


@needs_hf
@pytest.mark.parametrize(("model_type", "kind"), [("llava", "image"), ("qianfan_ocr", "image"),
                                                 ("granite_docling", "image"), ("granite_speech", "audio")])
def test_image_tokens_are_counted_for_a_cpu_model_too(model_type: str, kind: str) -> None:
    """The oracle builds on the CPU: its text must hold as many image tokens as on meta, or the
    model's own check (tokens vs features) fails on the real run. Granite Docling's images passed
    the fake-tensor probe with none (the check is deferred there), and its check words the
    mismatch its own way ("do not match: tokens: 0, features 16"): a real run counts them.
    Granite Speech's check counts the batch ("tokens: 0, features: 2" for 2 x 15 vectors): its
    audio tower counts them."""
    from unitcheck import hf

    _, on_meta = hf.build(model_type, device="meta")
    model, on_cpu = hf.build(model_type, device="cpu")
    assert torch.equal(on_meta["input_ids"], on_cpu["input_ids"])
    token = getattr(model.config, f"{kind}_token_id")
    assert int((on_cpu["input_ids"] == token).sum()) > 0
    with torch.no_grad():
        model(**on_cpu)


@needs_hf
@pytest.mark.parametrize(("model_type", "token"), [("deepseek_vl", "image_token_id"), ("glmasr", "audio_token_id"), ("omniasr", "audio_token_id"),
                                                  ("idefics2", "image_token_id"), ("modernvbert", "image_token_id"),
                                                  ("fuyu", "image_token_id"), ("qwen2_audio", "audio_token_id"),
                                                  ("musicflamingo", "audio_token_id"),
                                                  ("moss_transcribe_diarize", "audio_token_id")])
def test_media_tokens_are_counted_where_the_tower_is(model_type: str, token: str) -> None:
    """DeepSeek-VL keeps ``get_image_features`` on its inner model; GLM-ASR's audio features are
    the frames its mask keeps (a count fake tensors cannot give); OmniASR takes waveforms;
    Idefics 2 and ModernVBERT take images only as (batch, images, C, H, W), the latter's tower on
    its base model; Fuyu's tower takes patch rows as wide as its projection says. Qwen2-Audio has
    no getter, MusicFlamingo's wants the text and MOSS's a processor's mask: their forward's own
    check says how many features the audio makes. Each checks tokens against features, so the example must carry one token
    per feature or the model rejects it."""
    from unitcheck import hf

    model, inputs = hf.build(model_type, device="cpu")
    assert int((inputs["input_ids"] == getattr(model.config, token)).sum()) > 0
    with torch.no_grad():
        model(**inputs)


class _PatchTower(torch.nn.Module):
    """Fuyu-like: the tower is one projection of patch rows (192 wide), not an image."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(192, 16)

    def get_image_features(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.proj(pixel_values)


class _GridTower(torch.nn.Module):
    """GLM-5-Next-like: features per image from the grid's values (``tolist`` of lengths)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(12, 16)

    def get_image_features(self, pixel_values: torch.Tensor, image_grid_thw: torch.Tensor) -> list[torch.Tensor]:
        sizes = image_grid_thw.prod(-1).tolist()
        return list(torch.split(self.proj(pixel_values), sizes))


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_media_tokens_where_the_tower_asks_for_another_shape_or_for_values(device: str) -> None:
    """The image-token count comes from the tower: at the shape its first layer asks for (its
    own error says so), and from a zeroed CPU copy where fake tensors cannot count (sizes read
    from values)."""
    from unitcheck.hf.media import _media_text

    ids = torch.arange(16).reshape(2, 8)
    with torch.device(device):
        patch, grid = _PatchTower(), _GridTower()
    out = _media_text(patch, ids, {"pixel_values": torch.randn(2, 3, 8, 8)}, 99, "image")
    assert out is not None and out["pixel_values"].shape[-1] == 192
    assert int((out["input_ids"] == 99).sum()) == out["pixel_values"].shape[:-1].numel()
    media = {"pixel_values": torch.randn(10, 12), "image_grid_thw": torch.tensor([[1, 1, 5], [1, 5, 1]])}
    out = _media_text(grid, ids, media, 99, "image")
    assert out is not None and (out["input_ids"] == 99).sum(-1).tolist() == [5, 5]


@needs_hf
def test_default_configs_their_model_code_cannot_read_are_repaired_at_build() -> None:
    """Default configs that only checkpoints complete: per-layer lists left None (LFM2-MoE's
    ``layer_types``; DeepSeek-OCR2's ``mlp_layer_types``, filled with the kind its code compares
    with), rotary parameters looked up per layer type in an empty dict (Cohere Compass), a field
    only the parent config declares (T5Gemma2's ``dropout_rate``) or keeps in its rotary
    parameters (DBRX's ``rope_theta``): the constructor's failure says which field to fill."""
    from unitcheck.hf import Built, build, make_config

    cases = {"lfm2_moe": "layer_types (unset)", "deepseek_ocr2": "mlp_layer_types (unset)",
             "cohere_compass_text": "rope_parameters per layer type", "t5gemma2_encoder": "dropout_rate (missing)",
             "dbrx": "rope_theta (missing)"}
    for arch, what in cases.items():
        info: list[Built] = []
        model, _ = build(arch, device="meta", info=info)
        assert what in info[0].plan, (arch, info[0].plan, info[0].tried[:2])
    assert model.config.attn_config.rope_theta == model.config.rope_parameters["rope_theta"]
    assert model.config.attn_config.clip_qkv is not None  # the per-type gap table
    assert make_config("qwen4_exp").text_config.indexer_budget % make_config("qwen4_exp").text_config.indexer_compress_ratio == 0
    assert make_config("step3p7").text_config.sliding_window is not None
    assert make_config("step3p5").sliding_window is not None  # the same text model as its own type
    assert len(make_config("uvdoc").backbone_config.out_features) == 6
    text = build("deepseek_ocr2", device="meta")[0].config.text_config
    assert set(text.mlp_layer_types) == {"sparse"} and len(text.mlp_layer_types) == text.num_hidden_layers


@needs_hf
def test_a_field_only_weight_initialisation_reads_is_repaired_on_the_cpu() -> None:
    """Pix2Struct's text sub-config lacks the ``initializer_range`` its parent declares; only the
    CPU build initialises weights and reads it (the meta build, and so the plan's probe, never
    does)."""
    from unitcheck.hf import Built, build

    info: list[Built] = []
    model, inputs = build("pix2struct_text_model", info=info)
    assert "initializer_range (missing)" in info[0].plan
    assert model.config.initializer_range == 0.02
    assert next(model.parameters()).device.type == "cpu" and "input_ids" in inputs


@needs_hf
@pytest.mark.parametrize("model_type", ["pix2struct_vision_model", "pix2struct"])
def test_flattened_patches_carry_row_and_column_ids(model_type: str) -> None:
    """Pix2Struct reads ``flattened_patches``: each row is a patch's 1-based row and column ids,
    then its pixels. Without it the build passed nothing and the model refused to run."""
    from unitcheck.hf import Built, build

    info: list[Built] = []
    model, inputs = build(model_type, info=info)
    patches = inputs["flattened_patches"]
    assert patches.shape[-1] == 2 + _patch_width(model)
    assert patches[..., :2].min() >= 1 and float(patches[..., :2].max()) <= 4
    with torch.no_grad():
        model.eval()(**inputs)


def _patch_width(model: torch.nn.Module) -> int:
    cfg = getattr(model.config, "vision_config", model.config)
    return int(cfg.patch_embed_hidden_size)


@needs_hf
def test_position_ids_counted_from_an_unset_padding_id_get_one() -> None:
    """ESM's default config leaves ``pad_token_id`` unset, yet its positions are counted from
    ``input_ids.ne(padding_idx)``: the probe's failure names the padding id, which gets a value."""
    from unitcheck.hf import Built, build

    info: list[Built] = []
    model, _ = build("esm", device="meta", info=info)
    assert info[0].probed and "pad_token_id (unset)" in info[0].plan, info[0].tried[:2]
    assert model.config.pad_token_id == 1


def test_ids_made_for_a_table_the_config_sizes_stay_in_it() -> None:
    """Mllama's vision tower requires ``aspect_ratio_ids`` into a table of ``max_aspect_ratio_id
    + 1`` rows: ids made like the text's (up to the vocabulary) passed on meta, where nothing
    checks an index, and the CPU build failed at the embedding ("index out of range")."""
    from unitcheck.hf.inputs import _by_name

    cfg = SimpleNamespace(vocab_size=1000, max_aspect_ratio_id=8, num_labels=3)
    ids = torch.arange(100, 132).reshape(2, 16)
    inputs: dict[str, Any] = {}
    _by_name(cfg, inputs, {"aspect_ratio_ids", "label_ids", "decoder_input_ids"}, ids, 2, torch.Generator())
    assert int(inputs["aspect_ratio_ids"].max()) <= 8 and inputs["aspect_ratio_ids"].shape == ids.shape
    assert int(inputs["label_ids"].max()) < 3
    assert torch.equal(inputs["decoder_input_ids"], ids)  # text ids: the text's range


def test_an_argument_named_idx_is_an_index() -> None:
    """Molmo2's adapter requires ``pooled_patches_idx`` (indices into the patches): ``_idx`` is an
    index suffix like ``_ids``, and float features there failed every run ("tensors used as
    indices must be long")."""
    from unitcheck.hf.inputs import _by_name

    ids = torch.arange(100, 132).reshape(2, 16)
    inputs: dict[str, Any] = {}
    _by_name(SimpleNamespace(hidden_size=64), inputs, {"pooled_patches_idx", "hidden_states"}, ids, 2,
             torch.Generator())
    assert inputs["pooled_patches_idx"].dtype == torch.long and inputs["pooled_patches_idx"].shape == ids.shape
    assert inputs["hidden_states"].is_floating_point()  # the other argument stays features


@needs_hf
def test_sizes_a_default_config_leaves_unset_get_stand_ins() -> None:
    """Diffusion Gemma's default config leaves ``num_experts``, ``top_k_experts`` and
    ``moe_intermediate_size`` None, yet every layer builds a router (``nn.Linear(hidden_size,
    num_experts)``); Qwen3-Omni's talker reads a ``shared_expert_intermediate_size`` no config
    class declares. Counts get 2, widths the feed-forward's, and the model runs."""
    from unitcheck import hf

    model, inputs = hf.build("diffusion_gemma", device="cpu")
    text = model.config.text_config
    assert (text.num_experts, text.top_k_experts, text.moe_intermediate_size) == (2, 2, text.intermediate_size)
    with torch.no_grad():
        model(**inputs)
    talker = hf.make_config("qwen3_omni_moe", {}, hf.PLANS[0]).talker_config.text_config
    assert hf.repair._known_value(talker, talker, "shared_expert_intermediate_size") == talker.intermediate_size
    assert hf.repair._known_value(talker, talker, "no_such_field") is hf.shrink._SAME


@needs_hf
def test_an_unset_horizon_leaves_room_for_the_label_window() -> None:
    """Autoformer's decoder reads the last ``label_length`` (10) steps of a context as long as the
    horizon the builder sets where the config leaves it unset: a horizon of 8 built a model that
    fails on its own example on the CPU (meta probes passed)."""
    from unitcheck import hf

    model, inputs = hf.build("autoformer", device="cpu")
    assert model.config.context_length >= model.config.label_length
    with torch.no_grad():
        model(**inputs)


@needs_hf
def test_a_sub_model_type_is_built_from_the_class_that_takes_its_config() -> None:
    """Sub-model types have no auto mapping, and some model classes are neither named after the
    config nor exported (``qwen2_vl_vision``'s ``Qwen2VisionTransformerPretrainedModel``): the
    modeling module's class whose ``config_class`` is the type's config builds it. Blocks that
    merely take the config (SAM's mask decoder's attention blocks) are not the type's model."""
    from unitcheck import hf

    assert hf.head_classes("qwen2_vl_vision") == [
        ("base", "transformers.models.qwen2_vl.modeling_qwen2_vl:Qwen2VisionTransformerPretrainedModel", "none")]
    assert hf.head_classes("sam_mask_decoder") == [  # the class named after the config, a block (tests/hf)
        ("part", "transformers.models.sam.modeling_sam:SamMaskDecoder", "none")]
    # a causal LM among them first (MusicGen's decoder: its loss-returning head)
    assert hf.head_classes("musicgen_decoder")[0] == (
        "causal_lm", "transformers.models.musicgen.modeling_musicgen:MusicgenForCausalLM", "tokens")
    info: list[hf.Built] = []
    model, inputs = hf.build("idefics2_vision", device="cpu", info=info)
    assert type(model).__name__ == "Idefics2VisionTransformer" and info[0].head == "Idefics2VisionTransformer"
    assert info[0].probed
    with torch.no_grad():
        model(**inputs)


@needs_hf
def test_a_main_input_named_otherwise_holds_what_its_argument_says() -> None:
    """BridgeTower's vision model inherits ``main_input_name = "input_ids"`` and takes ``image``:
    it gets images there, not token ids (its probe failed on ``pixel_values.shape``)."""
    from unitcheck import hf

    info: list[hf.Built] = []
    model, inputs = hf.build("bridgetower_vision_model", device="cpu", info=info)
    assert info[0].probed and set(inputs) == {"image"} and inputs["image"].dim() == 4
    with torch.no_grad():
        model(**inputs)
    # ids whose name says audio are still ids (Inkling's audio tower takes audio_input_ids)
    model, inputs = hf.build("inkling_audio", device="meta")
    assert inputs["audio_input_ids"].dtype == torch.long


@needs_hf
def test_a_model_whose_config_says_use_cache_is_traced_and_regenerated() -> None:
    """A user's own transformers model keeps its config's ``use_cache = True`` (Llama's default):
    it returns a ``DynamicCache``, which export cannot flatten, and every capture failed. The
    capture turns the cache off and back on; lint, the null rewrite and GCT work on it."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from unitcheck.rewrite.api import rewrite
    from unitcheck.rewrite.equal import differences

    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    ids = torch.randint(0, 128, (2, 16))
    inputs = {"input_ids": ids, "labels": ids}
    assert model.config.use_cache is True
    assert infer_units(model, inputs).violations
    assert model.config.use_cache is True  # as the user left it
    same = rewrite(model, inputs, to="identity")
    assert [d for training in (False, True) for d in differences(model, same.module, inputs, training)] == []
    assert rewrite(model, inputs).complete
    assert model.config.use_cache is True


@needs_hf
def test_a_vision_tower_with_aspect_ratio_ids_runs_on_the_cpu() -> None:
    from unitcheck import hf

    model, inputs = hf.build("mllama_vision_model", device="cpu")
    with torch.no_grad():
        model(**inputs)


@needs_hf
def test_the_main_input_goes_to_the_first_required_argument_when_the_forward_names_it_otherwise() -> None:
    """VibeVoice's codec encoder and decoder inherit ``main_input_name = "input_values"`` but take
    ``hidden_states``: the waveform (or latents, as wide as the decoder's first conv asks) goes
    there instead of into ``**kwargs`` beside a made-up tensor."""
    from unitcheck.hf import Built, build

    for arch, channels in (("vibevoice_acoustic_tokenizer_encoder", 1), ("vibevoice_acoustic_tokenizer_decoder", None)):
        info: list[Built] = []
        model, inputs = build(arch, device="meta", info=info)
        assert info[0].probed and set(inputs) == {"hidden_states"}, (arch, info[0].tried[:2])
        want = channels or model.stem.conv.conv.in_channels
        assert inputs["hidden_states"].dim() == 3 and inputs["hidden_states"].shape[1] == want


def test_a_layer_norm_asks_for_features_as_wide_as_it_normalises() -> None:
    """NeuCodec's semantic encoder normalises its input features first; its message shows the
    input and the width it wants (the feature count the shrunk config ties it to)."""
    from unitcheck.hf.shapes import _reshaped

    inputs = {"input_features": torch.zeros(2, 16, 64), "input_values": torch.zeros(2, 1, 3200)}
    why = ("RuntimeError: Given normalized_shape=[8], expected input with shape [8], but got input of size "
           "torch.Size([2, 16, 64])")
    assert _reshaped(why, inputs) == [("input_features", (2, 16, 8))]
    assert _reshaped(why.replace("[2, 16, 64]", "[2, 10, 64]"), inputs) == []


def test_two_parts_of_a_concatenation_ask_for_the_same_size() -> None:
    """XCodec2 concatenates acoustic frames (its waveform's samples over its hop: 10) with the
    semantic frames of its features (16, made from the name): the input holding one of the two
    sizes on one axis takes the other; one holding neither, or both, is not guessed at."""
    from unitcheck.hf.shapes import _reshaped

    inputs = {"input_features": torch.zeros(2, 16, 8), "input_values": torch.zeros(2, 1, 3200)}
    why = ("RuntimeError: Sizes of tensors must match except in dimension 1. Expected 10 in dimension 2 but got "
           "16 for tensor number 1 in the list")
    assert _reshaped(why, inputs) == [("input_features", (2, 10, 8))]
    assert _reshaped(why, {"x": torch.zeros(2, 16, 16), "y": torch.zeros(2, 7, 8)}) == []
    real = "RuntimeError: Sizes of tensors must match except in dimension 1. Expected size 10 but got size 16 " \
        "for tensor number 1 in the list."  # a real run's wording
    assert _reshaped(real, inputs) == [("input_features", (2, 10, 8))]


@needs_hf
def test_two_layers_a_concatenation_joins_get_one_width() -> None:
    """DeepSeek-OCR 2's default config sizes its SAM neck's last channels and its encoder's width
    independently: the concatenation of the two fails (72 against 64 once shrunk). The width fewer
    fields hold takes the other's; a statement that joins an input leaves the config alone."""
    from transformers import PretrainedConfig

    from unitcheck.hf.repair import _repair_joined

    sam = PretrainedConfig(downsample_channels=[40, 72], hidden_size=32)
    cfg = PretrainedConfig(sam_config=sam, encoder_config=PretrainedConfig(hidden_size=64, intermediate_size=64))
    why = ("RuntimeError: Sizes of tensors must match except in dimension 1. Expected 72 in dimension 2 but got 64 "
           "for tensor number 1 in the list [at: combined = torch.cat([hidden_states, queries], dim=1)]")
    fixes = _repair_joined(cfg, why, {"pixel_values": torch.zeros(2, 3, 64, 64)})
    assert [(path, key, value) for path, key, value, _ in fixes] == [(("sam_config",), "downsample_channels", [40, 64])]
    assert _repair_joined(cfg, why, {"hidden_states": torch.zeros(2, 3, 64)}) == ()  # an input joined: not the config
    real = why.replace("Expected 72 in dimension 2 but got 64", "Expected size 72 but got size 64")
    assert _repair_joined(cfg, real, {"pixel_values": torch.zeros(2, 3, 64, 64)}) == fixes


@needs_hf
def test_a_default_config_whose_joined_widths_disagree_is_repaired() -> None:
    from unitcheck import hf
    from unitcheck.tracer import trace

    info: list[Any] = []
    model, inputs = hf.build("deepseek_ocr2_vision", device="meta", info=info)
    assert info[0].probed and "downsample_channels" in info[0].plan
    assert model.config.sam_config.downsample_channels[-1] == model.config.encoder_config.hidden_size
    trace(model, inputs)


def test_images_the_model_stacks_are_scaled_together_to_the_configured_size() -> None:
    """SegGPT stacks its prompt above its input and checks the stack against its image size:
    every image takes the scale the message gives, and inputs shaped alike are remade alike."""
    from unitcheck.hf.shapes import _reshaped, _with_companions

    images = {name: torch.zeros(2, 3, 896, 448) for name in ("pixel_values", "prompt_pixel_values")}
    inputs = {**images, "bool_masked_pos": torch.zeros(2, 16, dtype=torch.bool), "timestep": torch.zeros(2)}
    why = "ValueError: Input image size (1792*448) doesn't match model (896*448)."
    assert _reshaped(why, inputs) == [(name, (2, 3, 448, 448)) for name in images]
    assert _with_companions(inputs, ("pixel_values", (2, 3, 448, 448))) == [
        (("pixel_values", (2, 3, 448, 448)),),
        (("pixel_values", (2, 3, 448, 448)), ("prompt_pixel_values", (2, 3, 448, 448)))]
    # features made from their names are all (batch, positions, width): alike by construction
    features = {"noise_embeds": torch.zeros(2, 16, 64), "context_hidden_states": torch.zeros(2, 16, 64)}
    assert _with_companions(features, ("context_hidden_states", (2, 16, 320))) == [
        (("context_hidden_states", (2, 16, 320)),)]


@needs_hf
def test_a_codecs_features_get_as_many_frames_as_its_waveform() -> None:
    from unitcheck import hf

    model, inputs = hf.build("xcodec2", device="meta")
    hop = int(model.config.hop_length)
    assert inputs["input_features"].shape[1] == inputs["input_values"].shape[-1] // hop


def test_a_broadcast_against_a_fixed_size_tensor_reshapes_the_input_it_shows() -> None:
    """TVP multiplies its frames by a prompt mask as large as its configured image; Kyutai adds one
    offset per codebook to its ids; FunASR normalises stacked frames: the message shows the
    input's shape and the fixed tensor's, whose dims the input takes (ids stay ids)."""
    from unitcheck.hf.shapes import _reshaped, _with_shapes

    image = {"pixel_values": torch.zeros(2, 3, 64, 64)}
    why = ("RuntimeError: Attempting to broadcast a dimension of length 448 at -1! Mismatching argument at index 1 "
           "had torch.Size([448, 448]); but expected shape should be broadcastable to [2, 3, 64, 64]")
    assert _reshaped(why, image) == [("pixel_values", (2, 3, 448, 448))]
    ids = {"input_ids": torch.ones(2, 16, dtype=torch.long)}
    why = ("RuntimeError: Attempting to broadcast a dimension of length 33 at -1! Mismatching argument at index 1 "
           "had torch.Size([33]); but expected shape should be broadcastable to [2, 16]")
    assert ("input_ids", (2, 16, 33)) in _reshaped(why, ids)
    remade = _with_shapes(ids, (("input_ids", (2, 16, 33)),), 0)["input_ids"]
    assert remade.dtype == torch.long and remade.shape == (2, 16, 33) and int(remade.max()) <= 1
    assert _reshaped(why.replace("[2, 16]", "[2, 17]"), ids) == []


@needs_hf
def test_ids_with_one_column_per_codebook_are_found_from_the_broadcast() -> None:
    from unitcheck.hf import Built, build

    info: list[Built] = []
    _, inputs = build("kyutai_speech_to_text", device="meta", info=info)
    assert info[0].probed and inputs["input_ids"].dim() == 3, info[0].tried[:3]


@needs_hf
def test_unset_multimodal_rotary_sections_get_three() -> None:
    """HunYuan-VL's text rotary code reads ``rope_parameters["mrope_section"]``, which its default
    config leaves unset: the probe's failure names it, and the rotary half is split in three."""
    from unitcheck.hf import Built, build

    info: list[Built] = []
    model, _ = build("hunyuan_vl_text", device="meta", info=info)
    assert info[0].probed and "mrope_section (unset)" in info[0].plan, info[0].tried[:2]
    cfg = model.config
    head = cfg.head_dim or cfg.hidden_size // cfg.num_attention_heads
    assert len(cfg.rope_parameters["mrope_section"]) == 3 and sum(cfg.rope_parameters["mrope_section"]) == head // 2


@needs_hf
def test_a_meta_build_keeps_legacy_constructed_parameters_on_meta() -> None:
    """``nn.Parameter(torch.Tensor(n, d))`` ignores the device context: OneFormer's level
    embedding came out on the CPU inside a meta model. Its ``task_inputs`` is one row per example
    (made like ids, then as wide as the task encoder's projection asks)."""
    from unitcheck.hf import Built, build

    info: list[Built] = []
    model, inputs = build("oneformer", device="meta", info=info)
    assert info[0].probed, info[0].tried[:2]
    assert {t.device.type for t in (*model.parameters(), *model.buffers())} == {"meta"}
    assert inputs["task_inputs"].dim() == 2


@needs_hf
def test_a_backbone_keeps_as_many_layers_as_its_last_output_stage() -> None:
    """LW-DETR reads its ViT backbone's stages 2, 4, 5 and 9: the shrunk backbone keeps nine
    layers, so every output stage exists (and the per-type table gives it a projector scale);
    DINOv2's last-layer output moves to the new last layer (both were rejected, "out_features
    must be a subset of stage_names", and fell back to the full-size default)."""
    from unitcheck.hf import Built, build, make_config

    cfg = make_config("lw_detr")
    assert cfg.backbone_config.num_hidden_layers == max(cfg.backbone_config.out_indices) == 9
    assert list(cfg.projector_scale_factors) == [1.0]
    dino = make_config("dinov2")  # its only output, the last layer, follows the shrink instead
    assert dino.num_hidden_layers == 2 and dino.out_indices == [2] and dino.out_features == ["stage2"]
    assert make_config("swin").out_features == ["stage4"]  # a stage count the shrink does not change
    info: list[Built] = []
    build("lw_detr", device="meta", info=info)
    assert info[0].probed and info[0].plan == "small", (info[0].plan, info[0].tried[:2])


@needs_hf
def test_an_unset_video_placeholder_token_gets_a_slot_of_its_own() -> None:
    """InstructBLIP-Video's default leaves ``video_token_index`` unset, so its placeholder mask is
    ``input_ids == None`` (a bool): the token gets a slot at the top of the small vocabulary."""
    from unitcheck.hf import Built, build, make_config

    cfg = make_config("instructblipvideo")
    assert cfg.video_token_index is not None and cfg.video_token_index < cfg.text_config.vocab_size
    info: list[Built] = []
    _, inputs = build("instructblipvideo", device="meta", info=info)
    assert info[0].probed and inputs["pixel_values"].dim() == 5, info[0].tried[:2]


@needs_hf
def test_informer_traces_without_distilling() -> None:
    """Informer's distilling conv halves the sequence between encoder layers while the encoder mask
    torch.export materialises stays at the input length: the per-type table turns distilling off."""
    from unitcheck.hf import Built, build, make_config

    assert make_config("informer").distil is False
    info: list[Built] = []
    build("informer", device="meta", info=info)
    assert info[0].probed, info[0].tried[:2]


def test_a_window_larger_than_what_is_left_of_the_image_asks_for_a_larger_image() -> None:
    """PP-OCRv5's recogniser pools (3, 2) windows after a 32x downsampling: a 64-pixel image leaves
    two rows. The shrunk config does not tie the image size, so a larger image is offered."""
    from unitcheck.hf.shapes import _reshaped

    inputs = {"pixel_values": torch.zeros(2, 3, 64, 64), "input_ids": torch.zeros(2, 16, dtype=torch.long)}
    why = "RuntimeError: Given input size: (512x2x2). Calculated output size: (512x0x1). Output size is too small"
    assert _reshaped(why, inputs) == [("pixel_values", (2, 3, 128, 128)), ("pixel_values", (2, 3, 256, 256))]
    assert _reshaped("RuntimeError: mat1 and mat2 shapes cannot be multiplied", inputs) == []


@needs_hf
def test_lengths_a_model_asks_for_are_one_per_example() -> None:
    """XLM's ``assert lengths.max().item() <= slen`` names ``lengths``: made from its name, it is
    one full length per example, not a feature tensor."""
    from unitcheck.hf import build

    _, inputs = build("xlm", device="meta")
    assert inputs["lengths"].shape == (2,) and int(inputs["lengths"].max()) == inputs["input_ids"].shape[1]


def test_frames_concatenated_along_time_are_split_back_by_their_lengths() -> None:
    """The Qwen Omni audio encoders take every example's frames concatenated, (features, total
    frames), and ``feature_lens`` per example: the lengths were made as features from their
    name, then a batch of frames failed the split by those lengths."""
    from unitcheck.hf.inputs import _named_inputs
    from unitcheck.hf.shapes import _reshaped

    frames = torch.zeros(2, 128, 64)
    lens = _named_inputs(["feature_lens"], SimpleNamespace(), {"input_features": frames}, 2, 16, 0)["feature_lens"]
    assert lens.dtype == torch.long and lens.shape == (2,)
    why = ("RuntimeError: split_with_sizes expects split_sizes to sum exactly to 64 (input tensor's size at "
           "dimension 0), but got split_sizes=[64, 64] [at: chunk_list = input_features.T.split(...)]")
    assert _reshaped(why, {"input_features": frames, "feature_lens": lens}) == [("input_features", (128, 128))]
    assert _reshaped(why.replace("[64, 64]", "[64, 60]"), {"input_features": frames}) == []


def test_an_input_the_failing_statement_reads_as_none_is_asked_for() -> None:
    """BLT's local decoder reads ``inputs_embeds.shape[0]``: it takes embeddings, not ids. The
    builder never makes up ``inputs_embeds`` (it stands in for the ids), except where the failing
    statement dereferences it as None."""
    from unitcheck.hf.inputs import _asked_for

    class Decoder(nn.Module):
        def forward(self, input_ids=None, inputs_embeds=None, patch_embeds=None):  # type: ignore[no-untyped-def]
            return inputs_embeds

    why = "AttributeError: 'NoneType' object has no attribute 'shape' [at: batch_size = inputs_embeds.shape[0]]"
    ids = {"input_ids": torch.zeros(2, 8, dtype=torch.long)}
    assert _asked_for(Decoder(), ids, why) == ["inputs_embeds"]
    assert _asked_for(Decoder(), ids, why.replace("'NoneType' object", "'Tensor' object")) == []


def test_merge_sizes_are_one_integer_per_image_of_the_grid() -> None:
    """VideoLLaMA 3's vision tower takes ``merge_sizes`` beside its patch grid: made from the
    name, it was a float feature tensor, and the tower's ``h // merge_size`` failed (reported as
    an unsupported operator). Both makers of inputs by name (required and asked) share it, and
    the lengths predicate."""
    from unitcheck.hf.inputs import _by_name, _named_inputs

    grid = torch.tensor([[1, 4, 4], [1, 4, 4], [1, 4, 4]])
    inputs: dict[str, Any] = {"pixel_values": torch.zeros(48, 12), "grid_thw": grid}
    asked = _named_inputs(["merge_sizes"], SimpleNamespace(spatial_merge_size=2), inputs, 2, 8, 0)["merge_sizes"]
    assert asked.tolist() == [2, 2, 2]
    required = dict(inputs)
    _by_name(SimpleNamespace(), required, {"merge_sizes", "feature_lens"}, torch.zeros(2, 8, dtype=torch.long), 2,
             torch.Generator())
    assert required["merge_sizes"].tolist() == [1, 1, 1]  # no merge size in the config: 1 divides any grid
    assert required["feature_lens"].dtype == torch.long and required["feature_lens"].shape == (2,)
    assert _named_inputs(["merge_sizes"], SimpleNamespace(), {}, 2, 8, 0)["merge_sizes"].is_floating_point()


@needs_hf
@pytest.mark.parametrize("model_type", ["qwen2_5_omni_audio_encoder", "qwen3_omni_moe_audio_encoder"])
def test_an_audio_encoder_of_concatenated_frames_is_built_and_traced(model_type: str) -> None:
    from unitcheck.hf import build

    model, inputs = build(model_type, device="meta")
    assert inputs["input_features"].dim() == 2 and int(inputs["feature_lens"].sum()) == inputs["input_features"].shape[1]
    ug = infer_units(model, inputs)
    assert ug.coverage == 1.0 and ug.violations


def test_patch_rows_become_patch_images_for_a_conv_patch_embedding() -> None:
    """Kimi-K2.5's vision tower embeds patches with a conv: rows of 3 * 8 * 8 values are remade as
    3 x 8 x 8 patches (only the input the message shows)."""
    from unitcheck.hf.shapes import _reshaped

    inputs = {"pixel_values": torch.zeros(32, 192), "grid_thw": torch.ones(2, 3, dtype=torch.long)}
    why = "RuntimeError: Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: [32, 192]"
    assert _reshaped(why, inputs) == [("pixel_values", (32, 3, 8, 8))]
    assert _reshaped(why.replace("[32, 192]", "[32, 190]"), inputs) == []


@needs_hf
@pytest.mark.slow
def test_a_real_run_decides_between_layouts_fake_tensors_cannot() -> None:
    """WavTokenizer's padding branches on values, so every waveform layout stops there on fake
    tensors; a real run of the small model on the CPU rejects the flat waveform (its first conv
    wants a channel axis) and picks the layout with one."""
    from unitcheck.hf import Built, build

    info: list[Built] = []
    _, inputs = build("wavtokenizer", device="meta", info=info)
    assert info[0].layout == "input_values (channels)" and inputs["input_values"].dim() == 3, info[0].tried[:2]
    assert any("on real values" in t for t in info[0].tried)


def test_a_real_runs_matmul_message_reshapes_like_the_fake_one() -> None:
    """On real tensors a projection's mismatch reads "mat1 and mat2 shapes cannot be multiplied
    (32x192 and 384x64)" (Muse Glimmer's patch rows lack the temporal patch): rows as wide as the
    projection's in-features."""
    from unitcheck.hf.shapes import _reshaped

    inputs = {"pixel_values": torch.zeros(32, 192), "grid_thw": torch.ones(2, 3, dtype=torch.long)}
    why = "RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x192 and 384x64)"
    assert _reshaped(why, inputs) == [("pixel_values", (32, 384))]


@needs_hf
def test_a_real_run_failure_reshapes_the_input_it_shows() -> None:
    from unitcheck.hf import Built, build

    info: list[Built] = []
    _, inputs = build("muse_glimmer_vision", device="meta", info=info)
    assert "(pixel_values as [32, 384])" in info[0].layout and inputs["pixel_values"].shape == (32, 384)


@needs_hf
def test_a_qualified_hidden_size_follows_the_config_whose_width_it_is() -> None:
    """BLT's local encoder and decoder read ``hidden_size_global``, the global transformer's width:
    it shrinks with that config's ``hidden_size`` (its patch projection was 2048 wide otherwise)."""
    from unitcheck.hf import make_config

    cfg = make_config("blt")
    assert cfg.encoder_config.hidden_size_global == cfg.decoder_config.hidden_size_global == cfg.global_config.hidden_size


@needs_hf
def test_an_image_attention_mask_has_one_column_per_image() -> None:
    """IDEFICS takes several images per example, ``(batch, images, C, H, W)``, and reads the
    number of images from its ``image_attention_mask`` (batch, text length, images)."""
    from unitcheck.hf import Built, build

    info: list[Built] = []
    _, inputs = build("idefics", device="meta", info=info)
    assert info[0].probed, info[0].tried[:2]
    images = inputs["pixel_values"].shape[1]
    assert inputs["image_attention_mask"].shape == (2, inputs["input_ids"].shape[1], images)


@needs_hf
def test_patch_rows_come_with_their_grid_positions_where_the_forward_requires_them() -> None:
    """Gemma 4's vision tower projects patch rows and looks up each patch's (x, y) position."""
    from unitcheck.hf import Built, build

    info: list[Built] = []
    _, inputs = build("gemma4_vision", device="meta", info=info)
    assert info[0].probed and info[0].layout == "patches+pixel_position_ids", info[0].tried[:2]
    rows, pos = inputs["pixel_values"], inputs["pixel_position_ids"]
    assert rows.dim() == 3 and pos.shape == (*rows.shape[:2], 2) and pos.dtype == torch.long


@needs_hf
def test_an_optional_argument_a_real_run_names_is_made_from_its_name() -> None:
    """UDOP's fake-tensor probe stops at a branch on values before it reads ``bbox``; its real run
    fails on the missing boxes, and names them."""
    from unitcheck.hf import Built, build

    info: list[Built] = []
    _, inputs = build("udop", device="meta", info=info)
    assert "bbox" in inputs and info[0].layout.endswith("+bbox"), (info[0].layout, info[0].tried[:2])


@needs_hf
def test_a_run_length_layer_pattern_shrinks_with_the_stack() -> None:
    """GPT-Neo declares its layers as ``[[["global", "local"], 12]]`` and checks the expansion
    against ``num_layers``: the pattern shrinks with the stack, or the small build is refused."""
    from unitcheck import hf

    info: list[hf.Built] = []
    model, _ = hf.build("gpt_neo", device="meta", info=info)
    assert info[0].plan == "small", info[0].tried
    cfg = model.config
    assert len(cfg.attention_layers) == cfg.num_layers <= 4
    assert set(cfg.attention_layers) == {"global", "local"}


@needs_hf
def test_a_config_that_refuses_global_per_layer_reads_still_builds() -> None:
    """Gemma 4's heterogeneous config raises (not AttributeError) when ``head_dim`` is read
    globally; completing the config must step around it, not fail the build."""
    from unitcheck import hf

    info: list[hf.Built] = []
    hf.build("gemma4_text", device="meta", info=info)
    assert info[0].plan == "small"


@needs_hf
def test_image_sizes_shrink_together_for_an_oracle_that_cannot_hold_the_default() -> None:
    """SAM sets its image size in two sub-configs; both come down, and the model built with
    them takes the smaller image."""
    from unitcheck import hf

    full = hf.make_config("sam", {}, hf.PLANS[-1])  # (the small plan's images are 64x64 already)
    sets = hf.image_size_overrides(full, 256)
    assert sets == {"vision_config.image_size": 256, "prompt_encoder_config.image_size": 256}
    _, inputs = hf.build("sam", sets, device="meta")
    assert tuple(inputs["pixel_values"].shape[-2:]) == (256, 256)
    assert hf.image_size_overrides(full, 4096) == {}


@needs_hf
def test_set_reaches_a_sub_config_the_plan_left_alone() -> None:
    """SAM 2's backbone config is nested two deep, and the default plan leaves it alone: ``--set``
    fills it from its own values, then overrides the field; what follows the image size (the
    neck's feature maps, the prompt grid) follows the size ``--set`` gives."""
    from unitcheck import hf

    full = hf.make_config("sam2", {}, hf.PLANS[-1])
    sets = hf.image_size_overrides(full, 256)
    assert "vision_config.backbone_config.image_size" in sets
    cfg = hf.make_config("sam2", sets, hf.PLANS[-1])
    assert cfg.vision_config.backbone_config.image_size == [256, 256]
    assert cfg.vision_config.backbone_feature_sizes == [[64, 64], [32, 32], [16, 16]]
    _, inputs = hf.build("sam2", hf.image_size_overrides(full, 32), device="meta")
    assert tuple(inputs["pixel_values"].shape[-2:]) == (32, 32)


@needs_hf
def test_a_per_layer_token_table_shrinks_with_the_vocabulary() -> None:
    """Gemma 4's ``vocab_size_per_layer_input`` (262144 rows of per-layer embeddings) shrinks like
    ``vocab_size``: a small build holds a few million parameters, not 270 million."""
    from unitcheck import hf

    model, _ = hf.build("gemma4_text", device="meta")
    assert model.config.vocab_size_per_layer_input <= model.config.vocab_size
    assert sum(p.numel() for p in model.parameters()) < 20_000_000


@needs_hf
def test_a_model_too_large_for_the_cpu_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Instantiating weights the machine cannot hold gets the process killed: refuse first."""
    from unitcheck import hf

    monkeypatch.setattr(hf, "cpu_memory", lambda: 2**16)  # 64 KiB
    with pytest.raises(hf.HFError, match="parameters take"):
        hf.build("gpt2", device="cpu")
    hf.build("gpt2", device="meta")  # static lint never allocates


@needs_hf
def test_a_short_stage_pyramid_keeps_its_lists_as_long_as_its_stage_count() -> None:
    """MuseSpark's audio tower validates one ``patch_sizes``/``hidden_sizes``/``depths`` entry per
    stage (4 stages). Lists that short were not read as per-layer, so every shrunk plan cut the
    stage count to 2 against four-entry lists, the validator rejected each, and the whole model was
    built at its default size (822 billion parameters): nothing could run it on the CPU. A
    rejected config is shrunk again with short lists read as per-layer; its waveform is a whole
    number of tokens (1920 samples each), which the tower checks."""
    from unitcheck.hf import Built, build, make_config

    audio = make_config("muse_spark").audio_config
    assert len(audio.patch_sizes) == len(audio.hidden_sizes) == len(audio.depths) == audio.num_hidden_layers
    info: list[Built] = []
    model, inputs = build("muse_spark_audio", device="meta", info=info)
    assert info[0].plan == "small" and info[0].probed
    assert inputs["input_values"].shape[-1] % model.config.samples_per_token == 0
    big, _ = build("muse_spark", device="meta")
    assert sum(p.numel() for p in big.parameters()) < 200_000_000


@needs_hf
def test_inkling_builds_small_with_its_patches_channels_last() -> None:
    """Inkling imports scipy when it plans its vision tower (now in the ``hf`` extra); without it
    every shrunk plan failed and the model was built at its default size (1.7 trillion
    parameters). Its tower folds ``(patches, T, H, W, C)``: a channels-last layout of frames."""
    from unitcheck.hf import Built, build

    info: list[Built] = []
    model, inputs = build("inkling_vision", device="meta", info=info)
    assert info[0].plan == "small" and info[0].probed and info[0].layout.endswith("(frames, channels last)")
    assert inputs["pixel_values"].shape[-1] == model.config.num_channels
    big, _ = build("inkling_mm_model", device="meta")
    assert sum(p.numel() for p in big.parameters()) < 200_000_000


@needs_hf
def test_a_last_stage_as_wide_as_another_config_follows_its_width() -> None:
    """Unlimited-OCR feeds SAM's last neck stage (``downsample_channels[-1]``, 1024) to its CLIP
    encoder as patch embeddings, which it concatenates with a class embedding of the encoder's
    width (1024). Scaled by SAM's own ratio the stage became 88 wide against an encoder of 64, every
    shrunk plan failed, and the unshrunk widths' comparison needed 18 GiB."""
    from unitcheck.hf import Built, build, make_config

    cfg = make_config("unlimited_ocr_vision")
    assert cfg.sam_config.downsample_channels[-1] == cfg.encoder_config.hidden_size < 1024
    info: list[Built] = []
    build("unlimited_ocr_vision", device="meta", info=info)
    assert info[0].plan == "small" and info[0].probed


@needs_hf
def test_a_waveform_asked_for_as_latent_channels_becomes_a_short_latent_sequence() -> None:
    """VibeVoice's acoustic decoder reads (batch, 64, frames) latents; the waveform layout, asked
    for 64 channels by its first conv, kept its 3200 samples as frames, which the decoder turns
    into 10 million samples each (the comparison needed 1.9 TiB). The latent is 16 frames."""
    from unitcheck.hf import build

    _, inputs = build("vibevoice_acoustic_tokenizer_decoder", device="meta")
    assert tuple(inputs["hidden_states"].shape[1:]) == (64, 16)


@needs_hf
def test_a_vanishing_initializer_range_is_a_trainable_one() -> None:
    """SAM-style towers declare ``initializer_range=1e-10``. Random weights that small put the
    tower's share of the loss near 1e-15, which the oracle cannot tell from zero: Unlimited-OCR's
    fingerprint measured the SAM neck's scaling as a gauge (3e-15) where the engine rightly
    predicts none (78/78 at 0.02, ``test_units_verify_passes_at_hf_default_sizes``)."""
    from unitcheck.hf import make_config

    assert make_config("sam").vision_config.initializer_range == 0.02
    assert make_config("unlimited_ocr").vision_config.sam_config.initializer_range == 0.02
    assert make_config("llama").initializer_range == 0.02  # an ordinary value stays as declared


@needs_hf
def test_a_conv_codec_that_doubles_its_channels_each_stage_is_built_narrow() -> None:
    """VibeVoice's acoustic and semantic towers double 32 filters at each of six stages to 2048
    channels: 393M parameters at the small plan, too large for a zeroed copy to count its audio
    features, so its text had no audio tokens (the model refuses that on real values) and its
    comparisons needed 13-23 GiB. Its audio features are counted with the ``padding_mask`` the
    tower asks for."""
    from unitcheck.hf import Built, build, make_config

    cfg = make_config("vibevoice")
    assert cfg.audio_config.num_filters * 2 ** len(cfg.audio_config.downsampling_ratios) <= 256
    assert make_config("encodec").num_filters == 32  # 32 x 2^4 = 512 channels: left as declared
    info: list[Built] = []
    model, inputs = build("vibevoice", device="meta", info=info)
    assert sum(p.numel() for p in model.parameters()) < 20_000_000
    assert info[0].layout == "input_ids+audio (audio tokens)" and info[0].probed
    assert int((inputs["input_ids"] == model.config.audio_token_id).sum()) > 0


@needs_hf
def test_a_stage_fed_embeddings_only_gets_inputs_embeds() -> None:
    """Qwen3-Omni's talker code predictor refuses ``input_ids`` ("expected to be None"): it runs
    on the embeddings the talker hands it. A model whose ids are refused by name is tried with
    ``inputs_embeds`` as wide as its hidden size; one whose ids fail otherwise keeps them (FSMT's
    probe stops at a branch on values, and the ids reach its embedding table)."""
    from unitcheck.hf import Built, build

    info: list[Built] = []
    model, inputs = build("qwen3_omni_moe_talker_code_predictor", device="meta", info=info)
    assert info[0].layout == "inputs_embeds" and info[0].probed
    assert "input_ids" not in inputs and inputs["inputs_embeds"].shape[-1] == model.config.hidden_size
    info.clear()
    build("fsmt", device="meta", info=info)
    assert info[0].layout == "input_ids"


@needs_hf
def test_a_type_with_task_heads_only_is_built_from_them() -> None:
    """ZoeDepth, ViTPose, UperNet, SuperPoint and the backbones have no base model and no head in
    the mappings the builder read first (26 types in the zoo were "no model class"): any
    ``MODEL_FOR_*`` mapping that names the type gives its head."""
    from unitcheck.hf import Built, build, head_classes

    assert head_classes("zoedepth")[0][:2] == ("depth_estimation", "ZoeDepthForDepthEstimation")
    assert head_classes("rt_detr_resnet")[0][:2] == ("backbone", "RTDetrResNetBackbone")
    info: list[Built] = []
    build("vitpose", device="meta", info=info)
    assert info[0].head == "VitPoseForPoseEstimation" and info[0].probed


@needs_hf
def test_a_tuple_default_the_model_extends_as_a_list_is_repaired() -> None:
    """ViTMatte declares ``fusion_hidden_sizes`` as a tuple and its model computes
    ``[config.hidden_size] + config.fusion_hidden_sizes``: its own default cannot be built. The
    fields the failing line reads become lists."""
    from unitcheck.hf import Built, build

    info: list[Built] = []
    model, _ = build("vitmatte", device="meta", info=info)
    assert "fusion_hidden_sizes (as a list)" in info[0].plan and info[0].probed
    assert isinstance(model.config.fusion_hidden_sizes, list)


@needs_hf
def test_keypoint_matchers_are_built_with_few_points_and_iterations() -> None:
    """SuperGlue keeps every point over a threshold of random scores (``max_keypoints=-1``) and
    unrolls 100 Sinkhorn iterations into its graph: its capture was killed for memory. A small
    build keeps 64 points and 10 iterations."""
    from unitcheck.hf import make_config

    cfg = make_config("superglue")
    assert cfg.sinkhorn_iterations == 10 and cfg.keypoint_detector_config.max_keypoints == 64
    assert make_config("superpoint").max_keypoints == 64


@needs_hf
def test_a_model_without_forward_that_encodes_is_checked_through_its_encode() -> None:
    """Emu3's, Chameleon's and GLM-Image's VQ-VAEs define ``encode`` and ``decode`` but no
    ``forward``: every probe failed ("unsupported operator" or "unexpected keyword argument") and
    the four such types in the zoo did not trace. Their forward is now their ``encode``, under the
    model's own class name and parameter names."""
    from unitcheck.hf import Built, build

    info: list[Built] = []
    model, inputs = build("chameleon_vqgan", device="meta", info=info)
    assert type(model).__name__ == "ChameleonVQVAE" and info[0].probed
    assert type(model).forward is type(model).encode and "pixel_values" in inputs
    assert all(not k.startswith("model.") for k, _ in model.named_parameters())


@needs_hf
def test_image_sizes_are_each_images_height_and_width() -> None:
    """Emu3's VQ-VAE crops each image to ``int(size[0] / factor)``: ``image_sizes`` made from
    its name as features (2, 16, 1024) failed there; it is one (height, width) row per image."""
    from unitcheck.hf import build

    _, inputs = build("emu3_vqgan", device="meta")
    h, w = inputs["pixel_values"].shape[-2:]
    assert inputs["image_sizes"].tolist() == [[h, w]] * inputs["pixel_values"].shape[0]


def test_a_sequence_a_conv_reads_as_one_unbatched_image_becomes_feature_maps() -> None:
    """A (batch, sequence, width) input given to a 2-D conv is read as one unbatched image
    (``expected input[1, 2, 16, 64] to have 48 channels``): GLM-Image's VQ-VAE encodes (batch,
    48, h, w) latents."""
    from unitcheck.hf.shapes import _reshaped

    inputs = {"hidden_states": torch.zeros(2, 16, 64)}
    why = ("Given groups=1, weight of size [64, 48, 1, 1], expected input[1, 2, 16, 64] to have 48 channels, "
           "but got 2 channels instead")
    assert _reshaped(why, inputs) == [("hidden_states", (2, 48, 16, 64))]
    assert _reshaped(why.replace("[1, 2, 16, 64]", "[1, 2, 16, 60]"), inputs) == []  # another tensor's


@needs_hf
def test_a_wrappers_main_input_holds_what_its_encoder_takes() -> None:
    """A speech encoder-decoder calls its waveform ``inputs``, a name that says nothing: made
    from its name as (batch, sequence, width) features, wav2vec2's feature encoder refused it and
    the type did not trace. It is what the encoder takes, a waveform, under the wrapper's name."""
    from unitcheck.hf import Built, build

    info: list[Built] = []
    model, inputs = build("speech-encoder-decoder", device="meta", info=info)
    assert info[0].probed and info[0].layout == "input_values"
    assert model.encoder.main_input_name == "input_values" and inputs["inputs"].dim() == 2
    assert "input_values" not in inputs


def test_the_statement_of_a_branch_that_raised_is_its_test(tmp_path: Any) -> None:
    """wav2vec2's layer drop branches on a random draw in training, and Python places the error of
    deciding an ``if`` on the whole statement: its block's ``layer(h, attention_mask=...)`` read
    as asking for a mask gave the speech encoder-decoder a mask as long as text for its waveform.
    The statement is the test; an assignment keeps all its lines."""
    import importlib.util

    from unitcheck.hf.inputs import _asked_for
    from unitcheck.hf.runs import _model_line

    code = tmp_path / "transformers" / "layers.py"
    code.parent.mkdir()
    code.write_text(
        "def encode(layers, hidden, drop, attention_mask=None):\n"
        "    for layer in layers:\n"
        "        if not drop or False:  # a header's comment\n"
        "            hidden = layer(hidden, attention_mask=attention_mask)\n"
        "    return hidden\n\n\n"
        "def pool(image_sizes=None):\n"
        "    patches = [\n"
        "        size * 2\n"
        "        for size in image_sizes\n"
        "    ]\n"
        "    return patches\n")
    spec = importlib.util.spec_from_file_location("unitcheck_test_layers", code)
    assert spec is not None and spec.loader is not None
    layers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layers)

    class Undecided:  # a symbolic bool: torch raises deciding it, outside the model's code
        def __bool__(self) -> bool:
            raise RuntimeError("Could not guard on data-dependent expression")

    with pytest.raises(RuntimeError) as branch:
        layers.encode([lambda h, attention_mask: h], 0, Undecided())
    assert _model_line(branch.value) == "if not drop or False:  # a header's comment"
    with pytest.raises(TypeError) as none:
        layers.pool()
    assert _model_line(none.value) == "patches = [ size * 2 for size in image_sizes ]"

    class Encoder(nn.Module):
        def forward(self, input_values: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
            return input_values

    why = f"GuardOnDataDependentSymNode: guard [at: {_model_line(branch.value)}]"
    assert _asked_for(Encoder(), {"input_values": torch.zeros(2, 3200)}, why) == []


def test_a_sub_config_field_its_parent_requires_equal_takes_the_parents_value() -> None:
    """Nemotron-H Omni's config requires ``vision_config.video_temporal_patch_size`` to equal its
    own; the shrink left the vision config's field (declared None) for its class to derive, which
    it does not, so the small plan was rejected and the type was built at 2.7 billion parameters.
    The sub-config takes the parent's value; any other rejection is raised as before."""
    from unitcheck import hf

    class Parent:
        def __init__(self, vision_config: dict[str, Any], video_temporal_patch_size: int = 2) -> None:
            if vision_config.get("video_temporal_patch_size") != video_temporal_patch_size:
                raise ValueError(f"`vision_config.video_temporal_patch_size` "
                                 f"({vision_config.get('video_temporal_patch_size')}) and "
                                 f"`video_temporal_patch_size` ({video_temporal_patch_size}) must be equal.")
            self.vision_config = vision_config

    kwargs: dict[str, Any] = {"vision_config": {"video_temporal_patch_size": None, "hidden_size": 32}}
    cfg = hf.config._constructed(Parent, kwargs, SimpleNamespace(video_temporal_patch_size=2))
    assert cfg.vision_config == {"video_temporal_patch_size": 2, "hidden_size": 32}
    clash = {"vision_config": {"video_temporal_patch_size": 3}}  # a value of its own: not the shrink's
    with pytest.raises(ValueError, match="must be equal"):
        hf.config._constructed(Parent, clash, SimpleNamespace(video_temporal_patch_size=2))


@needs_hf
def test_a_window_in_pixels_keeps_its_merged_patches() -> None:
    """Ovis 2.5's vision window is 112 pixels over 16-pixel patches merged 2 x 2 (three merged
    patches a side); the shrink gave it 2, which is no merged patch at all, and the window index
    divided by zero. It keeps three merged patches of the shrunk patch; Swin's window, counted in
    patches, still shrinks to 2."""
    from unitcheck.hf import CONFIG_MAPPING_CLS, make_config

    vc = make_config("ovis2_5_vision")
    base = CONFIG_MAPPING_CLS("ovis2_5_vision")()
    per_side = base.window_size // base.spatial_merge_size // base.patch_size
    assert vc.patch_size < base.patch_size and vc.window_size // vc.spatial_merge_size // vc.patch_size == per_side
    assert make_config("swin").window_size == 2


def test_a_count_its_validator_bounds_from_one_takes_the_lowest_value() -> None:
    """Kolibri 1.1's config requires ``index_num_heads`` to be between 1 and the query heads of a
    key head, which the shrink made fewer (12 against 2): every small plan was rejected and the
    type was built at 9.4 billion parameters. The count takes 1; a field that is already 1, or a
    rejection of another kind, is raised as before."""
    from unitcheck import hf

    class Config:
        def __init__(self, num_attention_heads: int = 4, index_num_heads: int = 12) -> None:
            if not 0 < index_num_heads <= num_attention_heads // 2:
                raise ValueError("`index_num_heads` must be between 1 and the number of query heads of key head 0.")
            if num_attention_heads > 64:
                raise ValueError("too many heads")
            self.index_num_heads = index_num_heads

    kwargs: dict[str, Any] = {"num_attention_heads": 4}
    assert hf.config._constructed(Config, kwargs, SimpleNamespace(index_num_heads=12)).index_num_heads == 1
    with pytest.raises(ValueError, match="must be between 1"):  # 1 already: nothing lower to try
        hf.config._constructed(Config, {"num_attention_heads": 1, "index_num_heads": 1}, SimpleNamespace())
    with pytest.raises(ValueError, match="too many heads"):
        hf.config._constructed(Config, {"num_attention_heads": 128}, SimpleNamespace(index_num_heads=12))


@needs_hf
@pytest.mark.parametrize("model_type", ["zoedepth", "paligemma", "vision-encoder-decoder", "sam3", "chmv2", "mistral3"])
def test_a_sub_config_keeps_the_flags_and_names_its_parent_set(model_type: str) -> None:
    """A shrunk sub-config is rebuilt from its changed fields, so what its parent's default set
    otherwise (ZoeDepth's backbone returns hidden states unreshaped, PaliGemma's vision tower has
    no head, a decoder is a decoder, CHMv2's backbone returns its class tokens, Mistral 3's text
    model has its own norm epsilon) fell back to the sub-config class's own default."""
    from transformers import CONFIG_MAPPING

    from unitcheck.hf import make_config
    from unitcheck.hf.common import _paths, _subconfigs

    def flags(cfg: Any) -> dict[tuple[str, ...], dict[str, Any]]:
        return {path: {k: v for k, v in vars(c).items() if isinstance(v, (bool, str, float)) and k != "transformers_version"
                       and k not in _subconfigs(c)} for path, c in _paths(cfg) if path}

    default, shrunk = flags(CONFIG_MAPPING[model_type]()), flags(make_config(model_type))
    assert default and default.keys() == shrunk.keys()
    changed = {(path, k): (v, shrunk[path].get(k)) for path, fields in default.items() for k, v in fields.items()
               if shrunk[path].get(k) != v and k not in ("_attn_implementation_internal", "use_cache")}
    assert changed == {}


@needs_hf
@pytest.mark.slow
def test_a_vision_merger_as_wide_as_the_text_model_traces() -> None:
    """GLM-5-Next's default config merges image patches to 1536 features for a 4096-wide text
    model, so the model refused every image; and its vision attention splits windows of length 0."""
    from unitcheck import hf
    from unitcheck.tracer import trace

    cfg = hf.make_config("glm5_next")
    assert cfg.vision_config.out_hidden_size == cfg.text_config.hidden_size
    g = trace(*hf.build("glm5_next", device="meta"))
    assert g.method == "export" and len(g.compute_nodes()) > 1000


@needs_hf
def test_an_audio_model_gets_the_bins_its_feature_extractor_makes() -> None:
    """Gemma 4's audio config names no mel-bin count, and its input projection is sized for the
    128 bins its feature extractor makes: the builder's default of 80 did not fit."""
    from unitcheck import hf
    from unitcheck.tracer import trace

    assert hf.inputs._extractor_features("gemma4_audio") == 128  # found through the family's extractor
    assert hf.inputs._extractor_features("wav2vec2") is None  # a waveform's extractor has one feature
    model, inputs = hf.build("gemma4_audio", device="meta")
    assert inputs["input_features"].shape[-1] == 128
    assert trace(model, inputs).method == "export"
    # an input made from its name (Gemma 3n's audio_mel) gets the config's bins, not the model's width
    model, inputs = hf.build("gemma3n_audio", device="meta")
    assert inputs["audio_mel"].shape[-1] == model.config.input_feat_size != model.config.hidden_size
    assert trace(model, inputs).method == "export"


@needs_hf
def test_a_sub_config_keeps_its_shrunk_sizes_over_a_preset_its_parent_named() -> None:
    """HGNetV2's ``arch`` picks a preset's stage sizes: carried from PP-DocLayout-V2's default,
    it replaced the shrunk stages with the large preset's."""
    from unitcheck.hf import make_config

    backbone = make_config("pp_doclayout_v2").backbone_config
    assert getattr(backbone, "arch", None) is None and max(backbone.hidden_sizes) <= 256


@needs_hf
def test_a_width_one_config_reads_from_another_follows_its_shrink() -> None:
    """PP-DocLayout-V3's mask branch reads the backbone's first stage: x4_feat_dim and the
    stage's channels are both 128 by default, but they shrank by different ratios (to 32 and 8)."""
    from unitcheck import hf

    model, inputs = hf.build("pp_doclayout_v3", device="cpu")
    assert model.config.x4_feat_dim == model.config.backbone_config.stage_out_channels[0]
    with torch.no_grad():
        model.eval()(**inputs)


@needs_hf
def test_a_detector_gets_the_per_class_settings_its_forward_reads() -> None:
    """PP-DocLayout-V2's forward reads a threshold and a reading-order rank per class, which its
    default config leaves unset: every example failed in the model itself."""
    from unitcheck import hf

    model, inputs = hf.build("pp_doclayout_v2", device="cpu")
    assert len(model.config.class_thresholds) == len(model.config.class_order) == model.config.num_labels
    with torch.no_grad():
        model.eval()(**inputs)


@needs_hf
def test_an_argument_annotated_as_an_integer_tensor_gets_integers() -> None:
    """JEV's required ``marks`` (1-based rows) and ``num_options`` (counts) were float features,
    which its indexing refused; its ``question_type_ids`` were token ids, past its three types."""
    from torch import nn

    from unitcheck import hf

    class Picks(nn.Module):
        def forward(self, input_ids: torch.LongTensor, marks: torch.LongTensor | None,
                    scale: torch.FloatTensor, counts: torch.IntTensor) -> None:
            return None

    forms = hf.inputs._declared(Picks()).forms
    assert {name for name, form in forms.items() if form == "integers"} == {"input_ids", "marks", "counts"}
    _, inputs = hf.build("jev", device="meta")
    for name in ("marks", "num_options"):
        assert inputs[name].dtype == torch.long and int(inputs[name].min()) >= 1, name
    # a type index selects from a small table (JEV's three question types), as token_type_ids do
    assert inputs["question_type_ids"].dtype == torch.long and not inputs["question_type_ids"].any()


@needs_hf
@pytest.mark.parametrize("model_type", ["sam3_detr_encoder", "sam3_detr_decoder", "sam3_mask_decoder"])
def test_a_part_that_takes_feature_maps_gets_them_and_traces(model_type: str) -> None:
    """SAM 3's DETR encoder and mask decoder take ``list[torch.Tensor]`` levels of (batch, width,
    H, W) maps, and its parts inherit ``pixel_values`` as their main input though they take
    features: each was given an image, or a tensor where a list was due, and failed to trace."""
    from unitcheck import hf
    from unitcheck.tracer import trace

    class Levels(nn.Module):
        def forward(self, maps: list[torch.Tensor], more: tuple[torch.FloatTensor, ...] | None,
                    pair: tuple[torch.Tensor, torch.Tensor], x: torch.Tensor, n: int, k: int | None,
                    ids: list[torch.LongTensor] | None, old: typing.Optional[int],  # noqa: UP045
                    older: typing.Optional[list[torch.Tensor]]) -> None:  # noqa: UP045
            return None

    assert hf.inputs._declared(Levels()).forms == {"maps": "maps", "more": "maps", "n": "count", "k": "count",
                                                   "ids": "maps", "old": "count", "older": "maps"}
    (level,) = hf.inputs._feature_maps(torch.arange(2 * 17 * 3.0).reshape(2, 17, 3))
    assert level.shape == (2, 3, 4, 4) and level[1, 2, 0, 1] == 17 * 3 + 1 * 3 + 2  # position 1's feature 2
    info: list[Any] = []
    model, inputs = hf.build(model_type, device="meta", info=info)
    listed = {name for name, form in hf.inputs._declared(model).forms.items() if form == "maps"}
    assert listed or model_type == "sam3_detr_decoder"
    for name in listed & set(inputs):
        assert isinstance(inputs[name], list) and all(m.dim() == 4 for m in inputs[name]), name
    assert not any(isinstance(v, torch.Tensor) and v.dim() == 4 and v.shape[1] == 3 for v in inputs.values())
    assert info[0].probed
    traced = trace(model, inputs)
    assert sum(n.op == "placeholder" for n in traced.graph.nodes) >= 2


@needs_hf
def test_a_count_the_statement_reads_under_a_helpers_name_is_asked_for_as_an_int() -> None:
    """BLT's local encoder reads ``num_patches`` as ``patch_reduce``'s ``max_num_patches``
    (``torch.zeros((batch, max_num_patches, width))``) and fails on None; an int argument was made
    as a float tensor. Given both, and then the ``patch_ids`` it asks for, it builds and traces."""
    from unitcheck import hf
    from unitcheck.tracer import trace

    class Reads(nn.Module):
        def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None,
                    pixel_attention_mask: torch.Tensor | None = None, num_patches: int | None = None) -> None:
            return None

    why = "TypeError: zeros(): ... but got NoneType [at: out = torch.zeros((b, max_num_patches, d))]"
    assert hf.inputs._asked_for(Reads(), {"x": 1}, why) == ["num_patches"]
    # a longer name that is an argument itself asks for that argument, not the one it ends with
    why = "TypeError: 'NoneType' object is not subscriptable [at: m = pixel_attention_mask[:, 0]]"
    assert hf.inputs._asked_for(Reads(), {"x": 1}, why) == ["pixel_attention_mask"]
    # an attribute is not a name the statement reads, nor is a message without a statement one
    why = "TypeError: 'NoneType' object is not subscriptable [at: m = self.cached_num_patches[:, 0]]"
    assert "num_patches" not in hf.inputs._asked_for(Reads(), {"x": 1}, why)
    assert "num_patches" not in hf.inputs._asked_for(Reads(), {"x": 1}, "TypeError: 'NoneType' max_num_patches")
    info: list[Any] = []
    model, inputs = hf.build("blt_local_encoder", device="meta", info=info)
    assert info[0].probed and {"num_patches", "patch_ids"} <= set(inputs)
    assert type(inputs["num_patches"]) is int and inputs["num_patches"] >= 1
    assert inputs["patch_ids"].dtype == torch.long
    trace(model, inputs)


@needs_hf
def test_a_shape_the_docstring_gives_in_config_fields_sizes_the_argument_asked_for() -> None:
    """RAG without a retriever needs the retrieved documents, ``(batch_size * config.n_docs,
    config.max_combined_length)``, and their scores, ``(batch_size, config.n_docs)``: made from
    their names as (batch, length), its attention saw 2 queries against 4 keys' batch."""
    from unitcheck import hf
    from unitcheck.tracer import trace

    class Retrieved(nn.Module):
        def forward(self, context_ids: torch.Tensor, scores: torch.Tensor, context_mask: torch.LongTensor) -> None:
            """
            Args:
                context_ids (`torch.LongTensor` of shape `(batch_size * config.n_docs, config.max_length)`):
                    documents.
                scores (`torch.Tensor` of shape `(batch_size, config.n_docs, 3)`):
                    their scores.
                context_mask (`torch.LongTensor` of shape `(batch_size * config.n_docs, config.max_length)`):
                    their mask.
            """

    declared = hf.inputs._declared(Retrieved())
    assert declared.shapes == {"context_ids": "batch_size * config.n_docs, config.max_length",
                               "scores": "batch_size, config.n_docs, 3",
                               "context_mask": "batch_size * config.n_docs, config.max_length"}
    cfg = SimpleNamespace(n_docs=3, max_length=300, vocab_size=7)
    made = hf.inputs._named_inputs(["context_ids", "scores", "context_mask"], cfg,
                                   {"input_ids": torch.zeros(2, 10, dtype=torch.long)}, 2, 16, 0, declared)
    assert made["context_mask"].shape == (6, 10) and set(made["context_mask"].unique().tolist()) <= {0, 1}
    assert hf.inputs._documented_size("batch_size,", cfg, {}, 2, 16, 8) == (2,)
    assert made["context_ids"].shape == (6, 10) and made["context_ids"].dtype == torch.long  # a length: capped
    assert int(made["context_ids"].max()) < 7 and made["scores"].shape == (2, 3, 3)
    info: list[Any] = []
    model, inputs = hf.build("rag", device="meta", info=info)
    docs = int(model.config.n_docs)
    assert info[0].probed and inputs["doc_scores"].shape == (2, docs)
    assert inputs["context_input_ids"].shape[0] == inputs["context_attention_mask"].shape[0] == 2 * docs
    assert set(inputs["context_attention_mask"].unique().tolist()) <= {0, 1}
    trace(model, inputs)


@needs_hf
def test_features_take_the_rank_their_docstring_gives() -> None:
    """UnlimitedOCR's vision encoder takes ``(batch_size, hidden_size, grid_height, grid_width)``
    patch embeddings; made as a sequence of vectors (as wide as its patch size, by the name's
    prefix) it failed to unpack four sizes. DeepSeek-OCR 2's encoder requires ``num_patches: int``,
    which was a float tensor."""
    from unitcheck import hf
    from unitcheck.tracer import trace

    class Patches(nn.Module):
        def forward(self, patch_embeds: torch.Tensor, states: torch.Tensor) -> None:
            """
            Args:
                patch_embeds (`torch.Tensor` of shape `(batch_size, hidden_size, grid_height, grid_width)`):
                    patches.
                states (`torch.Tensor` of shape `(batch_size, sequence_length, hidden_size)`):
                    a sequence.
            """

    cfg = SimpleNamespace(hidden_size=12, patch_size=4, image_size=16)
    made = hf.inputs._named_inputs(["patch_embeds", "states"], cfg, {}, 2, 5, 0, hf.inputs._declared(Patches()))
    assert made["patch_embeds"].shape == (2, 12, 4, 4) and made["states"].shape == (2, 5, 12)
    model, inputs = hf.build("unlimited_ocr_vision_encoder", device="meta")
    embeds = inputs["patch_embeds"]
    assert embeds.dim() == 4 and embeds.shape[1] == model.config.hidden_size
    trace(model, inputs)
    model, inputs = hf.build("deepseek_ocr2_encoder", device="meta")
    assert type(inputs["num_patches"]) is int
    trace(model, inputs)


@needs_hf
def test_patch_rows_take_the_axes_their_docstring_gives() -> None:
    """Inkling 2's vision tower takes each merged token's patches as (tokens, patch_size *
    spatial_merge_size, patch_size * spatial_merge_size, num_channels), channels last, not
    Qwen-style rows of channels x patch x patch values, which its reshape refused."""
    from unitcheck import hf
    from unitcheck.tracer import trace

    cfg = SimpleNamespace(patch_size=4, spatial_merge_size=2, num_channels=3)
    assert hf.inputs._documented_size("patch_size * spatial_merge_size, 7, num_channels", cfg, {}, 2, 5, 8) == (8, 7, 3)
    assert hf.inputs._documented_size("patch_size, num_frames", cfg, {}, 2, 5, 8) is None  # an axis it cannot size
    model, inputs = hf.build("inkling2_vision", device="meta")
    vision = model.config
    side = int(vision.patch_size) * int(vision.spatial_merge_size)
    assert inputs["pixel_values"].shape[1:] == (side, side, int(vision.num_channels))
    assert inputs["pixel_values"].shape[0] == int(inputs["image_grid_thw"].prod(dim=1).sum())
    trace(model, inputs)
    # transformers' generic text for an image, (batch_size, num_channels, image_size, image_size),
    # says nothing of patch rows: MiniMax-M3-VL's tower keeps its rows of c x p x p values
    model, inputs = hf.build("minimax_m3_vl_vision", device="meta")
    assert inputs["pixel_values"].dim() == 2


@needs_hf
def test_a_model_without_an_image_token_gets_the_mask_of_its_image_positions() -> None:
    """Kosmos-2 has no image token: ``image_embeds_position_mask`` marks the text positions its
    ``latent_query_num`` image features replace. Without it the model read None and failed."""
    from unitcheck import hf
    from unitcheck.tracer import trace

    info: list[Any] = []
    model, inputs = hf.build("kosmos-2", device="meta", info=info)
    marked = inputs["image_embeds_position_mask"]
    assert info[0].probed and marked.shape == inputs["input_ids"].shape
    queries = int(model.config.latent_query_num)
    assert marked.sum(dim=1).tolist() == [queries] * marked.shape[0]
    assert not marked[:, 0].any() and marked[:, 1:1 + queries].all()  # adjacent, after the first token
    trace(model, inputs)


@needs_hf
def test_a_vision_tower_that_projects_into_the_text_width_keeps_its_heads_wide() -> None:
    """Qwen2-VL's vision config names the text width it merges into ``hidden_size`` (3584) and its
    own width ``embed_dim`` (1280, 16 heads). Scaled by the text width's ratio, the tower kept 24
    (6 per head, fewer than its rotary embedding's pairs), its forward failed, and the model was
    built on its text alone."""
    from unitcheck.hf import make_config

    cfg = make_config("qwen2_vl")
    vision = cfg.vision_config
    assert vision.embed_dim // vision.num_heads >= 16
    assert vision.hidden_size == cfg.text_config.hidden_size  # the merger still meets the text model


@needs_hf
def test_a_layout_a_real_run_passed_is_kept_over_one_that_drops_its_image() -> None:
    """Where fake tensors cannot count the image tokens a model checks, a real run decides the
    image layout; a later layout that passes the fake probe without the image (the text alone)
    used to win, and HyperCLOVAX Vision's tower was never traced."""
    from unitcheck.hf import Built, build

    info: list[Built] = []
    _, inputs = build("hyperclovax_vision_v2", device="meta", info=info)
    assert "pixel_values" in inputs and "image_grid_thw" in inputs
    assert "pixel_values" in info[0].layout and not info[0].probed


@needs_hf
def test_a_tower_merger_projects_to_the_text_models_width() -> None:
    """Qwen3-VL's default merges image features to 3584 for a 4096-wide text model; each shrunk by
    its own config's ratio, the model refused every image ("tokens: 8, features: 8")."""
    from unitcheck.hf import make_config

    for model_type in ("qwen3_vl", "glm5_next"):
        cfg = make_config(model_type)
        assert cfg.vision_config.out_hidden_size == cfg.text_config.hidden_size


@needs_hf
def test_an_image_layout_gets_token_types_and_the_rotary_repair_its_real_run_asks_for() -> None:
    """Qwen2-VL asks for ``mm_token_type_ids`` with images (its message also names the video grid
    it does not need), then splits its text head by rotary sections written for the checkpoint's
    width: the image layout needs both, found on real values, and was lost to the text alone."""
    from unitcheck.hf import Built, build

    info: list[Built] = []
    model, inputs = build("qwen2_vl", device="meta", info=info)
    assert "pixel_values" in inputs and "video_grid_thw" not in inputs
    image = inputs["input_ids"] == model.config.image_token_id
    assert image.any() and torch.equal(inputs["mm_token_type_ids"], image.long())
    assert "mrope_section" in info[0].plan


@needs_hf
def test_image_tiles_follow_the_shrunk_tile_size() -> None:
    """LLaVA-NeXT lists its tilings in pixels of 336x336 tiles; with the tower shrunk to 64x64
    tiles and the list left alone, every image needed more tiles than any example held."""
    from unitcheck.hf import make_config

    for model_type in ("llava_next", "llava_onevision"):
        cfg = make_config(model_type)
        tile = cfg.vision_config.image_size
        assert tile < 336 and all(x % tile == 0 and x >= tile for pair in cfg.image_grid_pinpoints for x in pair)


@needs_hf
def test_a_tiled_image_model_gets_its_tiles_sizes_and_image_tokens() -> None:
    """LLaVA-NeXT names ``image_sizes`` two lines below the line that raised, wants as many tiles
    per example as its tiling of the image size gives (a split's message says how many), and
    counts its image features only in a forward: it was built and traced on text alone."""
    from unitcheck.hf import Built, build

    info: list[Built] = []
    model, inputs = build("llava_next", device="cpu", info=info)
    assert "image tokens" in info[0].layout, info[0].layout
    assert inputs["pixel_values"].dim() == 5 and inputs["image_sizes"].shape == (inputs["pixel_values"].shape[0], 2)
    assert (inputs["input_ids"] == model.config.image_token_id).sum() > 0
    with torch.no_grad():
        model(**inputs)  # the model's own check that tokens and features match


@needs_hf
def test_a_run_too_large_to_make_does_not_outrank_the_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real run skipped for size passed as if it had run: its layout won over one the probe
    passed (MUSE Glimmer's image in patch rows its tower refuses)."""
    from unitcheck import hf

    monkeypatch.setattr(hf, "_CHOICES", {})
    monkeypatch.setattr(hf.runs, "_REAL_RUN_PARAMETERS", 0)
    info: list[hf.Built] = []
    hf.build("hyperclovax_vision_v2", device="meta", info=info)
    assert info[0].probed, info[0].layout


@needs_hf
def test_image_tokens_per_image_pool_the_shrunk_patch_grid() -> None:
    """Gemma 3 pools its tower's patch grid to ``mm_tokens_per_image`` tokens, a square whose side
    must divide the grid's: its default (224-pixel tower, 14x14 patches, 256 tokens) and any
    shrink of it pooled with a window of 0 ("stride should not be zero"), so it built on text."""
    from unitcheck.hf import Built, build, make_config

    cfg = make_config("gemma3")
    side, grid = math.isqrt(cfg.mm_tokens_per_image), cfg.vision_config.image_size // cfg.vision_config.patch_size
    assert side * side == cfg.mm_tokens_per_image and grid % side == 0
    info: list[Built] = []
    model, inputs = build("gemma3", device="cpu", info=info)
    assert "image tokens" in info[0].layout and "pixel_values" in inputs
    with torch.no_grad():
        model(**inputs)


@needs_hf
def test_an_optional_patch_layout_comes_before_the_text_alone_with_its_image_tokens() -> None:
    """LFM2-VL takes patch rows with their ``spatial_shapes``: that layout came after the text
    alone, which always passed first, and held no image tokens, which the model checks."""
    from unitcheck.hf import Built, build

    info: list[Built] = []
    model, inputs = build("lfm2_vl", device="cpu", info=info)
    assert "spatial_shapes" in inputs and (inputs["input_ids"] == model.config.image_token_id).sum() > 0
    with torch.no_grad():
        model(**inputs)


@needs_hf
@pytest.mark.parametrize(("model_type", "why"), [
    ("mistral3", "its check counts the image's features as numbers, not vectors (tokens: 2048, features: 2048)"),
    ("paddleocr_vl", "its tower unpacks (batch, patches, c, h, w) from patch rows given a batch axis"),
])
def test_an_image_model_that_refused_every_image_layout_takes_its_image(model_type: str, why: str) -> None:
    """Each built on its text alone, because ``why``."""
    from unitcheck.hf import Built, build

    info: list[Built] = []
    model, inputs = build(model_type, device="cpu", info=info)
    assert "pixel_values" in inputs and (inputs["input_ids"] == model.config.image_token_id).sum() > 0, why
    with torch.no_grad():
        model(**inputs)


class _TiledTower(nn.Module):
    """Mllama-like: (batch, images, tiles, c, h, w) pixels, one aspect-ratio id per image and a mask
    per tile, all required."""

    main_input_name = "pixel_values"

    def __init__(self) -> None:
        super().__init__()
        self.tiles = nn.Embedding(3, 4 * 8)
        self.patch = nn.Conv2d(3, 8, 8, stride=8)

    def forward(self, pixel_values: torch.Tensor, aspect_ratio_ids: torch.Tensor,
                aspect_ratio_mask: torch.Tensor) -> torch.Tensor:
        batch, media, tiles, c, h, w = pixel_values.shape
        x = self.patch(pixel_values.reshape(-1, c, h, w)).flatten(2).transpose(1, 2)
        x = x.reshape(batch * media, tiles, -1, 8) + self.tiles(aspect_ratio_ids.reshape(batch * media, -1)).reshape(
            -1, 4, 1, 8)
        _, _, masked = aspect_ratio_mask.shape  # one entry per tile of each image
        return x * aspect_ratio_mask.reshape(batch * media, masked, 1, 1)


@needs_hf
def test_an_image_unpacked_into_more_axes_gets_them_with_its_per_image_inputs() -> None:
    """"b, media, tiles, c, h, w = pixel_values.shape" given (b, c, h, w): the axes it lacks after
    its batch axis, as many tiles as the config's ``max_num_tiles`` (else one), and the per-example
    integer inputs remade per image and per tile beside it; patch rows unpacked into five axes
    become (1, rows, c, p, p) patch images."""
    from unitcheck.hf.runs import _probe
    from unitcheck.hf.shapes import _reshaped, _with_companions, _with_shapes

    cfg = SimpleNamespace(max_num_tiles=4, patch_size=8)
    inputs = {"pixel_values": torch.zeros(2, 3, 16, 16), "aspect_ratio_ids": torch.ones(2, 32, dtype=torch.long),
              "aspect_ratio_mask": torch.ones(2, 4, dtype=torch.long)}
    why = ("ValueError: not enough values to unpack (expected 6, got 4) [at: batch_size, num_concurrent_media, "
           "num_tiles, num_channels, height, width = pixel_values.shape]")
    shapes = _reshaped(why, inputs, cfg)
    assert shapes == [("pixel_values", (2, 1, 4, 3, 16, 16)), ("pixel_values", (2, 1, 1, 3, 16, 16))]
    with torch.device("meta"):  # as the builder probes its models
        tower = _TiledTower().eval()
    assert _probe(tower, inputs) is not None
    passing = [os for os in _with_companions(inputs, shapes[0]) if _probe(tower, _with_shapes(inputs, os, 0)) is None]
    assert passing == [(shapes[0], ("aspect_ratio_ids", (2, 1)), ("aspect_ratio_mask", (2, 1, 4)))]
    remade = _with_shapes(inputs, passing[0], 0)
    assert bool((remade["aspect_ratio_mask"] == 1).all())  # a mask of ones stays ones
    rows = {"pixel_values": torch.zeros(32, 192)}
    why = "ValueError: not enough values to unpack (expected 5, got 2) [at: b, n, c, h, w = pixel_values.shape]"
    assert _reshaped(why, rows) == [("pixel_values", (1, 32, 3, 8, 8))]


class _StripTower(nn.Module):
    """MiniCPM-V-like: every image's patches in one strip one patch high, with each image's (h, w)
    in patches as an optional argument it has no default for."""

    main_input_name = "pixel_values"

    def __init__(self) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, 8, 8, stride=8)
        self.pos = nn.Embedding(16, 8)

    def forward(self, pixel_values: torch.Tensor, target_sizes: torch.Tensor | None = None) -> torch.Tensor:
        x = self.patch(pixel_values).flatten(2).transpose(1, 2)
        count = int((target_sizes[:, 0] * target_sizes[:, 1]).sum()) if target_sizes.device.type != "meta" \
            else x.shape[1]
        return x + self.pos(torch.arange(count) % 16).unsqueeze(0)


@needs_hf
def test_an_optional_patch_grid_comes_with_packed_patches() -> None:
    """A tower whose forward takes each image's patch grid (``target_sizes``, ``grid_thw``) with no
    default gets packed patches with one grid row per image after the plain image, and a grid it
    asks for by name is read from the image it has, not made up as features."""
    from unitcheck.hf.inputs import _named_inputs
    from unitcheck.hf.layouts import _input_layouts

    cfg = SimpleNamespace(image_size=32, patch_size=8, num_channels=3)
    tower = _StripTower().eval()
    layouts = dict(_input_layouts(tower, cfg, "none", 2, 8, 0))
    strip = layouts["patches+target_sizes (one strip)"]
    assert strip["pixel_values"].shape == (1, 3, 8, 2 * 16 * 8)
    assert strip["target_sizes"].tolist() == [[4, 4], [4, 4]]
    assert tower(**strip).shape == (1, 32, 8)
    assert list(layouts)[0] == "pixel_values" and "patches+target_sizes" in layouts
    made = _named_inputs(["target_sizes", "grid_thw"], cfg, {"pixel_values": torch.zeros(2, 3, 32, 24)}, 2, 8, 0)
    assert made["target_sizes"].tolist() == [[4, 3]] * 2 and made["grid_thw"].tolist() == [[1, 4, 3]] * 2


@needs_hf
@pytest.mark.parametrize("model_type", ["bark", "qwen2_5_omni"])
def test_a_type_whose_model_only_generates_is_refused_by_name(model_type: str) -> None:
    """Their model classes have no forward; the build took torch's NotImplementedError for a
    limit of fake tensors and the trace then said "unsupported operator"."""
    from unitcheck import hf

    with pytest.raises(hf.HFError, match=r"has no forward: it only generates: there is no call on tensors"):
        hf.build(model_type, device="meta")


def test_an_object_argument_is_a_class_that_holds_no_tensor_data() -> None:
    """The first form of the check took ``torch.LongTensor`` (no subclass of ``torch.Tensor``) and
    a missing annotation (``Parameter.empty``) for objects, and refused 42 types a sweep of the
    builds showed."""
    import inspect

    from unitcheck.hf.heads import _an_object

    class InferenceSession:
        pass

    assert _an_object(InferenceSession)
    for data in (torch.LongTensor, torch.FloatTensor, torch.Tensor, inspect.Parameter.empty, int, list, torch.Size):
        assert not _an_object(data), data


@needs_hf
def test_a_type_whose_model_takes_a_session_object_is_refused_by_name() -> None:
    """The SAM 2 video models' forward takes an inference session (the video's state), not
    tensors: the builder made it a float tensor, and the trace failed on its methods."""
    from unitcheck import hf

    with pytest.raises(hf.HFError, match=r"Sam2VideoModel takes `inference_session` \(a Sam2VideoInferenceSession\)"):
        hf.build("sam2_video", device="meta")


def test_the_models_own_not_implemented_is_not_a_limit_of_fake_tensors() -> None:
    """OmDet-Turbo raises NotImplementedError("Training is not implemented yet") given labels: a
    refusal of those inputs, not a probe that fake tensors cannot run (a real run decides those)."""
    from unitcheck.hf.runs import _probe_limited

    assert not _probe_limited('NotImplementedError: Training is not implemented yet [at: raise '
                              'NotImplementedError("Training is not implemented yet")]')
    assert _probe_limited("NotImplementedError: aten::_foo: no meta kernel [at: y = torch.ops.x.foo(h)]")



@needs_hf
def test_a_model_that_runs_on_one_example_only_is_built_at_batch_1() -> None:
    """TVP views its grid positions, a ``(width, hidden)`` table, as ``(batch_size, 1, width,
    hidden)``: nothing passes at batch 2 (its trace failed on "shape '[2, 1, 7, 64]' is
    invalid"), so the build takes batch 1 and says so; a type that passes at batch 2 keeps it."""
    from unitcheck import hf

    info: list[hf.Built] = []
    model, inputs = hf.build("tvp", device="cpu", info=info)
    assert "(batch 1: none passed at batch 2)" in info[0].layout
    assert all(v.shape[0] == 1 for v in inputs.values() if isinstance(v, torch.Tensor))
    with torch.no_grad():
        model(**inputs)
    _, inputs = hf.build("gpt2", device="meta", info=info)
    assert inputs["input_ids"].shape[0] == 2 and "batch 1" not in info[-1].layout


@needs_hf
def test_autoformer_is_traced_on_the_path_eager_takes() -> None:
    """Autoformer's attention adds a mask only where one exists, with a view of its weights that
    holds for no shape; exported, transformers builds the mask, and every capture failed. On
    the path eager takes it traces, and the oracle agrees with every unit."""
    from unitcheck import hf
    from unitcheck.tracer import trace

    model, inputs = hf.build("autoformer", device="cpu")
    tg = trace(model, inputs)
    assert any("traced the path it takes in eager" in n for n in tg.notes), tg.notes
    res = oracle.verify(model, inputs)
    assert res.ok and res.checked > 500 and res.violations == res.confirmed


@needs_hf
def test_a_count_the_config_fixes_takes_the_count_the_input_gives() -> None:
    """Janus's VQ decodes ``num_patches`` x ``num_patches`` tokens (32 x 32 by default) whatever
    the image its encoder saw (4 x 4 at the small size): its own check failed every build, and
    the trace. The grid field takes the side the run had; a width field of the same value, a
    count that matches, or a count that is no square, is left alone."""
    from transformers import PretrainedConfig

    from unitcheck import hf
    from unitcheck.hf.repair import _repair_count
    from unitcheck.tracer import trace

    cfg = PretrainedConfig(num_patches=32, hidden_size=32, vision_config=PretrainedConfig(image_token_count=1024))
    why = ("ValueError: Expected `image_tokens` to have shape `(batch_size, 1024)`, but got shape "
           "`torch.Size([2, 16])`.")
    fixes = [(path, key, value) for path, key, value, _ in _repair_count(cfg, why)]
    assert fixes == [((), "num_patches", 4), (("vision_config",), "image_token_count", 16)]
    assert _repair_count(cfg, why.replace("[2, 16]", "[2, 1024]")) == ()
    assert [f[1] for f in _repair_count(cfg, why.replace("[2, 16]", "[2, 15]"))] == ["image_token_count"]
    info: list[hf.Built] = []
    model, inputs = hf.build("janus_vqgan", device="cpu", info=info)
    assert "repaired num_patches" in info[0].plan and info[0].probed
    assert len(trace(model, inputs).compute_nodes()) > 100


class _PerBookLM(nn.Module):
    """Logits with one row per example and codebook, as Dia's head returns them."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(11, 4)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        logits = self.emb(input_ids[:, :1]).repeat(3, 1, 1)  # (batch * 3 books, 1, vocab-ish)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
        return out


def test_labels_the_loss_refuses_take_the_shape_of_the_logits() -> None:
    from unitcheck.hf.runs import _logits_rows, _loss_refuses_labels, _probe

    model, ids = _PerBookLM().to("meta"), torch.zeros(2, 5, dtype=torch.long)  # probes run on meta, as builds do
    why = _probe(model, {"input_ids": ids, "labels": ids})
    assert why is not None and "target" in why and _loss_refuses_labels(why, {"input_ids": ids, "labels": ids})
    assert not _loss_refuses_labels(why, {"input_ids": ids})  # no labels: nothing to reshape
    assert _logits_rows(model, {"input_ids": ids, "labels": ids}) == (6, 1)
    assert _probe(model, {"input_ids": ids, "labels": torch.zeros(6, 1, dtype=torch.long)}) is None


@needs_hf
def test_dias_labels_are_built_one_row_per_codebook() -> None:
    """Dia's loss reads labels as ``(batch * channels, frames)``; the builder made them like the
    text ids, no candidate passed, and the trace failed ("Expected input batch_size (18) to match
    target batch_size (32)"). Shaped as the logits, they pass, and the trace has the loss."""
    from unitcheck import hf
    from unitcheck.tracer import trace

    info: list[hf.Built] = []
    model, inputs = hf.build("dia", device="cpu", info=info)
    config: Any = model.config
    rows = 2 * config.decoder_config.num_channels
    assert info[0].probed and f"(labels as [{rows}, 1])" in info[0].layout
    assert inputs["labels"].shape == (rows, 1)
    assert int(inputs["labels"].max()) < config.decoder_config.vocab_size
    tg = trace(model, inputs)
    assert any("cross_entropy" in str(n.target) or "nll_loss" in str(n.target) for n in tg.graph.nodes)


def test_a_mapped_class_transformers_does_not_export_is_taken_from_its_modeling_module(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The auto mappings name ``VoxtralRealtimeTextModel``, which transformers does not export
    (5.24, 5.25): the build failed with "module transformers has no attribute". A mapped name
    the package lacks is its modeling module's class, ``module:Class``; an exported one stays."""
    from unitcheck.hf import heads

    monkeypatch.setattr(heads, "_exports", lambda: frozenset({"GPT2Model"}))
    assert heads._exported_or_qualified("gpt2", "GPT2Model") == "GPT2Model"
    assert heads._exported_or_qualified("gpt2", "GPT2LMHeadModel") == \
        "transformers.models.gpt2.modeling_gpt2:GPT2LMHeadModel"
    assert heads._exported_or_qualified("gpt2", "NoSuchModel") == "NoSuchModel"  # left for the build to refuse


@needs_hf
def test_voxtral_realtime_text_builds_from_its_modeling_module_as_its_parent_calls_it() -> None:
    """Its layers' adaptive norms take a conditioning tensor its parent passes through
    ``**kwargs`` (no name says how to make it), and the parent declares its text config as any
    config (``AutoConfig``): the parent is found from its default config, and its call traces."""
    from unitcheck import hf
    from unitcheck.hf.parts import _parents
    from unitcheck.tracer import trace

    assert _parents("voxtral_realtime_text") == [("voxtral_realtime", "text_config")]
    info: list[hf.Built] = []
    model, inputs = hf.build("voxtral_realtime_text", device="meta", info=info)
    assert type(model).__name__ == info[0].head == "VoxtralRealtimeTextModel"
    assert info[0].layout.startswith("as voxtral_realtime calls it") and info[0].probed
    assert len(trace(model, inputs).graph.nodes) > 50
