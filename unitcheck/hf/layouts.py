"""Every input layout a model's forward could take, in the order they are tried."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .common import _find, _is_int
from .inputs import (
    _KINDS,
    _add_labels,
    _by_name,
    _channels_last,
    _declared,
    _decoder_inputs,
    _encoder_kind,
    _forward_params,
    _image,
    _main_name,
    _main_slot,
    _media_token,
    _named_inputs,
    _required_params,
    _slot_kind,
    _token_ids,
    _variance_labels,
    _video,
    _with_masks,
)
from .media import (
    _AUDIO_TOKENS,
    _EMBEDS,
    _FRAME_TOKENS,
    _IMAGE_TOKENS,
    _audio_layouts,
    _audio_text,
    _image_text,
    _packed_patches,
    _patches_with_grid,
    _patches_with_shapes,
    _time_series,
)
from .shrink import _main_width


def _input_layouts(model: nn.Module, cfg: Any, labels: str, batch: int, seq: int, seed: int,
                   only: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """Candidate keyword inputs for the model, most faithful first (``only``: the one named so)."""
    g = torch.Generator().manual_seed(seed)
    params = _forward_params(model)
    named = _main_name(model)
    main = _slot_kind(model, _encoder_kind(model, named), params)
    ids = _token_ids(cfg, batch, seq, g)
    layouts: list[tuple[str, dict[str, Any]]] = []
    if main == "input_ids" or main not in _KINDS:
        base = {"input_ids": ids} if "input_ids" in params else {}
        if "pixel_values" in params:
            image: dict[str, Any] = {"pixel_values": _image(cfg, batch, g)}
            if "image_grid_thw" in params:
                image = _patches_with_grid(model, cfg, {"image_grid_thw", "pixel_values"}, batch, g)
            token = _media_token(cfg, "image")
            wanted = only is None or only == _IMAGE_TOKENS
            with_tokens = _image_text(model, ids, image, token) if wanted else None
            if with_tokens is not None:
                layouts.append((_IMAGE_TOKENS, with_tokens))
            layouts.append(("input_ids+pixel_values", {**base, **image}))
            if "image_grid_thw" not in params:
                frames = {"pixel_values": _video(cfg, image["pixel_values"])}
                if only is None or only == _FRAME_TOKENS:
                    # towers that take (batch, images, C, H, W) only (Idefics 2/3, SmolVLM, ModernVBERT)
                    frame_tokens = _image_text(model, ids, frames, token)
                    if frame_tokens is not None:
                        layouts.append((_FRAME_TOKENS, frame_tokens))
                layouts.append(("input_ids+pixel_values (frames)", {**base, **frames}))
                # towers that fold (batch, T, H, W, C) patches (Inkling)
                layouts.append(("input_ids+pixel_values (frames, channels last)",
                                {**base, "pixel_values": _channels_last(frames["pixel_values"])}))
        for audio in ("input_features", "input_values"):
            if audio in params and base:  # text-audio pairs (CLAP, CLVP...)
                pairs = _audio_layouts(cfg, audio, batch, g)
                if only is None or only == _AUDIO_TOKENS:
                    # the first audio shape the tower takes, with one audio token per feature
                    with_tokens = next((t for _, a in pairs if (t := _audio_text(model, cfg, ids, a, params))), None)
                    if with_tokens is not None:
                        layouts.append((_AUDIO_TOKENS, with_tokens))
                layouts.extend((f"input_ids+{name}", {**base, **inputs}) for name, inputs in pairs)
        if base:
            layouts.append(("input_ids", base))
            width = _main_width(cfg)
            if "inputs_embeds" in params and width:  # a stage fed embeddings only (Qwen3-Omni's code predictor)
                layouts.append((_EMBEDS, {"inputs_embeds": torch.randn(batch, seq, width, generator=g)}))
            books = _find(cfg, "num_codebooks")
            if _is_int(books) and books > 1:  # audio-token decoders: one row per codebook (batch * codebooks, seq)
                layouts.append(("input_ids (codebooks)", {"input_ids": ids.repeat(int(books), 1)}))
    elif main == "pixel_values":
        pixels = _image(cfg, batch, g)
        layouts.append(("pixel_values", {"pixel_values": pixels}))
        layouts.append(("pixel_values (frames or image pairs)", {"pixel_values": _video(cfg, pixels)}))
        layouts.append(("pixel_values (frames, channels last)", {"pixel_values": _channels_last(_video(cfg, pixels))}))
        # a video tower fed its clips' frames as one batch (X-CLIP's, which views it as clips of frames)
        layouts.append(("pixel_values (frames in the batch)", {"pixel_values": _video(cfg, pixels).flatten(0, 1)}))
        if "input_ids" in params:
            layouts.insert(0, ("pixel_values+input_ids", {"pixel_values": pixels, "input_ids": ids}))
            token = _media_token(cfg, "image")
            if only is None or only == _IMAGE_TOKENS:
                with_tokens = _image_text(model, ids, {"pixel_values": pixels}, token)
                if with_tokens is not None:
                    layouts.insert(0, (_IMAGE_TOKENS, with_tokens))
    elif main == "pixel_values_videos":
        layouts.append(("pixel_values_videos", {"pixel_values_videos": _video(cfg, _image(cfg, batch, g))}))
    elif main == "input_values":
        layouts.extend(_audio_layouts(cfg, "input_values", batch, g))
    elif main == "past_values":
        layouts.extend(_time_series(cfg, params, batch, g))
    elif main == "input_features":
        layouts.extend(_audio_layouts(cfg, "input_features", batch, g))
    required = _required_params(model)
    if {"grid_thw", "image_grid_thw"} & required:
        layouts.insert(0, ("patches+grid_thw", _patches_with_grid(model, cfg, required, batch, g)))
    optional_grid = next((p for p in ("grid_thw", "image_grid_thw", "target_sizes", "tgt_sizes")
                          if p in params and p not in required), None)
    if optional_grid is not None and main == "pixel_values" and "pixel_values" in params:
        # an optional patch grid: packed patches with their grid after the plain images (MiniCPM-V's
        # and PaddleOCR-VL's towers read the grid they are given no default for)
        layouts.extend(_packed_patches(model, cfg, optional_grid, batch, g))
    if "pixel_position_ids" in required and "pixel_values" in params:
        # patch rows with each patch's (x, y) in the grid (Gemma 4's vision tower)
        rows = _patches_with_shapes(cfg, batch, g)
        side = int(rows["spatial_shapes"][0, 0])
        ys, xs = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
        grid = torch.stack([xs.flatten(), ys.flatten()], dim=-1)
        layouts.insert(0, ("patches+pixel_position_ids", {"pixel_values": rows["pixel_values"],
                                                          "pixel_position_ids": grid.expand(batch, -1, -1).clone()}))
    if "spatial_shapes" in required:
        layouts.insert(0, ("patches+spatial_shapes", _patches_with_shapes(cfg, batch, g)))
    elif "spatial_shapes" in params and "pixel_values" in params:
        # optional: after the plain image, before the text alone (LFM2-VL takes its image so)
        rows = _patches_with_shapes(cfg, batch, g)
        text_alone = next((i for i, (name, _) in enumerate(layouts) if name == "input_ids"), len(layouts))
        with_tokens = _image_text(model, ids, rows, _media_token(cfg, "image")) \
            if "input_ids" in params else None
        layouts.insert(text_alone, ("patches+spatial_shapes",
                                    with_tokens or {**({"input_ids": ids} if "input_ids" in params else {}), **rows}))
    declared = _declared(model)
    if not layouts:
        by_name = _named_inputs([main], cfg, {}, batch, seq, seed, declared) if main in params else {}
        layouts.append((f"{main} (by name)", by_name))
    filled: list[tuple[str, dict[str, Any]]] = []
    slot = named if main != named and named in params else _main_slot(model, named, params, required)
    if slot is not None and main not in params and layouts[-1][1]:
        # a part that inherits its model's main input but takes features (SAM 3's DETR decoder
        # takes ``vision_features`` where its model takes ``pixel_values``): last, every required
        # argument made from its name
        layouts.append((f"{slot} (by name)", {}))
    for name, inputs in layouts:
        if slot is not None and main in inputs:
            inputs[slot] = inputs.pop(main)
        _decoder_inputs(model, cfg, inputs, ids, params)
        _add_labels(model, cfg, inputs, ids, labels, params, batch, g)
        _variance_labels(cfg, inputs, params, batch, g)
        _by_name(cfg, inputs, required, ids, batch, g, declared)
        filled.extend(_with_masks(name, inputs, required, params))
        if labels == "none" and "labels" in params and "labels" not in inputs:
            filled.append((f"{name}+labels", {**inputs, "labels": ids.clone()}))  # heads that need targets
    return filled if only is None else [(n, i) for n, i in filled if n == only] or filled
