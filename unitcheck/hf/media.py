"""Inputs that pair media with text or time: audio features, time-series windows, patch rows,
and image, audio or frame tokens counted to match what the tower produces."""

from __future__ import annotations

import copy
import re
from collections.abc import Collection, Mapping
from typing import Any

import torch
from torch import nn

from .common import HFError, _find, _find_int, _get, _int_list, _is_int, _quiet
from .inputs import (
    _declared,
    _default_bins,
    _documented_size,
    _forward_params,
    _grid_axes,
    _grid_rows,
    _media_token,
    _vision_cfg,
)
from .runs import _as_export, _faked, _runs_on_cpu
from .shapes import _SIZE_INDEPENDENT, _reshaped, _with_shapes


def _audio_layouts(cfg: Any, name: str, batch: int, g: torch.Generator) -> list[tuple[str, dict[str, Any]]]:
    """Waveforms ``(batch, samples)`` or ``(batch, channels, samples)``, spectrograms and
    feature frames in both orders, at the lengths the config ties them to."""
    out: list[tuple[str, dict[str, Any]]] = []
    if name == "input_values":
        n = 3200
        per_token = _find(cfg, "samples_per_token", "audio_samples_per_token")
        if _is_int(per_token) and 0 < per_token <= 8192:  # a whole number of tokens (MuseSpark: 1920)
            n = -(-n // per_token) * per_token
        ch = _find(cfg, "audio_channels")
        out.append(("input_values", {name: torch.randn(batch, n, generator=g)}))
        out.append(("input_values (channels)", {name: torch.randn(batch, int(ch) if _is_int(ch) else 1, n, generator=g)}))
        mel = _find(cfg, "num_mel_bins")
        if _is_int(mel):
            length = _find(cfg, "max_length")
            frames = int(length) if _is_int(length) and 0 < length <= 2048 else 64
            out.insert(0, ("input_values (spectrogram)", {name: torch.randn(batch, frames, int(mel), generator=g)}))
        return out
    sizes = [int(v) for k in ("num_mel_bins", "input_feat_per_channel", "feature_size", "input_dim",
                              "feature_projection_input_dim", "n_mels", "num_features")
             if _is_int(v := _find(cfg, k)) and v > 0]
    chans = _find(cfg, "input_channels")
    per_channel = _find(cfg, "input_feat_per_channel")
    if _is_int(chans) and _is_int(per_channel):
        sizes.insert(0, per_channel * chans)
    sizes = list(dict.fromkeys(sizes)) or [_default_bins(cfg)]
    mel = sizes[0]
    src = _find(cfg, "max_source_positions")
    if _is_int(src):
        out.append(("input_features", {name: torch.randn(batch, mel, 2 * src, generator=g)}))
    window = _find(cfg, "n_window")
    frames = 2 * window if _is_int(window) and 0 < window <= 256 else 64
    out.append(("input_features (frames last)", {name: torch.randn(batch, mel, frames, generator=g)}))
    for feat in sizes:
        out.append((f"input_features ({feat} features last)", {name: torch.randn(batch, frames, feat, generator=g)}))
    out.append(("input_features (one-channel spectrogram)", {name: torch.randn(batch, 1, frames, mel, generator=g)}))
    return out


def _time_series(cfg: Any, params: set[str], batch: int, g: torch.Generator) -> list[tuple[str, dict[str, Any]]]:
    """Forecasting models: a history (context plus the largest lag), its time features and
    observed mask, and the future window the loss is computed on; univariate and per-channel."""
    context = _get(cfg, "context_length") or _get(cfg, "prediction_length") or 32
    lags = _get(cfg, "lags_sequence")
    history = int(context) + (max(lags) if _int_list(lags) else 0)
    horizon = int(_get(cfg, "prediction_length") or _get(cfg, "horizon_length") or 8)
    channels = _get(cfg, "input_size") or _get(cfg, "num_input_channels") or 1
    features = int(_get(cfg, "num_time_features") or 0) + int(_get(cfg, "num_dynamic_real_features") or 0)
    out = []
    for shape_tail in ((), (int(channels),)):
        past = torch.randn(batch, history, *shape_tail, generator=g)
        inputs: dict[str, Any] = {"past_values": past}
        if "past_time_features" in params:
            inputs["past_time_features"] = torch.randn(batch, history, features, generator=g)
        for name in ("past_observed_mask", "observed_mask"):
            if name in params:
                inputs[name] = torch.ones_like(past)
        if "past_values_padding" in params:
            inputs["past_values_padding"] = torch.zeros(batch, history)
        if "freq" in params:
            inputs["freq"] = torch.zeros(batch, 1, dtype=torch.long)
        if "future_values" in params:
            inputs["future_values"] = torch.randn(batch, horizon, *shape_tail, generator=g)
        if "future_time_features" in params:
            inputs["future_time_features"] = torch.randn(batch, horizon, features, generator=g)
        out.append((f"past_values{'' if not shape_tail else ' (channels)'}", inputs))
    return out


def _patches_with_shapes(cfg: Any, batch: int, g: torch.Generator) -> dict[str, Any]:
    """NaFlex-style vision towers take patch rows, each image's (h, w) in patches and a mask."""
    vc = _vision_cfg(cfg)
    patch = _find_int(vc, "patch_size", default=16)
    chans = _find_int(vc, "num_channels", default=3)
    side = 4
    return {
        "pixel_values": torch.randn(batch, side * side, chans * patch * patch, generator=g),
        "spatial_shapes": torch.tensor([[side, side]] * batch),
        "pixel_attention_mask": torch.ones(batch, side * side, dtype=torch.long),
    }


def _packed_patches(model: nn.Module, cfg: Any, grid: str, batch: int, g: torch.Generator
                    ) -> list[tuple[str, dict[str, Any]]]:
    """Towers whose forward takes an optional patch grid (``grid``) of packed images: every image's
    patches in one example, with one grid row per image; as flattened patch rows (PaddleOCR-VL's
    tower, which views them as patch images), and as the strip of patches one patch high that
    MiniCPM-V's processor packs (1, channels, patch, patches * patch), the grid's usual one first."""
    rows = _patches_with_grid(model, cfg, {grid, "pixel_values"}, batch, g)
    patches = rows["pixel_values"]
    vc = _vision_cfg(cfg)
    patch = _find_int(vc, "patch_size", default=14)
    chans = _find_int(vc, "in_channels", "in_chans", "num_channels", default=3)
    strip = torch.randn(1, chans, patch, patches.shape[0] * patch, generator=g)
    packed = [(f"patches+{grid}", rows), (f"patches+{grid} (one strip)", {"pixel_values": strip, grid: rows[grid]})]
    # a (t, h, w) grid comes with rows (Qwen's processors), an (h, w) one with the strip (NaViT
    # packers'): the other after (rows, remade as patch images, also run the strip's tower where
    # its position table broadcasts one patch per image over all the positions)
    return packed if _grid_axes(grid) == 3 else packed[::-1]


def _patches_with_grid(model: nn.Module, cfg: Any, required: set[str], batch: int, g: torch.Generator) -> dict[str, Any]:
    """Qwen-style vision towers take flattened patches and a (t, h, w) grid per image."""
    vc = _vision_cfg(cfg)
    patch = _find_int(vc, "patch_size", default=14)
    temporal = _find_int(vc, "temporal_patch_size", default=1)
    merge = _find_int(vc, "spatial_merge_size", "merge_size", default=2)
    chans = _find_int(vc, "in_channels", "in_chans", "num_channels", default=3)
    side = 2 * merge
    grid_name = next((r for r in ("grid_thw", "image_grid_thw", "target_sizes", "tgt_sizes") if r in required),
                     "image_grid_thw")
    patches_name = next((r for r in ("hidden_states", "pixel_values") if r in required), "pixel_values")
    rows = batch * side * side
    patches = torch.randn(rows, chans * temporal * patch * patch, generator=g)
    # each row in the axes the forward's docstring gives, where it gives more than one (Inkling 2's
    # tower takes (tokens, patch_size * merge, patch_size * merge, channels), channels last); not
    # where its first axis is the batch: transformers' generic text for an image argument
    first, *axes = _declared(model).shapes.get(patches_name, "").split(",")
    each = _documented_size(",".join(axes), vc, {}, batch, rows, chans) \
        if len(axes) > 1 and first.strip() != "batch_size" else None
    if each is not None:
        patches = torch.randn(rows, *each, generator=g)
    return {patches_name: patches, grid_name: _grid_rows(grid_name, (side, side), batch)}


_EMBEDS = "inputs_embeds"


_IMAGE_TOKENS = "input_ids+pixel_values (image tokens)"


_AUDIO_TOKENS = "input_ids+audio (audio tokens)"


_FRAME_TOKENS = "input_ids+pixel_values (frames, image tokens)"


# (model class, kind) whose image or audio features cannot be counted on fake tensors
_NO_MEDIA_COUNT: set[tuple[str, str]] = set()


def _image_text(model: nn.Module, ids: torch.Tensor, image: dict[str, Any], token: Any) -> dict[str, Any] | None:
    """Text with as many image tokens as the vision tower yields features."""
    return _media_text(model, ids, image, token, "image")


def _audio_text(model: nn.Module, cfg: Any, ids: torch.Tensor, audio: dict[str, Any],
                params: Collection[str]) -> dict[str, Any] | None:
    """Text with as many audio tokens as the audio tower yields features (GLM-ASR, MOSS: the
    model checks the two counts match), the features' mask all ones."""
    token = _media_token(cfg, "audio")
    feats = next((v for v in audio.values() if isinstance(v, torch.Tensor) and v.dim() >= 2), None)
    if feats is None or not _is_int(token):
        return None
    media = dict(audio)
    for mask in ("input_features_mask", "feature_attention_mask", "padding_mask"):  # VibeVoice: padding_mask
        if mask in params:
            media[mask] = torch.ones(feats.shape[0], feats.shape[-1], dtype=torch.long)
    return _media_text(model, ids, media, token, "audio")


def _feature_getter(model: nn.Module, kind: str) -> Any:
    """``get_<kind>_features`` of the model or of the inner model it wraps (Janus, DeepSeek-VL
    keep it on ``model``, ModernVBERT's masked-LM head on its base model)."""
    prefix = getattr(model, "base_model_prefix", "")
    for owner in (model, getattr(model, "model", None), getattr(model, prefix, None) if prefix else None,
                  *model.children()):
        get = getattr(owner, f"get_{kind}_features", None)
        if callable(get):
            return get
    return None


def _media_text(model: nn.Module, ids: torch.Tensor, media: dict[str, Any], token: Any, kind: str
                ) -> dict[str, Any] | None:
    """Text with as many ``kind`` tokens as the model's tower yields features for ``media``; where
    the tower's first layer rejects the media's shape, at the shape it asks for (Fuyu's patch
    rows, as the probe reshapes the inputs)."""
    get = _feature_getter(model, kind)
    slots = _slots_mask(model, kind)
    if not (_is_int(token) or slots) or (type(model).__name__, kind) in _NO_MEDIA_COUNT:
        return None
    count: int | None = None
    for _ in range(3 if get is not None else 0):
        try:
            count = _count_features(model, get, media, kind)
            break
        except Exception as err:
            why = f"{type(err).__name__}: {err}"
            if "required positional argument" in why:
                break  # the getter wants the text too (MusicFlamingo) or a processor's mask (MOSS)
            shapes = _reshaped(why, media)
            if not shapes:
                if any(k in why for k in _SIZE_INDEPENDENT):
                    _NO_MEDIA_COUNT.add((type(model).__name__, kind))
                return None
            media = _with_shapes(media, (shapes[0],), 0)
    if count is None and _is_int(token):
        count = _count_from_check(model, ids, media, int(token))
    if count is None:
        return None
    with_tokens = _ids_with_tokens(ids, int(token) if _is_int(token) else 0, count)
    if with_tokens is None:
        return None
    if slots is None:
        return {"input_ids": with_tokens, **media}
    marked = torch.zeros_like(with_tokens)
    marked[:, 1:1 + count // with_tokens.shape[0]] = 1  # where _ids_with_tokens put them
    return {"input_ids": with_tokens, slots: marked, **media}


def _slots_mask(model: nn.Module, kind: str) -> str | None:
    """The forward argument that marks which text positions hold the ``kind`` features, where a
    model has no media token (Kosmos-2's ``image_embeds_position_mask``)."""
    params = _forward_params(model)
    return next((p for p in sorted(params) if re.fullmatch(rf"{kind}\w*_position_mask", p)), None)


def _ids_with_tokens(ids: torch.Tensor, token: int, count: int) -> torch.Tensor | None:
    """Half the text with ``count`` media tokens in all after its first token, as many in each
    example, adjacent as a processor expands them; None where the count does not split evenly."""
    batch, seq = ids.shape
    per_item = count // batch
    if per_item <= 0 or per_item > 4096 or per_item * batch != count:
        return None
    text = ids[:, : max(2, seq // 2)]
    tokens = torch.full((batch, per_item), token, dtype=ids.dtype)
    return torch.cat([text[:, :1], tokens, text[:, 1:]], dim=1)


def _tokens_said(why: str, cfg: Any, inputs: Mapping[str, Any]) -> tuple[str, int] | None:
    """(media kind, tokens in all) where a run failed on transformers' check that the text holds
    one token per media feature ("Image features and image tokens do not match, tokens: 0,
    features: 272": LLaVA-NeXT, whose tiles only a forward counts), and the text can hold them."""
    found = _FEATURES_SAID.search(why)
    ids = inputs.get("input_ids")
    if found is None or not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        return None
    kind = found.group("kind").lower()
    token = _media_token(cfg, kind)
    count = int(found.group("count"))
    if not _is_int(token) or _ids_with_tokens(ids, int(token), count) is None:
        return None
    return kind, count


_TEXT_INPUTS = frozenset({"input_ids", "labels", "attention_mask", "token_type_ids", "position_ids"})


def _counted_by_tower(model: nn.Module, cfg: Any, inputs: Mapping[str, Any]) -> tuple[str, int] | None:
    """(media kind, tokens in all) as the model's own tower counts the features of the media in
    ``inputs`` (the first kind with a token and a getter that takes them), where the text can
    hold that many; None where no tower counts them."""
    ids = inputs.get("input_ids")
    media = {k: v for k, v in inputs.items() if k not in _TEXT_INPUTS}
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or not media:
        return None
    for kind in ("image", "video", "audio"):
        get = _feature_getter(model, kind)
        if get is None or not _is_int(_media_token(cfg, kind)):
            continue
        try:
            count = _count_features(model, get, media, kind)
        except Exception:  # noqa: BLE001 (a getter that wants other inputs: not this kind's media)
            continue
        if count and _ids_with_tokens(ids, 0, count) is not None:
            return kind, count
    return None


def _embedding_width(model: nn.Module) -> int:
    """The width of the model's token embeddings (0 where it has none it says)."""
    try:
        return int(getattr(model.get_input_embeddings(), "embedding_dim", 0))  # type: ignore[operator]
    except Exception:  # noqa: BLE001 (a model without the method, or one that raises NotImplementedError)
        return 0


def _with_tokens(inputs: Mapping[str, Any], cfg: Any, said: tuple[str, int]) -> dict[str, Any]:
    """``inputs`` whose text holds the media tokens :func:`_tokens_said` found missing."""
    kind, count = said
    token = int(_media_token(cfg, kind))
    ids, labels = inputs["input_ids"], inputs.get("labels")
    out = {**inputs, "input_ids": _ids_with_tokens(ids, token, count)}
    if isinstance(labels, torch.Tensor) and torch.equal(labels, ids):  # a language model's labels: its text
        out["labels"] = out["input_ids"].clone()
    return out


def _zeroed_cpu_copy(model: nn.Module) -> nn.Module:
    """A CPU copy of a model on meta with every parameter and buffer zero, integer buffers too
    (position ids index tables): enough to run a tower or a check that needs values."""
    real = copy.deepcopy(model).to_empty(device="cpu")
    for t in [*real.parameters(), *real.buffers()]:
        t.data.zero_()
    return real


_FEATURES_SAID = re.compile(r"(?P<kind>\w+) features and \w+ tokens do not match[,:] tokens: \d+, "
                            r"features:? (?P<count>\d+)")  # Idefics3's wording has no comma and no colon


def _count_from_check(model: nn.Module, ids: torch.Tensor, media: dict[str, Any], token: int) -> int | None:
    """Where no tower getter counts the features (Qwen2-Audio computes them inside forward), the
    model's own check says how many it made: a forward on text with two media tokens (adjacent,
    as a processor expands them: Qwen2-Audio takes a lone token for the legacy layout) fails with
    transformers' "... features and ... tokens do not match, tokens: 2, features: N". Run on a
    zeroed CPU copy of a model on meta (small models only)."""
    if next((p.is_meta for p in model.parameters()), True):
        if not _runs_on_cpu(model):
            return None
        model = _zeroed_cpu_copy(model)
    try:
        with torch.no_grad(), _quiet():
            pair = torch.full((ids.shape[0], 2), token, dtype=ids.dtype)
            model(input_ids=torch.cat([ids[:, :1], pair, ids[:, 1:]], dim=1), **media)
    except Exception as err:
        found = _FEATURES_SAID.search(str(err))
        return int(found.group("count")) if found else None
    return None


def _count_features(model: nn.Module, get: Any, media: dict[str, Any], kind: str) -> int | None:
    """Feature vectors the tower yields for ``media``: counted on fake tensors for a model on meta;
    where that needs values (rows kept by a mask, GLM-ASR; lengths summed from the grid,
    GLM-5-Next), by running the tower of a zeroed CPU copy, as for a real model (the oracle's)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    if next((p.is_meta for p in model.parameters()), True):
        try:
            with FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv()) as mode, torch.no_grad(), \
                    _as_export():
                feats = get(**_faked(mode, media))
                return _feature_count(_tower_output(feats))
        except Exception as err:
            if "data-dependent" not in str(err):
                raise
            if not _runs_on_cpu(model):  # a larger plan may not be
                raise HFError("the feature count needs values, and the model is too large to run a copy") from None
        get = _feature_getter(_zeroed_cpu_copy(model), kind)
    with torch.no_grad():
        return _feature_count(_tower_output(get(**media)))


def _tower_output(feats: Any) -> Any:
    """A tower's features: its pooled output where it has one, else its last hidden state
    (Fuyu's patch projection leaves ``pooler_output`` None)."""
    pooled = getattr(feats, "pooler_output", None)
    return pooled if pooled is not None else getattr(feats, "last_hidden_state", feats)


def _feature_count(feats: Any) -> int | None:
    """Feature vectors in a tower's output: a tensor's rows, or the sum over a list of them."""
    if isinstance(feats, (list, tuple)):
        return sum(int(f.shape[:-1].numel()) for f in feats if isinstance(f, torch.Tensor))
    if isinstance(feats, torch.Tensor):
        return int(feats.shape[:-1].numel())
    return None
