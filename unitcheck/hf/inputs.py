"""Example inputs made from a config and a forward's signature: token ids, images, masks, labels
and inputs named by what the forward asks for."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import math
import re
from collections.abc import Collection, Mapping
from typing import Any

import torch
from torch import nn

from .common import SMALL_DEFAULTS, _find, _find_int, _get, _has, _int_list, _is_int, _paths, _walk
from .runs import _probe, _statement


def _media_token(cfg: Any, kind: str) -> Any:
    """The placeholder token of ``kind`` (image, video, audio) media in the text, by either name
    configs give it."""
    return _find(cfg, f"{kind}_token_id", f"{kind}_token_index")


def _vision_cfg(cfg: Any) -> Any:
    for c in _walk(cfg):
        if _get(c, "image_size", None) is not None or _get(c, "patch_size", None) is not None:
            return c
    return cfg


def _side(v: Any, default: int) -> tuple[int, int]:
    if _is_int(v):
        return int(v), int(v)
    if _int_list(v) and len(v) >= 2:
        return int(v[0]), int(v[1])
    return default, default


def _token_ids(cfg: Any, batch: int, seq: int, g: torch.Generator) -> torch.Tensor:
    text = cfg.get_text_config(decoder=True) if _has(cfg, "get_text_config") else cfg
    vocab = _get(text, "vocab_size", None) or _find(cfg, "vocab_size") or 100
    special = [int(v) for c in _walk(cfg) for k, v in vars(c).items()
               if _is_int(v) and k.endswith(("_token_id", "_token_index")) and "pad" not in k and "bos" not in k
               and "eos" not in k and "start" not in k and v >= 3]
    high = min([int(vocab)] + [s for s in special if s < vocab])
    return torch.randint(0, max(2, high), (batch, seq), generator=g)


def _image(cfg: Any, batch: int, g: torch.Generator) -> torch.Tensor:
    vc = _vision_cfg(cfg)
    h, w = _side(_get(vc, "image_size", None), 64)
    ch = _get(vc, "num_channels", None)
    ch = ch if _is_int(ch) else 3
    return torch.randn(batch, ch, h, w, generator=g)


# main inputs whose name says what they hold (any other is made from its name)
_KINDS = ("input_ids", "pixel_values", "input_values", "input_features", "pixel_values_videos", "past_values")


def _main_name(model: nn.Module) -> str:
    main = getattr(model, "main_input_name", "input_ids")
    return str(main[0] if isinstance(main, (list, tuple)) else main)


def _encoder_kind(model: nn.Module, main: str) -> str:
    """What a wrapper's main input holds where its name does not say (a speech encoder-decoder
    calls its waveform ``inputs``): what its encoder takes (wav2vec2's ``input_values``)."""
    encoder = getattr(model, "encoder", None)
    if main in _KINDS or not isinstance(encoder, nn.Module):
        return main
    kind = _main_name(encoder)
    return kind if kind in _KINDS and kind != "input_ids" else main


def _mel_bins(cfg: Any) -> int:
    """The mel bins of a spectrogram input: the config's count, else :func:`_default_bins`."""
    mel = _find(cfg, "num_mel_bins", "n_mels", "input_feat_size", "feature_size")
    return int(mel) if _is_int(mel) else _default_bins(cfg)


def _default_bins(cfg: Any) -> int:
    """Where the config names no feature count: what the type's feature extractor makes, else 80."""
    return _extractor_features(str(getattr(cfg, "model_type", ""))) or 80


@functools.cache  # an extractor computes its mel filters when built
def _extractor_features(model_type: str) -> int | None:
    """The features a frame has as the type's feature extractor makes them by default (its mel
    bins), for an audio model whose config does not say (Gemma 4's audio tower sizes its input
    projection for 128 bins); looked up by the type, else by the family it names first
    (``gemma4_audio`` -> ``gemma4``)."""
    import transformers
    from transformers.models.auto.feature_extraction_auto import FEATURE_EXTRACTOR_MAPPING_NAMES

    parts = model_type.split("_")
    name = next((n for i in range(len(parts), 0, -1) if (n := FEATURE_EXTRACTOR_MAPPING_NAMES.get("_".join(parts[:i])))),
                None)
    try:
        size = getattr(getattr(transformers, name)(), "feature_size", None) if name else None
    except Exception:  # an extractor that needs a backend or arguments: no answer
        return None
    return int(size) if _is_int(size) and size > 1 else None  # 1: a waveform's extractor


def _channels_last(frames: torch.Tensor) -> torch.Tensor:
    """``(batch, frames, C, H, W)`` as ``(batch, frames, H, W, C)``."""
    return frames.permute(0, 1, 3, 4, 2).contiguous()


def _video(cfg: Any, image: torch.Tensor) -> torch.Tensor:
    """Frames (video models) or an image pair (matching models): ``(batch, frames, C, H, W)``."""
    frames = _find(cfg, "num_frames", "frames_per_clip")
    frames = int(frames) if _is_int(frames) and frames > 0 else 2
    return image.unsqueeze(1).expand(-1, frames, -1, -1, -1).contiguous()


# what a forward's annotation, as written, declares an argument to be: integer tensors
# (``torch.LongTensor``), a list of tensors of any length (``list[torch.Tensor]``, ``tuple[torch.Tensor,
# ...]``; not a fixed pair such as ``(cos, sin)``): multi-level feature maps), a Python int (a count)
_FORMS = (("maps", r"^(typing\.)?([Ll]ist\[torch\.\w*Tensor\]|[Tt]uple\[torch\.\w*Tensor, \.\.\.\])$"),
          ("integers", r"\b(Long|Int)Tensor\b"),
          ("count", r"^int$"))

# an annotation's optional wrapper: ``X | None``, ``Optional[X]``
_OPTIONAL = re.compile(r"^(?:typing\.)?Optional\[(.*)\]$|^(.*) \| None$")


_COUNT = 2  # a Python int argument: a count (of patches, of documents), a few

# "`name` (`torch.LongTensor` of shape `(batch_size * config.n_docs, config.max_combined_length)`"
_DOC_SHAPE = re.compile(r"^\s*(\w+) \(`[^`]*` of shape `\(([^`]*)\)`", re.M)


@dataclasses.dataclass(frozen=True)
class Declared:
    """What a forward declares of its arguments beyond their names: the form its annotation
    gives (:data:`_FORMS`) and the shape its docstring gives, axes as written."""

    forms: Mapping[str, str] = dataclasses.field(default_factory=dict)
    shapes: Mapping[str, str] = dataclasses.field(default_factory=dict)


_DECLARED: dict[type, Declared] = {}  # by class: annotations and docstrings are the class's


def _declared(model: nn.Module) -> Declared:
    cls = type(model)
    if cls not in _DECLARED:
        _DECLARED[cls] = _read_declared(getattr(cls, "forward", None))
    return _DECLARED[cls]


def _read_declared(forward: Any) -> Declared:
    try:
        params = inspect.signature(forward).parameters
    except (TypeError, ValueError):
        return Declared()
    forms: dict[str, str] = {}
    for name, p in params.items():
        text = p.annotation if isinstance(p.annotation, str) else str(p.annotation)
        text = "int" if p.annotation is int else text
        if optional := _OPTIONAL.match(text):
            text = optional.group(1) or optional.group(2)
        form = next((form for form, pattern in _FORMS if re.search(pattern, text)), None)
        if form is not None:
            forms[name] = form
    doc = getattr(forward, "__doc__", None) or ""
    shapes = {m[1]: m[2] for m in _DOC_SHAPE.finditer(doc) if m[1] in params}
    return Declared(forms, shapes)


def _documented_size(shape: str, cfg: Any, inputs: Mapping[str, Any], batch: int, n: int,
                     width: int) -> tuple[int, ...] | None:
    """A docstring's shape in sizes, where every axis is one the example fixes: the batch, the
    text's length, an image's channels and sides, its grid of patches, the width, a config field
    (``config.n_docs`` or bare, ``patch_size``; a length capped at the text's) or a number, and
    products of those; None where an axis is not."""
    image = next((v for k, v in inputs.items() if k.endswith("pixel_values") and isinstance(v, torch.Tensor)
                  and v.dim() == 4), None)
    known: dict[str, int] = {"batch_size": batch, "sequence_length": n, "target_sequence_length": n,
                             "seq_len": n, "hidden_size": _find_int(cfg, "hidden_size", default=width)}
    if image is not None:
        known.update(num_channels=int(image.shape[1]), height=int(image.shape[2]), width=int(image.shape[3]),
                     image_size=int(image.shape[2]))
    known["grid_height"], known["grid_width"] = _patch_side(cfg, inputs)
    sizes: list[int] = []
    for axis in shape.rstrip(", ").split(","):  # ``(batch_size,)``: one axis
        size = 1
        for factor in (f.strip() for f in axis.split("*")):
            value = known.get(factor) if not factor.isdecimal() else int(factor)
            if value is None and re.fullmatch(r"(config\.)?[a-z_]+", factor):  # a config field, named bare or not
                field = _find(cfg, factor.removeprefix("config."))
                value = (min(int(field), n) if factor.endswith("length") else int(field)) if _is_int(field) else None
            if value is None or value < 1:
                return None
            size *= value
        sizes.append(size)
    return tuple(sizes)


def _feature_maps(features: torch.Tensor) -> list[torch.Tensor]:
    """``(batch, positions, width)`` features as a list of one ``(batch, width, side, side)`` map over
    the largest square of positions, the form a pyramid's levels take (SAM 3's DETR encoder and mask
    decoder), so a sequence of the same positions (``side ** 2`` of them) lines up with it."""
    batch, n, width = features.shape
    side = max(1, math.isqrt(int(n)))
    return [features[:, :side * side].transpose(1, 2).reshape(batch, width, side, side).contiguous()]


def _lengths_name(name: str) -> bool:
    """Per-example lengths, by the argument's name: XLM's ``lengths``, the Qwen Omni audio
    encoders' ``feature_lens`` (every row full: :func:`_full_lengths`)."""
    return "length" in name or name.endswith("_lens")


def _merge_sizes(name: str, cfg: Any, inputs: Mapping[str, Any]) -> torch.Tensor | None:
    """VideoLLaMA 3's ``merge_sizes``: each image's spatial merge, one integer per row of the patch
    grid the inputs hold (the config's merge size, else 1, which divides any grid); None for any
    other name or without a grid."""
    grids = [v for k, v in inputs.items() if _grid_axes(k) and isinstance(v, torch.Tensor)]
    if not name.endswith("merge_sizes") or not grids:
        return None
    merge = _find(cfg, "spatial_merge_size", "merge_size")
    return torch.full((len(grids[0]),), int(merge) if _is_int(merge) else 1, dtype=torch.long)


def _by_name(cfg: Any, inputs: dict[str, Any], required: set[str], ids: torch.Tensor, batch: int,
             g: torch.Generator, declared: Declared | None = None) -> None:
    """Required arguments no layout supplies, made from their names: ids and indices, lengths,
    then integer tensors by their annotation (ones: a count of one, a first position; JEV's
    ``marks`` index rows from 1), then float features as wide as the model (masks are added
    separately); an argument declared a list of tensors takes features as maps
    (:func:`_feature_maps`)."""
    forms = (declared or Declared()).forms
    seq = ids.shape[1]
    width = _find_int(cfg, "hidden_size", "d_model", "n_embd", "embed_dim", default=64)
    for name in sorted(required - set(inputs)):
        if name.endswith("mask"):
            continue
        if forms.get(name) == "count":
            inputs[name] = _COUNT
        elif (kinds := _modalities(name, cfg, ids)) is not None:
            inputs[name] = kinds
        elif name.endswith("type_ids"):  # a type or segment index into a small table (token_type_ids'): the first
            inputs[name] = torch.zeros_like(ids)
        elif "ids" in name or name.endswith("_idx") or "index" in name or "indices" in name or name in ("tokens", "input") or \
                name.endswith("_inputs"):  # OneFormer's task_inputs: a (batch, sequence) row per example
            rows = _table_rows(cfg, name)
            inputs[name] = ids.clone() if rows is None else ids % rows
        elif _lengths_name(name):
            inputs[name] = _full_lengths(name, inputs, cfg, batch, seq)
        elif (merges := _merge_sizes(name, cfg, inputs)) is not None:
            inputs[name] = merges
        elif (shown := _image_sizes(name, inputs, batch)) is not None:
            inputs[name] = shown
        elif "mel" in name:
            inputs[name] = torch.randn(batch, seq, _mel_bins(cfg), generator=g)
        elif forms.get(name) == "integers":
            inputs[name] = torch.ones(batch, seq, dtype=torch.long)
        else:  # hidden states, embeddings, latents, robot states...: features as wide as the model
            inputs[name] = _features(name, declared, (batch, seq, width), cfg, inputs, g)


_INDEX_SUFFIX = re.compile(r"_(ids|id|idx|index|indices)$")


def _table_rows(cfg: Any, name: str) -> int | None:
    """Rows of the table an ids argument indexes, where the config sizes it: ``max_<stem>_id`` + 1
    (Mllama's ``aspect_ratio_ids``), ``num_<stem>s`` or ``<stem>_vocab_size``; None for text ids
    and where the config says nothing (meta probes check no index, a CPU run does)."""
    stem = _INDEX_SUFFIX.sub("", name)
    if stem == name or stem.endswith("input") or "token" in stem:
        return None
    top = _find(cfg, f"max_{stem}_id")
    if _is_int(top) and top >= 0:
        return int(top) + 1
    rows = _find(cfg, f"num_{stem}s", f"{stem}_vocab_size")
    return int(rows) if _is_int(rows) and rows > 0 else None


def _modalities(name: str, cfg: Any, ids: torch.Tensor | None) -> torch.Tensor | None:
    """``mm_token_type_ids``: each token's modality, as processors return it (text 0, image 1,
    video 2), read from the image and video tokens in ``ids``; None for any other name."""
    if name != "mm_token_type_ids" or ids is None:
        return None
    kinds = torch.zeros_like(ids)
    for kind, media in ((1, "image"), (2, "video")):
        if _is_int(token := _media_token(cfg, media)):
            kinds[ids == token] = kind
    return kinds


def _image_sizes(name: str, inputs: Mapping[str, Any], batch: int) -> torch.Tensor | None:
    """``image_sizes``: each image's (height, width), as image processors return them, read
    from the images the inputs hold; None for any other name or without images."""
    images = inputs.get("pixel_values")
    if name != "image_sizes" or not isinstance(images, torch.Tensor) or images.dim() < 4:
        return None
    return torch.tensor([list(images.shape[-2:])] * batch, dtype=torch.long)


_SLOT_KINDS = (("pixel", "pixel_values"), ("image", "pixel_values"), ("audio", "input_values"),
               ("wave", "input_values"))


def _slot_kind(model: nn.Module, main: str, params: set[str]) -> str:
    """What the main input holds where the forward has no parameter of its name and the first
    required one says (BridgeTower's vision model inherits ``main_input_name = "input_ids"`` and
    takes ``image``): images or waveforms, not token ids."""
    slot = _main_slot(model, main, params, _required_params(model))
    if not slot or re.search(r"ids|_id$|token|index|codes", slot):  # Inkling's audio_input_ids are ids
        return main
    return next((kind for word, kind in _SLOT_KINDS if word in slot), main)


def _main_slot(model: nn.Module, main: str, params: set[str], required: set[str]) -> str | None:
    """Where the main input goes when the forward has no parameter of that name: its first
    required parameter (a codec's encoder inherits ``main_input_name = "input_values"`` but takes
    ``hidden_states``), so the waveform is not swallowed by ``**kwargs`` while a made-up tensor
    fills the real argument."""
    if main in params:
        return None
    try:
        order = list(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return None
    return next((p for p in order if p in required and not p.endswith("mask")), None)


def _required_params(model: nn.Module) -> set[str]:
    try:
        sig = inspect.signature(model.forward)
    except (TypeError, ValueError):
        return set()
    return {p.name for p in sig.parameters.values()
            if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def _with_masks(name: str, inputs: dict[str, Any], required: set[str],
                params: Collection[str] = ()) -> list[tuple[str, dict[str, Any]]]:
    """Masks the layout lacks, all ones, over (batch, last dim) or (batch, second dim): the required
    ones, else (as later candidates) an optional mask named after an input the layout has."""
    masks = sorted(r for r in required if r.endswith("mask") and r not in inputs)
    optional = sorted(p for p in params if p.endswith("_mask") and p not in inputs and p not in required
                      and any(p == f"{k}_mask" for k in inputs))
    main = next((v for v in inputs.values() if isinstance(v, torch.Tensor) and v.dim() >= 2), None)
    if main is None or not (masks or optional):
        return [(name, inputs)]
    if not masks:
        return [(name, inputs), *_with_masks(name, inputs, set(optional))]
    shapes = list(dict.fromkeys([(main.shape[0], main.shape[-1]), (main.shape[0], main.shape[1])]))
    out = []
    for dtype in (torch.long, torch.bool):
        for i, shape in enumerate(shapes):
            how = ("" if i == 0 else " over dim 1") + ("" if dtype == torch.long else " as bool")
            out.append((f"{name}+{'+'.join(masks)}{how}", {**inputs, **{m: _mask(m, shape, dtype) for m in masks}}))
    return out


_TOKEN_MASKS = frozenset({"attention_mask", "decoder_attention_mask", "encoder_attention_mask"})


def _mask(name: str, shape: tuple[int, int], dtype: torch.dtype) -> torch.Tensor:
    """A required mask of ones; a token mask pads the last quarter of its last row. transformers
    drops a mask without padding in eager and keeps it when exported, so with a full mask the null
    rewrite would compare the exported path with eager's other one (equal only to rounding)."""
    mask = torch.ones(shape, dtype=dtype)
    if name in _TOKEN_MASKS and shape[0] > 1 and shape[1] >= 4:
        mask[-1, shape[1] - shape[1] // 4:] = 0
    return mask


def _grid_axes(name: str) -> int | None:
    """How many numbers a forward argument named ``name`` gives each image's grid of patches, where
    its name says it holds one: Qwen's ``grid_thw`` (t, h, w), MiniCPM's ``target_sizes`` and
    ``tgt_sizes`` (h, w); None for any other name."""
    if name.endswith("grid_thw"):
        return 3
    if name in ("tgt_sizes", "target_sizes"):
        return 2
    return None


def _grid_rows(name: str, side: tuple[int, int], batch: int) -> torch.Tensor:
    """The patch grid argument ``name`` for ``batch`` images of ``side`` patches each, as image
    processors return it: one (t, h, w) or (h, w) row per image."""
    row = [1, *side] if _grid_axes(name) == 3 else list(side)
    return torch.tensor([row] * batch, dtype=torch.long)


def _patch_side(cfg: Any, inputs: Mapping[str, Any]) -> tuple[int, int]:
    """Each image's grid in patches: the image the inputs hold in (batch, channels, height, width)
    over the config's patch size, else the configured image size over it."""
    vc = _vision_cfg(cfg)
    patch = _find_int(vc, "patch_size", default=16)
    images = inputs.get("pixel_values")
    if isinstance(images, torch.Tensor) and images.dim() == 4 and images.shape[-1] % patch == images.shape[-2] % patch == 0:
        return int(images.shape[-2]) // patch, int(images.shape[-1]) // patch
    h, w = _side(_get(vc, "image_size", None), 4 * patch)
    return max(1, h // patch), max(1, w // patch)


def _decoder_inputs(model: nn.Module, cfg: Any, inputs: dict[str, Any], ids: torch.Tensor, params: set[str]) -> None:
    if _get(cfg, "is_encoder_decoder", False) and "decoder_input_ids" in params and "labels" not in params:
        inputs.setdefault("decoder_input_ids", ids.clone())


def _add_labels(model: nn.Module, cfg: Any, inputs: dict[str, Any], ids: torch.Tensor, labels: str,
                params: set[str], batch: int, g: torch.Generator) -> None:
    if "labels" not in params or labels == "none":
        return
    if labels == "class":
        n = _get(cfg, "num_labels", 2) or 2
        inputs["labels"] = torch.randint(0, int(n), (batch,), generator=g)
    elif "input_ids" in inputs and not _get(cfg, "is_encoder_decoder", False):
        ids_in = inputs["input_ids"]
        books = _find(cfg, "num_codebooks")
        if _is_int(books) and books > 1 and ids_in.dim() == 2 and ids_in.shape[0] == batch * books:
            inputs["labels"] = ids_in.reshape(batch, int(books), -1).transpose(1, 2).contiguous()  # (batch, seq, books)
        else:
            inputs["labels"] = ids_in.clone()
    else:
        inputs["labels"] = ids.clone()


# the targets a variance-adaptor speech model (FastSpeech 2) takes in training, which it refuses without
_VARIANCE_LABELS = frozenset({"duration_labels", "pitch_labels", "energy_labels", "spectrogram_labels"})


def _variance_labels(cfg: Any, inputs: dict[str, Any], params: set[str], batch: int, g: torch.Generator) -> None:
    """Each token's frame count, its pitch and energy, and the spectrogram as long as the longest
    row's frames: what teacher forcing reads in training (eval mode predicts them and ignores these)."""
    ids = inputs.get("input_ids")
    if not params >= _VARIANCE_LABELS or not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        return
    tokens = ids.shape[1]
    durations = torch.randint(1, 4, (batch, tokens), generator=g)
    mel = _find(cfg, "num_mel_bins", "n_mels")
    frames = int(durations.sum(dim=1).max())
    inputs.setdefault("duration_labels", durations)
    inputs.setdefault("pitch_labels", torch.randn(batch, tokens, 1, generator=g))
    inputs.setdefault("energy_labels", torch.randn(batch, tokens, 1, generator=g))
    inputs.setdefault("spectrogram_labels", torch.randn(batch, frames, int(mel) if _is_int(mel) else 80, generator=g))


def _forward_params(model: nn.Module) -> set[str]:
    try:
        return set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return set()


def _asked_in_training(model: nn.Module, inputs: Mapping[str, Any]) -> list[str]:
    """Optional forward arguments the model asks for in training mode only: inputs that run in
    eval mode but not in the training captures of ``--to identity`` and the training loop."""
    model.train()
    try:
        why = _probe(model, inputs)
    finally:
        model.eval()
    return _asked_for(model, inputs, why) if why is not None else []


# forward arguments that stand in for another input or steer the output: never made up
_NOT_ASKED = {"kwargs", "args", "return_dict", "output_attentions", "output_hidden_states", "use_cache", "cache",
              "past_key_values", "inputs_embeds", "decoder_inputs_embeds", "encoder_outputs", "labels",
              "return_loss", "interpolate_pos_encoding", "logits_to_keep", "cache_position", "position_ids",
              "head_mask", "decoder_head_mask", "cross_attn_head_mask"}


def _asked_for(model: nn.Module, inputs: Mapping[str, Any], why: str) -> list[str]:
    """Optional forward arguments the failure names ("You have to specify bbox", "`visual_feats`
    cannot be `None`", the line ``batch = states.shape[0]`` that read one as None)."""
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", why))
    params = _forward_params(model) - set(inputs) - _NOT_ASKED
    if "'NoneType' object has no attribute" in why:  # the statement read one as None: it is the input
        params |= {p for p in _forward_params(model) - set(inputs) if re.search(rf"\b{p}\.\w", why)}
    statement = (_statement(why) or "") if "NoneType" in why else ""
    # a None the statement read under a longer name: a helper's parameter bound to the argument
    # (BLT's ``patch_reduce(hidden_states, max_num_patches, ...)`` given ``num_patches``)
    # names the statement reads, not attributes (``self.cached_causal_mask``) nor an argument's own
    read = set(re.findall(r"(?<![\w.])[A-Za-z_]\w*", statement)) - _forward_params(model)
    words |= {p for p in params if any(w.endswith(f"_{p}") for w in read)}
    asked = sorted({p for p in params if p in words or p.removeprefix("decoder_") in words})  # a decoder's input_ids
    # where the message says which is missing, that one only ("Multimodal data was passed (via
    # `image_grid_thw` or `video_grid_thw`) but `mm_token_type_ids` is missing": no video grid)
    missing = [p for p in asked if re.search(rf"`?\b{p}\b`? (is|are) missing|missing `?\b{p}\b", why)]
    asked = missing or asked
    if not asked and "'NoneType'" in why and "attention_mask" in params:
        asked = ["attention_mask"]  # an unnamed None where a tensor was due: the mask most code assumes
    return asked


def _named_inputs(names: list[str], cfg: Any, inputs: Mapping[str, Any], batch: int, seq: int,
                  seed: int, declared: Declared | None = None) -> dict[str, Any]:
    """Inputs made from their names, sized by the config field named after them where there is
    one (``visual_feats`` -> ``visual_feat_dim``, ``encoder_hidden_states`` ->
    ``encoder_hidden_size``): a count where the forward declares a Python int (a few: BLT's
    ``num_patches``), a shape its docstring gives in config fields (RAG's retrieved documents,
    ``(batch_size * config.n_docs, config.max_combined_length)``), boxes, positions, masks, lengths,
    ids and time steps, then features (as maps where it declares a list of tensors)."""
    declared = declared or Declared()
    forms = declared.forms
    g = torch.Generator().manual_seed(seed + 1)
    ids = next((v for k, v in inputs.items() if k.endswith("input_ids") and isinstance(v, torch.Tensor)), None)
    n = int(ids.shape[1]) if ids is not None and ids.dim() == 2 else seq
    width = _find(cfg, "hidden_size", "d_model", "n_embd", "embed_dim")
    width = int(width) if _is_int(width) else SMALL_DEFAULTS["width"]

    sizes: dict[str, int] = {}  # "<prefix>_dim" / "<prefix>_size" fields of the whole config tree
    for _, c in _paths(cfg):
        for k, v in vars(c).items():
            if _is_int(v) and 0 < v <= 4096 and k.endswith(("_dim", "_size")):
                sizes.setdefault(k.rsplit("_", 1)[0], int(v))

    def dim(name: str, default: int) -> int:
        """The field whose prefix is the longest prefix of the name (act_dim for actions)."""
        fits = [p for p in sizes if len(p) >= 3 and name.startswith(p)]
        return sizes[max(fits, key=len)] if fits else default

    out: dict[str, Any] = {}
    for name in names:
        low = name.lower()
        documented = declared.shapes.get(name, "")
        if forms.get(name) == "count":
            out[name] = _COUNT
        elif "config." in documented and (size := _documented_size(documented, cfg, inputs, batch, n, width)):
            if low.endswith("mask") and len(size) == 2:
                out[name] = _mask(name, (size[0], size[1]), torch.long)
            elif forms.get(name) == "integers" or _INDEX_SUFFIX.search(name):
                out[name] = torch.randint(0, _find_int(cfg, "vocab_size", default=2), size, generator=g)
            else:
                out[name] = torch.randn(size, generator=g)
        elif low == "flattened_patches":  # Pix2Struct: each patch row is (row id, column id, pixels)
            out[name] = _flattened_patches(cfg, batch, g)
        elif low in ("bbox", "boxes", "bboxes"):
            lo = torch.randint(0, 500, (batch, n, 2), generator=g)
            out[name] = torch.cat([lo, lo + torch.randint(1, 500, (batch, n, 2), generator=g)], dim=-1)
        elif low == "image_attention_mask" and isinstance(images := inputs.get("pixel_values"), torch.Tensor) \
                and images.dim() == 5:  # IDEFICS: which of each example's images every text position sees
            out[name] = torch.ones(batch, n, images.shape[1], dtype=torch.long)
        elif low == "pixel_attention_mask" and isinstance(images := inputs.get("pixel_values"), torch.Tensor) \
                and images.dim() == 5:  # PI0: which of each example's images (camera views) are present
            out[name] = torch.ones(batch, images.shape[1], dtype=torch.bool)
        elif (shown := _image_sizes(name, inputs, batch)) is not None:
            out[name] = shown
        elif (kinds := _modalities(name, cfg, ids)) is not None:
            out[name] = kinds
        elif _grid_axes(name):  # each image's grid of patches, read from its pixels (or the config)
            images = inputs.get("pixel_values")
            count = int(images.shape[0]) if isinstance(images, torch.Tensor) and images.dim() == 4 else batch
            out[name] = _grid_rows(name, _patch_side(cfg, inputs), count)
        elif (merges := _merge_sizes(low, cfg, {**inputs, **out})) is not None:
            out[name] = merges
        elif low.endswith("mask"):
            out[name] = _mask(name, (batch, n), torch.long)
        elif _lengths_name(low):
            out[name] = _full_lengths(name, inputs, cfg, batch, seq)
        elif low.endswith(("ids", "index", "indices", "timesteps", "steps")):
            out[name] = torch.zeros(batch, n, dtype=torch.long)
        elif low.endswith("_pos") or low.endswith("positions"):
            out[name] = torch.rand(batch, n, dim(name, 4), generator=g)
        elif low.endswith(("to_go", "rewards", "reward", "returns")):
            out[name] = torch.randn(batch, n, 1, generator=g)
        elif "mel" in low:  # Gemma 3n's audio_mel: frames of mel bins
            out[name] = torch.randn(batch, n, _mel_bins(cfg), generator=g)
        else:
            out[name] = _features(name, declared, (batch, n, dim(name, width)), cfg, inputs, g)
    return out


def _features(name: str, declared: Declared | None, size: tuple[int, int, int], cfg: Any,
              inputs: Mapping[str, Any], g: torch.Generator) -> Any:
    """Float features of ``size`` (batch, positions, width): as maps where the forward declares a
    list of tensors; in the shape its docstring gives where that shape is known and says more
    than a sequence of vectors: another rank, or a config field (UnlimitedOCR's vision encoder
    takes ``(batch_size, hidden_size, grid_height, grid_width)`` patch embeddings)."""
    declared = declared or Declared()
    documented = declared.shapes.get(name, "")
    shape = _documented_size(documented, cfg, inputs, size[0], size[1], size[2]) if documented else None
    if shape is not None and (len(shape) != 3 or "config." in documented):
        return torch.randn(shape, generator=g)
    features = torch.randn(size, generator=g)
    return _feature_maps(features) if declared.forms.get(name) == "maps" else features


def _flattened_patches(cfg: Any, batch: int, g: torch.Generator) -> torch.Tensor:
    """Pix2Struct's input: a 4 x 4 grid of patches, each row its 1-based row and column ids (0
    marks padding) followed by its ``patch_embed_hidden_size`` pixel values."""
    width = _find(cfg, "patch_embed_hidden_size")
    if not _is_int(width):
        patch, chans = _find(cfg, "patch_size"), _find(cfg, "num_channels")
        width = (int(patch) if _is_int(patch) else 16) ** 2 * (int(chans) if _is_int(chans) else 3)
    side = 4
    rows, cols = torch.meshgrid(torch.arange(1, side + 1), torch.arange(1, side + 1), indexing="ij")
    ids = torch.stack([rows.flatten(), cols.flatten()], dim=-1).float().expand(batch, -1, -1)
    return torch.cat([ids, torch.randn(batch, side * side, int(width), generator=g)], dim=-1)


def _full_lengths(name: str, inputs: Mapping[str, Any], cfg: Any, batch: int, seq: int) -> torch.Tensor:
    """Per-example lengths that cover every row of the main input: its token ids, else its feature
    frames, in waveform samples (frames times ``hop_length``) where the argument counts samples.
    dots.3's audio encoder, given ``seq`` samples for 64 frames, kept one valid frame after
    downsampling, and attention over one key."""
    ids = next((v for k, v in inputs.items() if k.endswith("input_ids") and isinstance(v, torch.Tensor)), None)
    steps = int(ids.shape[-1]) if ids is not None else _time_steps(inputs, cfg, seq)
    hop = _find(cfg, "hop_length")
    if ids is None and "sample" in name and _is_int(hop):
        steps *= int(hop)
    return torch.full((batch,), steps, dtype=torch.long)


def _time_steps(inputs: Mapping[str, Any], cfg: Any, default: int) -> int:
    """The length of the main float input's time axis: its last axis that is not the feature
    axis (dots.3's audio encoder takes (batch, 128 mel bins, frames))."""
    main = next((v for v in inputs.values() if isinstance(v, torch.Tensor) and v.is_floating_point() and v.dim() >= 2), None)
    if main is None:
        return default
    mel = _find(cfg, "num_mel_bins", "n_mels", "input_feat_size", "feature_size")
    return next((int(x) for x in reversed(main.shape[1:]) if int(x) != mel), default)


def _default_language(model: nn.Module, cfg: Any) -> None:
    """Models with per-language adapters (X-MOD) refuse to run until a language is chosen."""
    setter = getattr(model, "set_default_language", None)
    languages = _get(cfg, "languages")
    if callable(setter) and languages:
        with contextlib.suppress(Exception):
            setter(list(languages)[0])
