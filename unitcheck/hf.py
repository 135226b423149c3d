"""Hugging Face architectures built from their config classes with random weights (no download).

``hf:<model_type>`` builds any architecture in transformers' config mapping at a small size (2
layers, width 64); ``--set key=value`` overrides config fields (``text_config.hidden_size=32``
reaches into a sub-config).

Shrinking a default config field by field breaks the relations the architecture needs (a rotary
dimension larger than the new head, an embedding wider than the hidden size, a per-layer list
longer than the layer count), so the config is rebuilt through its own class: size fields are
scaled by one factor per (sub-)config, fields the class derives (``head_dim``, ``intermediate_size``
...) are left for it to derive again, and per-layer lists keep the first two layers of each kind.
Several plans, from smallest to the unchanged default, are tried in order with every head the type
has (loss-returning heads first) and every input layout its forward could take (from
``main_input_name``: token ids, images, audio features or waveforms, image-text pairs, forecasting
windows; ``labels`` where the head computes a loss); the first candidate whose forward pass runs on
fake meta tensors, the way ``torch.export`` runs it, is built.

>>> model, inputs = build("gpt2", {"n_layer": 2})     # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import difflib
import functools
import importlib
import importlib.util
import inspect
import itertools
import math
import os
import re
import time
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import torch
from torch import nn

from .errors import UnitcheckError
from .quiet import quiet_loggers
from .validate import check_override

__all__ = ["build", "HFError", "SMALL_DEFAULTS", "parse_value", "make_config", "resolve_type", "model_types", "Built"]


class HFError(UnitcheckError, ValueError):
    """A bad model type, a bad config key or value, a type that cannot be built, or transformers missing."""


class OverrideError(HFError):
    """A ``--set`` the config cannot take (no such field, a value out of its choices): the user's
    error, whatever the size plan, so no other plan is tried."""


# The sizes a shrunk model aims at: each (sub-)config's main width becomes WIDTH and every size
# field scales with it; attention gets HEADS heads of HEAD_DIM; stacks get LAYERS layers.
SMALL_DEFAULTS: dict[str, Any] = {
    "layers": 2,
    "width": 64,
    "heads": 4,
    "kv_heads": 2,
    "head_dim": 16,
    "vocab": 128,
    "positions": 128,
    "experts": 4,
    "experts_per_token": 2,
    "image_patch": 8,
    "image_size": 32,
    "audio_positions": 32,
    "frames": 4,
    "mask_span": 2,
    "decode_steps": 16,
}

_BUDGET_S = 60.0  # plan search stops trying alternatives after this long (the first build is kept)


def parse_value(text: str) -> Any:
    """``--set`` values: ints, floats, booleans, None, lists of them in brackets (``[4,4]``),
    else the string itself."""
    low = text.strip().lower()
    if low.startswith("[") and low.endswith("]"):
        inner = text.strip()[1:-1]
        return [parse_value(item) for item in inner.split(",")] if inner.strip() else []
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    names = ("transformers", "torchao", "torch.utils._pytree", "torch", "torch._subclasses.fake_tensor")
    # the meta probe's failures are expected: fake-tensor dispatch logs them at ERROR
    with quiet_loggers(names):
        yield


def _transformers() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        with _quiet():
            import transformers

            # transformers imports torchao (where installed) with its auto mappings; torchao's
            # import logs a warning for every kernel library this build cannot load, which would
            # turn a one-line error into several
            if importlib.util.find_spec("torchao") is not None:
                with contextlib.suppress(Exception):
                    importlib.import_module("torchao")
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise HFError("hf: models need the 'hf' extra: pip install 'unitcheck[hf]'") from err
    return transformers


# -- model types ----------------------------------------------------------------------------


def model_types() -> list[str]:
    """Every model type in transformers' config mapping."""
    _transformers()
    from transformers import CONFIG_MAPPING

    return sorted(CONFIG_MAPPING.keys())


def resolve_type(name: str) -> str:
    """The config-mapping key for ``name``; an unknown name suggests the nearest ones."""
    types = model_types()
    if name in types:
        return name
    norm = name.lower().replace("_", "-")
    spelled = {t.lower().replace("_", "-"): t for t in types}
    close = difflib.get_close_matches(norm, list(spelled), n=3, cutoff=0.75)
    hint = f" (did you mean {', '.join(spelled[c] for c in close)}?)" if close else ""
    raise HFError(f"unknown Hugging Face model type {name!r}{hint}")


# -- shrinking a config -----------------------------------------------------------------------

_WIDTH_KEYS = ("hidden_size", "d_model", "n_embd", "embed_dim", "dim", "hidden_dim", "width", "emb_dim", "embedding_dim")
_WIDTH_SUFFIX = (
    "hidden_size", "hidden_dim", "d_model", "n_embd", "embed_dim", "emb_dim", "embedding_size", "embedding_dim",
    "intermediate_size", "ffn_dim", "d_ff", "n_inner", "mlp_dim", "bottleneck_size", "lora_rank", "proj_dim",
    "projection_dim", "d_inner", "inner_dim", "conv_dim", "hidden_sizes", "embed_dims", "out_channels",
    "hidden_channels", "stage_out_channels", "filter_size", "fpn_dim", "expert_dim", "inner_size", "intermediate_dim",
    "_dim",
)
_WIDTH_EXACT = {"dim", "width", "channels", "d_inner", "in_channels_list"}
_HEAD_DIM_SUFFIX = ("head_dim", "head_size", "d_kv", "kv_channels", "dim_head", "rotary_dim", "rope_dim", "rope_head_dim",
                    "nope_head_dim", "v_head_dim", "qk_head_dim")
_NOT_SIZE = ("vocab", "position", "max_", "patch", "image", "kernel", "window", "stride", "mel", "label", "token",
             "num_channels", "sampling", "sample_rate", "bucket", "distance", "frames", "chunk", "codebook_size")
_LAYER_EXACT = {"num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers",
                "num_encoder_layers", "num_decoder_layers", "depth", "layers", "decoder_num_layers", "encoder_num_layers",
                "num_blocks", "text_layers", "vision_layers", "num_text_layers", "num_vision_layers"}
_LAYER_LISTS = ("depths", "blocks_per_stage", "num_layers_per_stage", "layers_per_stage")
_EXPERTS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "num_routed_experts")
_EXPERTS_PER_TOKEN = ("num_experts_per_tok", "moe_topk", "num_selected_experts", "experts_per_token", "moe_k",
                      "num_experts_per_token", "top_k", "router_top_k")


def _get(obj: Any, key: str, default: Any = None) -> Any:
    """``getattr`` that never raises: some configs refuse to read per-layer fields globally."""
    try:
        return getattr(obj, key, default)
    except Exception:
        return default


def _has(obj: Any, key: str) -> bool:
    """``hasattr`` that never raises: a heterogeneous config (Gemma 4) refuses to read a per-layer
    field globally with an error that is not an AttributeError; such a field is not ours to fill."""
    try:
        getattr(obj, key)
    except Exception:
        return False
    return True


def _is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _int_list(v: Any) -> TypeGuard[list[int] | tuple[int, ...]]:
    return isinstance(v, (list, tuple)) and len(v) > 0 and all(_is_int(x) for x in v)


def _round(v: float, multiple: int = 8, floor: int = 8) -> int:
    return max(floor, int(round(v / multiple)) * multiple)


def _pow2_at_most(n: int, cap: int) -> int:
    out = 1
    while out * 2 <= min(n, cap):
        out *= 2
    return out


def _declared(cls: type) -> dict[str, Any]:
    """Each dataclass field's declared default (``dataclasses.MISSING`` when it has none)."""
    out: dict[str, Any] = {}
    if not dataclasses.is_dataclass(cls):
        return out
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            out[f.name] = "<factory>"
        else:
            out[f.name] = dataclasses.MISSING
    return out


@dataclass(frozen=True)
class Plan:
    """How far a config is shrunk: each later plan gives up a kind of change the earlier broke."""

    name: str
    widths: bool = True  # scale sizes, heads and head dims
    head_dims: bool = True  # False: keep each head's dim (model code that hard-codes rotary sections)
    vocab: bool = True
    layers: bool = True
    extras: bool = True  # experts, images, audio positions


PLANS = (
    Plan("small"),
    Plan("small-vocab-kept", vocab=False),
    Plan("small-inputs-kept", extras=False),
    Plan("small-head-dims-kept", head_dims=False),
    Plan("layers-only", widths=False, extras=False),
    Plan("default", widths=False, vocab=False, layers=False, extras=False),
)


def _subconfigs(cfg: Any) -> dict[str, Any]:
    from transformers import PretrainedConfig

    return {k: v for k, v in vars(cfg).items() if isinstance(v, PretrainedConfig) and not k.startswith("_")}


def _projecting_tower(cfg: Any) -> tuple[int, int] | None:
    """(its width, the width it projects into) of a vision tower that names the text width it
    merges into ``hidden_size`` and its own ``embed_dim`` (Qwen2-VL's: 1280 wide in 16 heads,
    merged into 3584). Its heads divide embed_dim: scaled by the text width's ratio, it kept 24
    (6 per head, fewer than its rotary embedding's pairs)."""
    tower = _get(cfg, "embed_dim")
    heads = next((v for k in ("num_attention_heads", "num_heads") if (v := _get(cfg, k)) is not None), None)
    out = _get(cfg, "hidden_size")
    if _is_int(tower) and _is_int(heads) and heads > 0 and tower % heads == 0 and tower >= SMALL_DEFAULTS["width"] \
            and _is_int(out) and out > tower:
        return int(tower), int(out)
    return None


def _main_width(cfg: Any) -> int | None:
    if (tower := _projecting_tower(cfg)) is not None:
        return tower[0]
    for key in _WIDTH_KEYS:
        v = _get(cfg, key)
        if _is_int(v) and v > 0:
            return int(v)
    return None


def _collect_widths(cfg: Any, plan: Plan, out: dict[int, int]) -> None:
    """Original main width -> new width over the whole config tree: a field in one sub-config that
    equals another's width (a projector's input, a Q-Former's ``encoder_hidden_size``) follows it."""
    w = _main_width(cfg)
    heads = next((int(v) for k in ("num_attention_heads", "num_heads", "n_head", "n_heads")
                  if _is_int(v := _get(cfg, k)) and v > 0), None)
    target = SMALL_DEFAULTS["width"]
    if not plan.head_dims and w and heads:
        target = max(target, _pow2_at_most(heads, SMALL_DEFAULTS["heads"]) * (w // heads))
    if w is not None and plan.widths and w > target:
        out.setdefault(w, target)
        if (tower := _projecting_tower(cfg)) is not None:
            out.setdefault(tower[1], target)  # the width it merges into: the text model's, at the target
        for key, v in _declared_values(cfg).items():  # its stages' widths, scaled as its own
            if key.lower().endswith("_per_stage") and _width_like(key.lower()) and _int_list(v):
                for x in v:
                    out.setdefault(int(x), _round(x * target / w))
    coefficient = _get(cfg, "width_coefficient")
    if plan.widths and isinstance(coefficient, float) and coefficient > 1:  # as _shrink_field builds the base network
        for key, v in _declared_values(cfg).items():
            if key.lower().endswith("out_channels") and _int_list(v):
                for x in v:
                    out.setdefault(_round(x * coefficient), int(x))  # what a projection of its stages takes
    if w is None and plan.widths:  # a backbone's stage widths, scaled as shrink_kwargs scales them
        sizes = next((v for k in ("hidden_sizes", "embed_dims") if _int_list(v := _get(cfg, k))), None)
        if sizes and max(sizes) > 2 * SMALL_DEFAULTS["width"]:
            ratio = 2 * SMALL_DEFAULTS["width"] / max(sizes)
            for x in sizes:
                out.setdefault(int(x), _round(x * ratio))
    for sub in _subconfigs(cfg).values():
        _collect_widths(sub, plan, out)


@dataclass
class _Shrink:
    plan: Plan
    widths: dict[int, int]
    vocab_map: dict[str, int] = field(default_factory=dict)
    # the shortest stack whose equally long lists are read as one entry per layer: shorter lists
    # of that length are usually not per layer (a 4-element image mean), unless a validator says
    # they are (MuseSpark's audio pyramid: patch_sizes, hidden_sizes, depths per stage, 4 stages)
    min_stack: int = 5


def _layer_count(cfg: Any) -> tuple[str, int] | None:
    for key in ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "depth", "decoder_layers", "encoder_layers"):
        v = _get(cfg, key)
        if _is_int(v) and v > 0:
            return key, int(v)
    return None


def _run_length_layers(value: Any, n: int) -> list[Any] | None:
    """A per-layer pattern written as runs, ``[[kinds, repeats], ...]`` (GPT-Neo's
    ``attention_types``), expanded, when it expands to exactly ``n`` layers."""
    if not (isinstance(value, (list, tuple)) and value):
        return None
    out: list[Any] = []
    for run in value:
        if not (isinstance(run, (list, tuple)) and len(run) == 2 and isinstance(run[0], (list, tuple))
                and _is_int(run[1]) and run[1] > 0):
            return None
        out.extend(list(run[0]) * int(run[1]))
    return out if len(out) == n else None


def _layer_pattern(value: Any) -> bool:
    """Whether a string may be one character per layer (Nemotron-H's ``M-M-M*``): a few kinds
    repeated, not a word that happens to be as long as the stack (BigBird's ``block_sparse`` with
    12 layers was cut to ``block_sp``)."""
    return isinstance(value, str) and len(set(value)) <= max(2, len(value) // 2)


def _keep_layers(values: list[Any], n: int) -> list[int]:
    """Indices of the layers kept: the first two of each kind (a layer kind that shares weights
    across its layers needs two), then the earliest, at least ``n``."""
    keep: list[int] = []
    seen: list[Any] = []
    for i, v in enumerate(values):
        if seen.count(v) < 2:
            seen.append(v)
            keep.append(i)
    for i in range(len(values)):
        if len(keep) >= n:
            break
        if i not in keep:
            keep.append(i)
    return sorted(keep)


def _collect_necks(cfg: Any, plan: Plan, out: dict[int, int]) -> None:
    """After the main widths (which win where they are equal): a tower's neck width
    (``output_channels``), which a parent config reads (SLANeXt's ``post_conv_in_channels`` is
    its SAM tower's 256-channel neck), scaled as the tower's own width."""
    w, neck = _main_width(cfg), _get(cfg, "output_channels")
    if plan.widths and w and w > SMALL_DEFAULTS["width"] and _is_int(neck) and neck > 16:
        out.setdefault(int(neck), _round(neck * SMALL_DEFAULTS["width"] / w))
    for sub in _subconfigs(cfg).values():
        _collect_necks(sub, plan, out)


def shrink_kwargs(cfg: Any, shrink: _Shrink, nested: bool = False) -> dict[str, Any]:
    """Constructor keyword arguments for a smaller config of the same class (sub-configs as dicts;
    ``nested``: ``cfg`` is one, whose layers its parent may name)."""
    plan = shrink.plan
    declared = _declared(type(cfg))
    values = _declared_values(cfg)
    subs = _subconfigs(cfg)
    out: dict[str, Any] = {}
    width = _main_width(cfg)
    list_width = None
    if width is None:
        for key in ("hidden_sizes", "embed_dims", "hidden_size", "channels"):
            v = values.get(key)
            if _int_list(v):
                list_width = max(v)
                break
    heads0 = next((int(values[k]) for k in ("num_attention_heads", "num_heads", "n_head", "n_heads",
                                            "encoder_attention_heads", "decoder_attention_heads")
                   if _is_int(values.get(k)) and values[k] > 0), None)
    head_dims = [int(v) for k, v in values.items() if _is_int(v) and v > 0 and k.endswith(("head_dim", "d_kv", "kv_channels", "head_size", "dim_head"))]
    if width and heads0:
        head_dims.append(width // heads0)
    new_heads = _pow2_at_most(heads0, SMALL_DEFAULTS["heads"]) if heads0 and plan.widths else heads0
    target = SMALL_DEFAULTS["width"]
    if not plan.head_dims and width and heads0 and new_heads:
        target = max(target, new_heads * (width // heads0))  # as many heads as "small", each as wide as before
    ratio = 1.0
    if plan.widths:
        if width is not None and width > target:
            ratio = target / width
        elif list_width is not None and list_width > 2 * SMALL_DEFAULTS["width"]:
            ratio = 2 * SMALL_DEFAULTS["width"] / list_width
    head_ratio = 1.0
    if plan.widths and plan.head_dims and head_dims and max(head_dims) > SMALL_DEFAULTS["head_dim"]:
        head_ratio = SMALL_DEFAULTS["head_dim"] / max(head_dims)

    # per-layer lists: keep one layer of each kind, the same layers in every list
    layer = _layer_count(cfg)
    keep: list[int] | None = None
    stages: list[int] | None = None
    if plan.layers and layer and layer[1] > SMALL_DEFAULTS["layers"]:
        n0 = layer[1]
        # derived lists too (layer_types from a pattern): resampled explicitly, they stay aligned
        # with the new layer count whatever rule the class derives them by
        per_layer = [k for k, v in values.items() if (isinstance(v, (list, tuple)) or _layer_pattern(v))
                     and len(v) == n0 and n0 >= shrink.min_stack]
        runs = {k: ex for k, v in values.items() if (ex := _run_length_layers(v, n0)) is not None}
        if runs:  # the count a run pattern is checked against, by the name the config stores it under
            layer = ((getattr(cfg, "attribute_map", None) or {}).get(layer[0], layer[0]), n0)
        keep = list(range(SMALL_DEFAULTS["layers"]))
        for layers in [*(list(values[k]) for k in per_layer), *runs.values()]:
            keep = sorted(set(keep) | set(_keep_layers(layers, SMALL_DEFAULTS["layers"])))
        keep = keep[: max(SMALL_DEFAULTS["layers"], min(len(keep), 8))]
        outs = values.get("out_indices", values.get("_out_indices"))
        if _int_list(outs) and _get(cfg, "stage_names") and len(keep) < max(outs) <= n0:
            # a backbone (one stage per layer) whose outputs name stages the shrunk stack lacks: the
            # outputs follow the shrink where they stay distinct stages (DINOv2's last layer) and no
            # parent config names its layers, else it keeps as many layers as its last output
            # (LW-DETR reads stages 2, 4, 5 and 9; DepthPro's parent hooks layers 5 and 11)
            mapped = [round(x * len(keep) / n0) for x in outs]
            if not nested and len(set(mapped)) == len(mapped) and min(mapped) >= 1:
                stages = mapped
            else:
                keep = sorted(set(keep) | set(range(max(outs))))
    else:
        per_layer, runs = [], {}
    n_layers = len(keep) if keep is not None else None

    for key, value in values.items():
        decl = declared.get(key, dataclasses.MISSING)
        if key in subs:
            if value is not None:
                sub = _without_timm(subs[key])
                kw = shrink_kwargs(sub, shrink, nested=True)
                kw["model_type"] = getattr(sub, "model_type", "")
                out[key] = kw
            continue
        if key in ("use_timm_backbone", "use_pretrained_backbone") and value:
            out[key] = False  # a backbone from transformers itself, random weights: no timm, no download
            continue
        if value is None and key in ("image_token_id", "image_token_index", "video_token_id", "video_token_index") \
                and plan.vocab:
            # image-text models whose default leaves the placeholder token unset (BLIP-2, InstructBLIP-Video):
            # a slot of its own at the top of the vocabulary, one for images and one for videos
            out[key] = _remap_tokens(key, SMALL_DEFAULTS["vocab"] * 1000 + ("video" in key), shrink)
            continue
        if value is None and key == "prediction_length":
            # forecasting configs leave the horizon unset and refuse to build without one; the context
            # it also sizes holds the decoder's label window (Autoformer's label_length, 10)
            label = values.get("label_length")
            out[key] = max(8, label if _is_int(label) and values.get("context_length") is None else 0)
            continue
        if value is None and key.lower() in ("n_shared_experts", "num_shared_experts") and values.get("moe_intermediate_size"):
            out[key] = 1
            continue
        if value is None and key.lower() in _EXPERTS + _EXPERTS_PER_TOKEN and any(
                values.get(k) is not None for k in ("moe_intermediate_size", "expert_intermediate_size")):
            # some default configs leave the expert counts unset and cannot be instantiated
            out[key] = SMALL_DEFAULTS["experts" if key.lower() in _EXPERTS else "experts_per_token"]
            continue
        low = key.lower()
        kv_like = "key_value_heads" in low or "kv_heads" in low or low in ("num_query_groups", "multi_query_group_num")
        if low.lstrip("_") in ("out_features", "out_indices"):
            out[key.lstrip("_")] = value  # a backbone's outputs, set by the model that uses it: not derived
            continue
        if value is None or isinstance(value, bool):
            continue
        if key in runs and keep is not None:  # one run per kept layer, in order
            out[key] = [[[runs[key][i]], 1] for i in keep]
            continue
        new = _shrink_field(key, low, value, values, shrink, ratio=ratio, head_ratio=head_ratio, heads0=heads0,
                            new_heads=new_heads, layer=layer, keep=keep, n_layers=n_layers)
        layer_indices = keep is not None and _int_list(value) and _int_list(new) and list(new) != list(value) \
            and low.endswith(("indexes", "indices", "layer_ids", "layer_idx"))  # layers read, not layer kinds
        if decl is None and not kv_like and "rope" not in low and key not in per_layer and not layer_indices and (
                new is _SAME or not (_int_list(value) and _width_list(low) or low == "image_size")):
            # the class derives it (head_dim, layer_types, intermediate_size...): derive again; but
            # stage widths or an image size the class fills with constants when unset are shrunk
            # here, or they keep their full size beside shrunk widths (Hiera's embed_dim_per_stage),
            # and so are indices of layers read, mapped onto the kept layers (Mllama's tower derives
            # its ``intermediate_layers_indices`` as constants, [3, 7, 15, 23, 30] of two layers);
            # lists of layers of another kind (``cross_attention_layers``, one in five) are derived
            # again: mapped, they made every kept layer of that kind
            out[key] = None
        elif new is not _SAME:
            out[key] = new
    fourier, neck = values.get("num_pos_feats"), values.get("output_channels")
    if _is_int(fourier) and _is_int(neck) and 2 * fourier == neck and _is_int(out.get("output_channels")):
        # the sines and cosines of that many features make the width they are added to (SAM's
        # neck): half the shrunk width, as half the full one
        out["num_pos_feats"] = out["output_channels"] // 2
    if nested:  # rebuilt from these alone, the sub-config would take its class's defaults
        out.update(_set_by_parent(cfg, out, subs))
    _follow_sibling_layers(values, subs, out)
    if stages is not None and layer is not None and out.get(layer[0]) == n_layers:
        # only where the stack really shrank (Swin's derived stage count stays at four)
        out["out_indices"], out["out_features"] = stages, [f"stage{i}" for i in stages]
    if plan.widths:
        _rescale_rope_sections(values, out, new_heads)
    return out


def _set_by_parent(cfg: Any, out: Mapping[str, Any], subs: Mapping[str, Any]) -> dict[str, Any]:
    """The flags, names and constants a sub-config holds unlike a default instance of its class,
    where the shrink left them alone: what its parent's default set (ZoeDepth's backbone returns
    hidden states unreshaped, CHMv2's returns its class tokens, a decoder is a decoder, Mistral 3's
    text model has its own rope theta). Sizes are the shrink's to choose, so no int is taken, nor
    a name that picks a preset architecture (HGNetV2's ``arch``: PP-DocLayout-V2's backbone took
    the large preset's stages over its shrunk ones)."""
    try:
        fresh = vars(type(cfg)())
    except Exception:  # a class that cannot be built alone: nothing to compare with
        return {}
    skip = {*out, *subs, "transformers_version", "architectures", "model_type"}
    kept: dict[str, Any] = {k: v for k, v in vars(cfg).items() if k not in skip and not k.startswith("_") and "arch" not in k
            and isinstance(v, (bool, str, float)) and (k not in fresh or not _equal(fresh[k], v))}
    # and the stages a backbone returns, which its parent chose (UperNet reads all four of its
    # ResNet's; rebuilt from its class's default, the backbone returned its last alone)
    stages = getattr(cfg, "out_features", None)
    if "out_features" not in skip and "out_indices" not in skip and isinstance(stages, list) and stages \
            and all(isinstance(x, str) for x in stages) and not _equal(fresh.get("_out_features"), stages):
        kept["out_features"] = list(stages)
    return kept


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # values whose comparison is not a bool (tensors)
        return a is b


def _without_timm(sub: Any) -> Any:
    """A timm backbone (timm is not a dependency) becomes transformers' own ResNet with the same
    output stages; detection models accept any backbone config."""
    if getattr(sub, "model_type", "") != "timm_backbone":
        return sub
    indices = list(_get(sub, "out_indices") or [4])
    return CONFIG_MAPPING_CLS("resnet")(out_indices=indices, num_channels=_get(sub, "num_channels") or 3)


def _rescale_rope_sections(values: Mapping[str, Any], out: dict[str, Any], new_heads: int | None) -> None:
    """Multimodal rotary sections (``mrope_section``) must add up to half the rotary head dim: scale
    them with the head dim they were written for."""
    width = out.get("hidden_size") if _is_int(out.get("hidden_size")) else None

    def new_dim(old_half: int) -> int | None:
        for key in ("head_dim", "qk_rope_head_dim", "rotary_dim", "attention_head_dim"):
            old = values.get(key)
            if _is_int(old) and old == 2 * old_half:
                new = out.get(key, old)
                if new is None and width and new_heads:
                    new = width // new_heads
                return int(new) if _is_int(new) else None
        old_width, old_heads = values.get("hidden_size"), values.get("num_attention_heads")
        if _is_int(old_width) and _is_int(old_heads) and old_heads and old_width // old_heads == 2 * old_half:
            return width // new_heads if width and new_heads else None
        return None

    def fix(d: dict[str, Any]) -> dict[str, Any]:
        d = dict(d)
        for k, v in d.items():
            if isinstance(v, dict):
                d[k] = fix(v)
            elif "section" in k and _int_list(v) and len(v) > 1:
                dim = new_dim(sum(v))
                if dim is None or dim // 2 == sum(v):
                    continue
                half = dim // 2
                scaled = [max(1, x * half // sum(v)) for x in v]
                scaled[0] += half - sum(scaled)
                if min(scaled) >= 1:
                    d[k] = type(v)(scaled)
        return d

    for key, value in values.items():
        if isinstance(value, dict) and "rope" in key and isinstance(out.get(key, value), dict):
            fixed = fix(out.get(key, value))
            if fixed != value:
                out[key] = fixed
        elif "section" in key and _int_list(value):
            fixed = fix({key: value})[key]
            if fixed != value:
                out[key] = fixed


_SAME = object()


def _declared_values(cfg: Any) -> dict[str, Any]:
    """The config's values of the fields its class declares (those it holds)."""
    return {k: v for k in _declared(type(cfg)) if (v := _get(cfg, k, _SAME)) is not _SAME}


def _map_layer_indices(value: list[int] | tuple[int, ...], n0: int, n: int) -> Any:
    """Indices into ``n0`` layers spread over the ``n`` kept (negative ones count from the end),
    or None when one is out of range."""
    if not all(-n0 <= x < n0 for x in value):
        return None
    return type(value)(sorted({min(n - 1, round(x * (n - 1) / max(1, n0 - 1))) if x >= 0 else max(x, -n) for x in value}))


def _follow_sibling_layers(values: Mapping[str, Any], subs: Mapping[str, Any], out: dict[str, Any]) -> None:
    """Layer indices one config of the tree keeps into another's layers (Molmo2's adapter reads
    ``vision_feature_layer`` [24, 18] of ``vision_config``), mapped onto the layers that one keeps."""
    def counts(name: str) -> tuple[int, int] | None:
        sub, kw = subs.get(name), out.get(name)
        layer = _layer_count(sub) if sub is not None else None
        if layer is None or not isinstance(kw, dict) or not _is_int(kw.get(layer[0])):
            return None
        return layer[1], int(kw[layer[0]])

    def fix(vals: Mapping[str, Any], target: dict[str, Any]) -> None:
        for key, value in vals.items():
            m = re.fullmatch(r"([a-z]+)_feature_layers?", key.lower())
            c = counts(f"{m.group(1)}_config") if m else None
            if c is None or c[1] >= c[0]:
                continue
            one = _is_int(value)
            listed = [value] if one else value
            if not (one or _int_list(value)) or all(-c[1] <= x < c[1] for x in listed):
                continue  # indices the shrunk config still has stay as they are
            mapped = _map_layer_indices(listed, *c)
            if mapped is not None:
                target[key] = mapped[0] if one else mapped

    fix(values, out)
    for name, sub in subs.items():
        if isinstance(out.get(name), dict):
            fix(_declared_values(sub), out[name])


def _follow_image_sizes(kwargs: dict[str, Any], base: Any) -> None:
    """Image sizes after the shrink, made to agree where the config's agree: sub-configs that took
    the same images keep taking the same (SAM 2's prompt encoder and backbone, 1024x1024 both,
    each shrunk by its own patch size to 64 and 32), at the larger of their new sizes; and the
    feature-map sizes a config lists for its images (SAM 2's ``backbone_feature_sizes``, [[256,
    256], [128, 128], [64, 64]] for 1024x1024) scaled as the patch grid of those images was, and a
    patch grid of another config that matched one of those maps matching it still."""
    def side(v: Any) -> int | None:
        return int(v) if _is_int(v) else int(max(v)) if _int_list(v) else None

    def grid(patch: Any, image: int) -> float:  # patches a side
        return image / (side(patch) or 1)

    configs: list[tuple[dict[str, Any], Any]] = []  # (kwargs, the config they shrink), the tree's

    def walk(kw: dict[str, Any], cfg: Any) -> None:
        configs.append((kw, cfg))
        for name, sub in _subconfigs(cfg).items():
            if isinstance(kw.get(name), dict):
                walk(kw[name], sub)

    walk(kwargs, base)
    sized = [(kw, cfg, old) for kw, cfg in configs
             if (old := side(_get(cfg, "image_size"))) and side(kw.get("image_size"))]
    for old in {o for _, _, o in sized}:
        same = [kw for kw, _, o in sized if o == old]
        new = max(side(kw["image_size"]) or 0 for kw in same)
        for kw in same:
            v = kw["image_size"]
            kw["image_size"] = type(v)(x * new // max(v) for x in v) if isinstance(v, (list, tuple)) else new
    ratios = {id(kw): grid(kw.get("patch_size") or _get(cfg, "patch_size"), side(kw["image_size"]) or old)
              / grid(_get(cfg, "patch_size"), old) for kw, cfg, old in sized}
    follows: dict[int, int] = {}  # a listed feature map's old side -> its new one
    for kw, cfg in configs:
        ratio = ratios.get(id(kw)) or next((ratios[id(kw[n])] for n in _subconfigs(cfg)
                                            if isinstance(kw.get(n), dict) and id(kw[n]) in ratios), None)
        for key, value in _declared_values(cfg).items():
            if ratio is None or ratio == 1 or not key.lower().endswith("feature_sizes") \
                    or kw.get(key) not in (None, value):  # (not a value --set gives)
                continue
            if isinstance(value, (list, tuple)) and value and all(_int_list(v) for v in value):
                kw[key] = [[max(1, round(x * ratio)) for x in v] for v in value]
                follows.update({x: y for v, w in zip(value, kw[key]) for x, y in zip(v, w)})
    shrunk = {id(kw): (old, side(kw["image_size"]) or old) for kw, _, old in sized}
    grids = {id(kw): (int(grid(_get(cfg, "patch_size"), old)),
                      int(grid(kw.get("patch_size") or _get(cfg, "patch_size"), side(kw["image_size"]) or old)))
             for kw, cfg, old in sized if side(_get(cfg, "patch_size"))}
    for kw, cfg in configs:
        # the image resolutions a config lists in whole images of its tower (LLaVA-NeXT's
        # ``image_grid_pinpoints``, [[336, 672], ...] for 336x336 tiles) in the shrunk tiles
        towers = (id(kw), *(id(kw[n]) for n in _subconfigs(cfg) if isinstance(kw.get(n), dict)))
        own = [shrunk[i] for i in towers if i in shrunk]
        patch_grid = next((grids[i] for i in towers if i in grids), None)
        for key, value in _declared_values(cfg).items():
            if key.endswith("tokens_per_image") and patch_grid and _is_int(value) and kw.get(key) in (None, value):
                # tokens an image is pooled to, a square grid that divides the tower's patch grid
                # (Gemma 3 pools 64x64 patches to 16x16 tokens; its default 224-pixel tower has
                # 14x14 patches for its 256 tokens, and pooled them with a window of 0)
                t, (g0, g1) = math.isqrt(value), patch_grid
                if t * t == value and (t > g1 or g1 % t):
                    kw[key] = max(1, g1 // max(1, round(g0 / t))) ** 2
                continue
            if not own or kw.get(key) not in (None, value) or not isinstance(value, (list, tuple)) or not value \
                    or not all(_int_list(v) and len(v) == 2 for v in value):
                continue
            tile, new_tile = own[0]
            if tile != new_tile and all(x >= tile and x % tile == 0 for v in value for x in v):
                kw[key] = [[x // tile * new_tile for x in v] for v in value]
    for kw, cfg, old in sized:
        # a patch grid as large as a listed feature map stays as large as it (SAM 2's prompt
        # encoder embeds its prompts on the 64x64 grid of the backbone's last map: its
        # "patch size" of 16 is the backbone's stride, which the shrink keeps)
        patch, image = _get(cfg, "patch_size"), side(kw["image_size"])
        if _is_int(patch) and image and (g := follows.get(old // patch)) and old % patch == 0:
            kw["patch_size"] = max(1, image // g)


def _shrink_field(key: str, low: str, value: Any, values: Mapping[str, Any], shrink: _Shrink, *, ratio: float,
                  head_ratio: float, heads0: int | None, new_heads: int | None, layer: tuple[str, int] | None,
                  keep: list[int] | None, n_layers: int | None) -> Any:
    plan = shrink.plan
    if low == "initializer_range" and isinstance(value, float) and 0 < value < 1e-4:
        # SAM-style towers declare 1e-10 (no checkpoint is that small): random weights so small
        # put the tower's share of the loss near 1e-15, below what the oracle can tell from zero,
        # so a scaling it does change measures as a gauge (Unlimited-OCR's SAM neck)
        return 0.02
    coefficient = values.get("width_coefficient")
    if plan.widths and isinstance(coefficient, float) and coefficient > 1:
        # compound scaling (EfficientNet, ALIGN's vision tower): the channel lists are the base
        # network's, which the model multiplies by the coefficient beside a stem width it hard-codes
        # (scaled lists broke the stem's 32 channels), and hidden_dim is the scaled network's head:
        # the small build is the base network, coefficient 1, head at its base width
        if low == "width_coefficient":
            return 1.0
        if low == "hidden_dim" and _is_int(value):
            return _round(value / coefficient)
        if _width_like(low):
            return _SAME
    if plan.layers and low == "depth_coefficient" and isinstance(value, float) and value > 1:
        return 1.0
    # layer counts and per-layer lists
    if plan.layers:
        if layer and key == layer[0] and n_layers is not None:
            return n_layers
        if _is_int(value) and value > SMALL_DEFAULTS["layers"] and (
            low in _LAYER_EXACT or (low.endswith("_layers") and low.startswith(("num_", "n_")) and not any(
                w in low for w in ("feat", "conv", "extract", "nextn", "mtp", "dense", "adapter", "pos", "upsampl", "resid")))
        ):
            return SMALL_DEFAULTS["layers"]
        if low in _LAYER_LISTS and _int_list(value):
            return type(value)(min(x, SMALL_DEFAULTS["layers"]) for x in value)
        if keep is not None and layer and (isinstance(value, (list, tuple)) or _layer_pattern(value)) \
                and len(value) == layer[1] and layer[1] >= 5:
            picked = [value[i] for i in keep]
            return "".join(picked) if isinstance(value, str) else type(value)(picked)
        if keep is not None and layer and _int_list(value) and low.endswith(("indexes", "indices", "layer_ids", "_layers", "layer_idx")) \
                and len(value) < layer[1] and (mapped := _map_layer_indices(value, layer[1], n_layers or SMALL_DEFAULTS["layers"])):
            return mapped
        if low == "first_k_dense_replace" and _is_int(value) and value > 1:
            return 1
    # vocabulary and the special tokens inside it
    # (Gemma 3n/4's per-layer token table, ``vocab_size_per_layer_input``, is 262144 rows too: left
    # at that, a "small" build carries 268M parameters and its float64 oracle copy is killed)
    if plan.vocab and _is_int(value) and value > SMALL_DEFAULTS["vocab"] and low != "type_vocab_size" and (
            low.endswith("vocab_size") or low.startswith("vocab_size_per_layer")):
        return SMALL_DEFAULTS["vocab"]
    if plan.vocab and (low.endswith(("_token_id", "_token_index", "_token_ids")) or low in ("decoder_start_token_id",)):
        return _remap_tokens(key, value, shrink)
    if plan.vocab and low in ("max_position_embeddings", "n_positions", "max_target_positions", "n_ctx") and _is_int(value) \
            and value > SMALL_DEFAULTS["positions"]:
        return SMALL_DEFAULTS["positions"]
    if plan.extras:
        if low == "num_queries" and _is_int(value) and value > 16:
            return 16
        if low == "sinkhorn_iterations" and _is_int(value) and value > 10:
            return 10  # SuperGlue's optimal transport, unrolled in the graph: 100 by default
        if low == "max_text_length" and _is_int(value) and value > SMALL_DEFAULTS["decode_steps"]:
            return SMALL_DEFAULTS["decode_steps"]  # SLANet's table decoder, one step a token unrolled: 501 by default
        if low == "max_keypoints" and _is_int(value) and (value < 0 or value > 64):
            return 64  # unlimited by default: every point over a threshold of random scores
        if low == "context_length" and _is_int(value) and value > 64 and "patch_length" in values:
            return 64
        if low in _EXPERTS and _is_int(value) and value > SMALL_DEFAULTS["experts"]:
            return SMALL_DEFAULTS["experts"]
        if low in _EXPERTS_PER_TOKEN and _is_int(value) and value > SMALL_DEFAULTS["experts_per_token"]:
            return SMALL_DEFAULTS["experts_per_token"]
        if low == "n_group" and _is_int(value) and value > 2:
            return 2
        if low in ("n_groups", "ngroups", "mamba_n_groups") and _is_int(value) and value > 1 and plan.widths:
            return 1  # state-space head groups must divide the (fewer) heads
        if low == "topk_group" and _is_int(value) and value > 1:
            return 1
        if low == "max_source_positions" and _is_int(value) and value > SMALL_DEFAULTS["audio_positions"]:
            return SMALL_DEFAULTS["audio_positions"]
        if low in ("mask_time_length", "mask_feature_length") and _is_int(value) and value > SMALL_DEFAULTS["mask_span"]:
            return SMALL_DEFAULTS["mask_span"]  # SpecAugment's spans must fit the short example (training raises)
        if low in ("num_frames", "frames_per_clip") and _is_int(value) and value > SMALL_DEFAULTS["frames"]:
            return SMALL_DEFAULTS["frames"]
        if low == "patch_size" and _is_int(value) and value > SMALL_DEFAULTS["image_patch"]:
            return SMALL_DEFAULTS["image_patch"]
        if low == "window_size" and _is_int(value) and value > 2 and "image_size" in values:
            patch, merge = values.get("patch_size"), values.get("spatial_merge_size")
            if _is_int(patch) and _is_int(merge) and patch > 0 and merge > 0 and value >= patch * merge:
                # in pixels, over merged patches (Ovis 2.5's 112 for 16-pixel patches merged 2 x 2,
                # three a side): as many merged patches a window, of the shrunk patches (2 made none)
                return value // (patch * merge) * merge * min(patch, SMALL_DEFAULTS["image_patch"])
            return 2  # windowed vision attention: every stage must stay at least one window wide
        if low == "image_size" and (_is_int(value) or _int_list(value)):
            patch = values.get("patch_size")
            p = min(patch, SMALL_DEFAULTS["image_patch"]) if _is_int(patch) else (
                SMALL_DEFAULTS["image_patch"] if _int_list(patch) else 4)
            side = max(SMALL_DEFAULTS["image_size"], 8 * p)
            window = values.get("window_size")
            stages = values.get("depths")
            if _is_int(window) and _int_list(stages):
                side = max(side, p * min(window, 2) * 2 ** (len(stages) - 1))
            if isinstance(value, (list, tuple)):
                return type(value)(min(x, side) for x in value)
            return min(value, side)
    if not plan.widths:
        return _SAME
    if low in ("num_filters", "n_filters") and _is_int(value):
        # a conv codec doubles its channels at each of its stages: VibeVoice's six take 32 filters
        # to 2048 channels (130M parameters a tower at the small plan); the last stage at 256
        stages = next((len(v) for k in ("downsampling_ratios", "upsampling_ratios") if _int_list(v := values.get(k))), 0)
        if stages and value * 2**stages > 1024:
            return max(1, 256 >> stages)
    # attention heads
    if _is_int(value) and value > 0:
        kv_like = "key_value_heads" in low or "kv_heads" in low or low in ("num_query_groups", "multi_query_group_num")
        if kv_like:
            h = new_heads or SMALL_DEFAULTS["heads"]
            if heads0 is not None and value == heads0:
                return h
            k = min(value, SMALL_DEFAULTS["kv_heads"], h)
            while h % k:
                k -= 1
            return k
        if low.endswith("heads") or low in ("n_head", "num_heads"):
            return _pow2_at_most(value, SMALL_DEFAULTS["heads"])
        if low.endswith(_HEAD_DIM_SUFFIX) and head_ratio < 1:
            new = max(min(8, value), int(round(value * head_ratio)))  # rotary parts need a few pairs
            return new + (new % 2)
    if low.endswith("heads") and _int_list(value):
        base = min(value)
        return type(value)(_pow2_at_most(max(1, x // base), 8) for x in value)
    # widths: scaled by the config's ratio, or following the width they equal elsewhere in the tree
    if any(w in low for w in _NOT_SIZE) or low == "num_channels":
        return _SAME
    width_like = _width_like(low)
    if low == "num_groups" and _is_int(value) and value > 8:
        return 8  # group normalisation's groups must divide each shrunk width (a multiple of 8): BiT's 32
    if _is_int(value) and value in shrink.widths and low.endswith("groups"):
        return shrink.widths[value]  # as many groups as channels, a depthwise conv (Mimi's upsample_groups)
    if _is_int(value) and value in shrink.widths and ("hidden_size" in low or low.endswith("input_size")) and not width_like:
        # a hidden size named with a qualifier after it (BLT's ``hidden_size_global``) or the width
        # an adapter takes in (dots.3's ``adapter_input_size``): it is the width of another config
        # of the tree, and follows it
        return shrink.widths[value]
    if width_like and _is_int(value) and value >= 16:
        if value in shrink.widths:
            return shrink.widths[value]
        if ratio < 1:
            return _round(value * ratio)
    if (width_like and low.endswith("in_channels") or _width_list(low) and not width_like) and _int_list(value) and \
            all(x in shrink.widths for x in value if x >= 16) and any(x >= 16 for x in value):
        # the widths another config (a backbone) feeds in: follow that config's scaling
        return type(value)(shrink.widths[x] if x >= 16 else x for x in value)
    if width_like and _int_list(value) and ratio < 1 and max(value) >= 16:
        # every channel list with the same rounding, so a stage's input stays its predecessor's output;
        # small entries (a stem's 3 image channels) are not widths; a last stage as wide as another
        # config (SAM's neck feeding Unlimited-OCR's CLIP encoder as its patch embeddings) follows it
        out = [_round(x * ratio) if x >= 16 else x for x in value]
        if value[-1] in shrink.widths and value.count(value[-1]) == 1:
            out[-1] = shrink.widths[value[-1]]
        return type(value)(out)
    return _SAME


def _width_like(low: str) -> bool:
    """Whether a field (lower-cased) is a width or a list of widths; a stage list is named after
    the width it lists (Hiera's ``embed_dim_per_stage``)."""
    stem = low.removesuffix("_per_stage")
    return stem in _WIDTH_EXACT or (stem.endswith(_WIDTH_SUFFIX + ("_channels", "out_channel", "hidden_dimension"))
                                     and not stem.endswith(_HEAD_DIM_SUFFIX))


def _width_list(low: str) -> bool:
    """Whether a field (lower-cased) may list widths: those named as widths, and the channel lists
    a neck takes from its backbone (SAM 2's ``backbone_channel_list``, its stages' widths reversed)."""
    return _width_like(low) or low.endswith("channel_list")


def _remap_tokens(key: str, value: Any, shrink: _Shrink) -> Any:
    """Special token ids beyond the new vocabulary move to its top, each to a slot of its own."""
    vocab = SMALL_DEFAULTS["vocab"]

    def one(v: Any) -> Any:
        if not _is_int(v) or v < vocab // 2:
            return v
        slot = shrink.vocab_map.setdefault(f"{v}", vocab - 1 - len(shrink.vocab_map))
        return max(slot, vocab // 2)

    if isinstance(value, (list, tuple)):
        return type(value)(one(v) for v in value)
    return one(value)


# keys of a config's dict that are not fields to pass back (the class sets them)
_CONFIG_BOOKKEEPING = {"transformers_version", "architectures", "_name_or_path", "output_attentions",
                       "output_hidden_states", "return_dict", "torch_dtype", "dtype"}


ATTENTION_KEY = "attn_implementation"  # not a config field: the constructor's argument (--set attn_implementation=...)
_ATTENTION_CHOICES = ("eager", "sdpa", "flex_attention")


def _attention_implementation(model_type: str, value: Any) -> str:
    """The attention implementation ``--set attn_implementation=...`` asks for (transformers picks
    SDPA where the model supports it, else eager): one a CPU runs."""
    if value not in _ATTENTION_CHOICES:
        raise OverrideError(f"hf:{model_type}: attn_implementation must be one of {', '.join(_ATTENTION_CHOICES)}, "
                      f"not {value!r}")
    return str(value)


def _apply_overrides(kwargs: dict[str, Any], cfg: Any, overrides: Mapping[str, Any], model_type: str) -> None:
    for dotted, value in overrides.items():
        parts = dotted.split(".")
        target, node = kwargs, cfg
        for part in parts[:-1]:
            sub, inner = target.get(part), _get(node, part)
            if sub is None and hasattr(inner, "to_dict") and hasattr(inner, "model_type"):
                # a sub-config the plan left as it is: set from its own values (SAM 2's backbone)
                sub = target[part] = {k: v for k, v in inner.to_dict().items() if k not in _CONFIG_BOOKKEEPING}
            if not isinstance(sub, dict) or inner is None:
                raise OverrideError(f"{model_type} config has no sub-config {part!r} (in --set {dotted})")
            target, node = sub, inner
        key = parts[-1]
        if key == ATTENTION_KEY:
            target[key] = _attention_implementation(model_type, value)
            continue
        amap = getattr(node, "attribute_map", {}) or {}
        key = amap.get(key, key)
        known = set(_declared(type(node))) | set(vars(node))
        if key not in known:
            raise OverrideError(f"{model_type} config has no field {parts[-1]!r}")
        declared = None
        if dataclasses.is_dataclass(node):
            declared = next((f.type for f in dataclasses.fields(node) if f.name == key), None)
        target[key] = check_override(f"hf:{model_type}", dotted, value, getattr(node, key, None), declared)


@dataclass(frozen=True)
class _Same:
    """A gap's value: another field's, after the shrink (``--set`` spelling); ``index`` picks one
    element of a list-valued field."""

    field: str
    index: int | None = None


# Per-type values for fields a default config leaves unset although its model code cannot run
# without them, where no general rule can choose the value (checkpoints always set them). Applied
# under every plan, before ``--set`` overrides; keys as ``--set`` spells them.
_KNOWN_GAPS: dict[str, dict[str, Any]] = {
    # attention clamps q, k, v to +-clip_qkv unconditionally (clamp with both bounds None raises)
    "dbrx": {"attn_config.clip_qkv": 8.0},
    # no projector scale, so no feature level reaches the encoder (checkpoints use [1.0] or [2.0, 0.5])
    "lw_detr": {"projector_scale_factors": [1.0]},
    # its distilling conv halves the sequence between encoder layers, but under torch.export the
    # encoder's mask is built once at the input length, so the second layer rejects it: no distilling
    "informer": {"distil": False},
    # its indexed-attention layers size their token indexer from five fields the default leaves
    # unset (the class validates them together: one key head, a budget divisible by the ratio)
    "qwen4_exp_text": {"indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": 32,
                       "indexer_budget": 8, "indexer_compress_ratio": 4},
    # its head concatenates all six bridge outputs of its backbone, whose default returns the last only
    "uvdoc": {"backbone_config.out_indices": [1, 2, 3, 4, 5, 6],
              "backbone_config.out_features": [f"stage{i}" for i in range(1, 7)]},
    # its text model builds a sliding-window mask whatever its layer types are, and the default
    # leaves the window unset
    "step3p7": {"text_config.sliding_window": 8},
    "step3p5": {"sliding_window": 8},  # that text model on its own
    # in training mode its axial position embeddings require the sequence to be exactly as long as
    # the axial shape's product (checkpoints choose it for their length): the default 64 x 64 takes
    # 4096 tokens, the example has 16
    "reformer": {"axial_pos_shape": [4, 4]},
    # its aligner projects image features to the vision config's projection_dim and puts them in
    # the text embeddings, so that width must be the text model's; the defaults leave 2048 against
    # 4096 (checkpoints set both to 2048), and the model refuses every image
    "janus": {"vision_config.projection_dim": _Same("text_config.hidden_size")},
    # its post-processing in forward reads a threshold and a reading-order rank per class, which
    # the default (two labels) leaves unset; checkpoints list one for each of their classes
    "pp_doclayout_v2": {"class_thresholds": [0.5, 0.5], "class_order": [0, 1]},
    # its mask branch reads the backbone's first stage (x4_feat_dim 128, the stage's 128 channels by
    # default); the two shrink by different widths' ratios (to 32 and 8), so the model refused them
    "pp_doclayout_v3": {"x4_feat_dim": _Same("backbone_config.stage_out_channels", 0)},
    "qwen4_exp": {"text_config.indexer_n_heads": 2, "text_config.indexer_kv_heads": 1,
                  "text_config.indexer_head_dim": 32, "text_config.indexer_budget": 8,
                  "text_config.indexer_compress_ratio": 4},
}


def _shrunk_value(kwargs: Mapping[str, Any], cfg: Any, dotted: str) -> Any:
    """A field's value as the shrink left it: from ``kwargs`` where it set it, else the default's."""
    *path, key = dotted.split(".")
    given: Any = kwargs
    for part in path:
        given = given.get(part) if isinstance(given, Mapping) else None
        cfg = _get(cfg, part)
    if isinstance(given, Mapping) and key in given:
        return given[key]
    return _get(cfg, key)


def _fill_gaps(kwargs: dict[str, Any], cfg: Any, model_type: str) -> None:
    for dotted, value in _KNOWN_GAPS.get(model_type, {}).items():
        if isinstance(value, _Same):
            index, value = value.index, _shrunk_value(kwargs, cfg, value.field)
            value = value[index] if index is not None and isinstance(value, (list, tuple)) else value
        _set_dotted(kwargs, cfg, dotted, value)


def _set_dotted(kwargs: dict[str, Any], cfg: Any, dotted: str, value: Any) -> None:
    """``kwargs`` set to give the field ``dotted`` (``--set`` spelling) ``value``."""
    *path, key = dotted.split(".")
    target, node = kwargs, cfg
    for part in path:
        node = _get(node, part)
        if node is None:
            return
        target = target.setdefault(part, {"model_type": getattr(node, "model_type", "")})
    target[key] = value


def _follow_text_width(kwargs: dict[str, Any], cfg: Any) -> None:
    """A tower's merger writes its features into the text model's embeddings, so the width it
    projects to (``out_hidden_size``) is the text model's in every checkpoint. Defaults leave
    them apart (Qwen3-VL's 3584 beside 4096; GLM-5-Next's 1536 beside 4096), the shrink scales
    each by its own config's ratio, and the model refused every image ("Image features and image
    tokens do not match, tokens: 8, features: 8", the two widths' products)."""
    for path, c in _paths(cfg):
        subs = _subconfigs(c)
        if "text_config" not in subs:
            continue
        prefix = "".join(f"{p}." for p in path)
        width = _shrunk_value(kwargs, cfg, f"{prefix}text_config.hidden_size")
        for name, sub in subs.items():
            if name != "text_config" and _is_int(_get(sub, "out_hidden_size")) and _is_int(width):
                _set_dotted(kwargs, cfg, f"{prefix}{name}.out_hidden_size", int(width))


def make_config(model_type: str, overrides: Mapping[str, Any] | None = None, plan: Plan = PLANS[0]) -> Any:
    """The model type's config, shrunk by ``plan``, with ``overrides`` applied on top."""
    _transformers()
    from transformers import CONFIG_MAPPING

    model_type = resolve_type(model_type)
    cls = CONFIG_MAPPING[model_type]
    try:
        base = cls()
    except Exception as err:
        raise HFError(f"{model_type}: its default config cannot be built: {_short(err)}") from None
    widths: dict[int, int] = {}
    _collect_widths(base, plan, widths)
    _collect_necks(base, plan, widths)
    rejected: Exception | None = None
    shrunk = plan.name != "default"
    for min_stack in (5, 3) if shrunk else (5,):  # rejected: again with short per-layer lists (_Shrink)
        kwargs = shrink_kwargs(base, _Shrink(plan, widths, min_stack=min_stack)) if shrunk else {}
        if "use_cache" in _declared(cls) or _has(base, "use_cache"):
            kwargs["use_cache"] = False
        _fill_gaps(kwargs, base, model_type)
        _follow_text_width(kwargs, base)
        _apply_overrides(kwargs, base, overrides or {}, model_type)
        _follow_image_sizes(kwargs, base)  # the shrink's image sizes or the ones --set gives
        try:
            cfg = _constructed(cls, kwargs, base)
            break
        except Exception as err:  # config validators raise their own exception types
            rejected = rejected or err
    else:
        assert rejected is not None
        raise HFError(f"{model_type}: config rejected ({plan.name} plan): {_short(rejected)}") from None
    _finish_config(cfg)
    return cfg


# a parent config's validator that requires a sub-config's field to equal its own
_MIRRORED = re.compile(r"`(\w+)\.(\w+)` \(None\) and `(\w+)` \([^)]*\) must be equal")


# a validator that bounds a count by what the shrink made smaller ("`index_num_heads` must be
# between 1 and the number of query heads of key head 0", Kolibri 1.1)
_FROM_ONE = re.compile(r"`?(\w+)`? must be (?:between 1 and|in \[1,)")


def _constructed(cls: type, kwargs: dict[str, Any], base: Any) -> Any:
    """``cls(**kwargs)``. The shrink leaves a field whose class default is None for the class to
    derive; where the sub-config's class does not and the parent requires it to equal its own
    ("`vision_config.video_temporal_patch_size` (None) and `video_temporal_patch_size` (2) must be
    equal", Nemotron-H Omni), the sub-config takes the parent's value. A count the validator
    bounds from 1 by fields the shrink made smaller takes the lowest value it allows."""
    for _ in range(8):
        try:
            return cls(**kwargs)
        except Exception as err:
            low = _FROM_ONE.search(str(err))
            if low is not None and _is_int(v := kwargs.get(low.group(1), _get(base, low.group(1)))) and v > 1:
                kwargs[low.group(1)] = 1
                continue
            m = _MIRRORED.search(str(err))
            if m is None or m.group(2) != m.group(3):
                raise
            sub, field = kwargs.get(m.group(1)), m.group(2)
            value = kwargs.get(field, _get(base, field))
            if not isinstance(sub, dict) or sub.get(field) is not None or value is None:
                raise
            sub[field] = value
    return cls(**kwargs)


def _complete(c: Any) -> None:
    """Fill what some default configs leave unset although their model code reads it (checkpoints
    always set it): ``head_dim`` and ``num_key_value_heads`` (what classes that derive them
    compute), ``vocab_size``, a missing ``pad_token_id``, a vocabulary map."""
    heads = next((v for k in ("num_attention_heads", "num_heads", "n_head") if _is_int(v := _get(c, k)) and v > 0), None)
    width = _main_width(c)
    if _has(c, "num_attention_heads") and _get(c, "num_key_value_heads") is None and heads:
        with contextlib.suppress(Exception):
            c.num_key_value_heads = heads  # what classes that derive it set: one key/value head per head
    if _has(c, "head_dim") and _get(c, "head_dim") is None and width and heads and width % heads == 0:
        with contextlib.suppress(Exception):
            c.head_dim = width // heads
    if _has(c, "vocab_size") and _get(c, "vocab_size") is None and width:
        with contextlib.suppress(Exception):
            c.vocab_size = SMALL_DEFAULTS["vocab"]
    if not _has(c, "pad_token_id"):
        with contextlib.suppress(Exception):
            c.pad_token_id = None
    if dataclasses.is_dataclass(c):  # a mapping the model reads with .get() (a VQ tokenizer's vocabulary map)
        for f in dataclasses.fields(c):
            if _get(c, f.name, 0) is None and str(f.type).replace(" ", "").startswith("dict") and f.name.endswith("_map"):
                with contextlib.suppress(Exception):
                    setattr(c, f.name, {})


def _finish_config(cfg: Any) -> None:
    """Settings no plan should change: no cache, no pretrained backbone, valid special tokens."""
    for c in _walk(cfg):
        _complete(c)
        if _has(c, "use_cache"):
            with contextlib.suppress(Exception):
                c.use_cache = False
        for key in ("use_pretrained_backbone", "use_timm_backbone"):
            if _get(c, key):
                with contextlib.suppress(Exception):
                    setattr(c, key, False)
        vocab = _get(c, "vocab_size", None)
        for key in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"):
            v = _get(c, key)
            if _is_int(vocab) and _is_int(v) and v >= vocab:
                with contextlib.suppress(Exception):
                    setattr(c, key, vocab - 1)
        if _get(c, "is_encoder_decoder", False):
            for key in ("decoder_start_token_id", "pad_token_id"):  # set even where the class has no such field
                if _get(c, key) is None:
                    with contextlib.suppress(Exception):
                        setattr(c, key, 0)


def _walk(cfg: Any) -> Iterator[Any]:
    yield cfg
    for sub in _subconfigs(cfg).values():
        yield from _walk(sub)


def _short(err: BaseException, limit: int = 240) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:limit]}"


# -- heads ------------------------------------------------------------------------------------

# (mapping, what the labels are) in order of preference: a head that returns a loss first
_HEADS = (
    ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "tokens"),
    ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "tokens"),
    ("MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES", "tokens"),
    ("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", "tokens"),
    ("MODEL_FOR_MASKED_LM_MAPPING_NAMES", "tokens"),
    ("MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES", "class"),
    ("MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES", "class"),
    ("MODEL_FOR_VIDEO_CLASSIFICATION_MAPPING_NAMES", "class"),
    ("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES", "class"),
    ("MODEL_FOR_TIME_SERIES_PREDICTION_MAPPING_NAMES", "none"),  # future_values are its targets
    ("MODEL_MAPPING_NAMES", "none"),
)


def _task(mapping: str) -> str:
    """``MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES`` -> ``depth_estimation`` (``base`` for the base models')."""
    return "base" if mapping == "MODEL_MAPPING_NAMES" else \
        mapping.removeprefix("MODEL_FOR_").removesuffix("_MAPPING_NAMES").lower()


def head_classes(model_type: str) -> list[tuple[str, str, str]]:
    """``(task, class name, label kind)`` for every head the type has, loss-returning heads first."""
    from transformers.models.auto import modeling_auto

    out: list[tuple[str, str, str]] = []
    for mapping, labels in _HEADS:
        names = getattr(modeling_auto, mapping, {}).get(model_type)
        if names is None:
            continue
        for name in names if isinstance(names, (list, tuple)) else (names,):
            task = _task(mapping)
            if all(name != n for _, n, _ in out):
                out.append((task, name, labels))
    if not out:  # a type with task heads only (depth, pose, matting, keypoints, a backbone...)
        out = [(_task(mapping), name, "none")
               for mapping in sorted(vars(modeling_auto)) if mapping.startswith("MODEL_FOR_")
               and mapping.endswith("_MAPPING_NAMES") and isinstance(getattr(modeling_auto, mapping), dict)
               and isinstance(name := getattr(modeling_auto, mapping).get(model_type), str)]
        out = [h for i, h in enumerate(out) if all(h[1] != n for _, n, _ in out[:i])]
    if not out:
        out = _named_like_config(model_type) or _taking_config(model_type)
    return out


def _taking_config(model_type: str) -> list[tuple[str, str, str]]:
    """Sub-model types whose model class is named otherwise (``qwen2_vl_vision``'s
    ``Qwen2VisionTransformerPretrainedModel``, ``idefics2_vision``'s ``Idefics2VisionTransformer``)
    and often not exported: the classes of the type's modeling module whose ``config_class`` is
    its config class (a model of its own, not a block that takes the config) and that define a
    forward, causal LMs first, as ``module:Class``."""
    try:
        cfg_cls = CONFIG_MAPPING_CLS(model_type)
        package = cfg_cls.__module__.rpartition(".")[0]
        modeling = importlib.import_module(f"{package}.modeling_{package.rpartition('.')[2]}")
    except Exception:  # noqa: BLE001 (no modeling module, or one whose backend is missing)
        return []
    found = [obj for obj in vars(modeling).values() if inspect.isclass(obj) and issubclass(obj, nn.Module)
             and obj.__module__ == modeling.__name__ and obj.forward is not nn.Module.forward
             and getattr(obj, "config_class", None) is cfg_cls]
    found.sort(key=lambda c: not c.__name__.endswith("ForCausalLM"))
    return [("causal_lm" if c.__name__.endswith("ForCausalLM") else "base", f"{c.__module__}:{c.__name__}",
             "tokens" if c.__name__.endswith("ForCausalLM") else "none") for c in found]


def _named_like_config(model_type: str) -> list[tuple[str, str, str]]:
    """Sub-model types (``clip_text_model``...) have no auto mapping; their model class is named
    after the config class (``CLIPTextConfig`` -> ``CLIPTextModel``)."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    config_name = CONFIG_MAPPING_NAMES.get(model_type, "")
    if not config_name.endswith("Config"):
        return []
    stem = config_name.removesuffix("Config")
    out = []
    for name, task, labels in ((stem + "ForCausalLM", "causal_lm", "tokens"), (stem + "Model", "base", "none"),
                               (stem, "base", "none")):
        try:
            found = getattr(transformers, name, None) is not None
        except Exception:  # a backend the class needs is missing: the build says so
            found = True
        if found:
            out.append((task, name, labels))
    return out


def has_base_model(model_type: str) -> bool:
    from transformers.models.auto import modeling_auto

    return model_type in modeling_auto.MODEL_MAPPING_NAMES


# -- inputs -----------------------------------------------------------------------------------


def _find(cfg: Any, *keys: str) -> Any:
    """The first of ``keys`` set in the config or (breadth first) its sub-configs."""
    queue = [cfg]
    while queue:
        c = queue.pop(0)
        for k in keys:
            v = _get(c, k)
            if v is not None and not isinstance(v, bool):
                return v
        queue.extend(_subconfigs(c).values())
    return None


def _media_token(cfg: Any, kind: str) -> Any:
    """The placeholder token of ``kind`` (image, video, audio) media in the text, by either name
    configs give it."""
    return _find(cfg, f"{kind}_token_id", f"{kind}_token_index")


def _find_int(cfg: Any, *keys: str, default: int) -> int:
    """:func:`_find` for a count (a patch size, channels): ``default`` where it is unset or not an int."""
    v = _find(cfg, *keys)
    return int(v) if _is_int(v) else default


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
    if not layouts:
        by_name = _named_inputs([main], cfg, {}, batch, seq, seed) if main in params else {}
        layouts.append((f"{main} (by name)", by_name))
    filled: list[tuple[str, dict[str, Any]]] = []
    slot = named if main != named and named in params else _main_slot(model, named, params, required)
    integers = _integer_params(model)
    for name, inputs in layouts:
        if slot is not None and main in inputs:
            inputs[slot] = inputs.pop(main)
        _decoder_inputs(model, cfg, inputs, ids, params)
        _add_labels(model, cfg, inputs, ids, labels, params, batch, g)
        _variance_labels(cfg, inputs, params, batch, g)
        _by_name(cfg, inputs, required, ids, batch, g, integers)
        filled.extend(_with_masks(name, inputs, required, params))
        if labels == "none" and "labels" in params and "labels" not in inputs:
            filled.append((f"{name}+labels", {**inputs, "labels": ids.clone()}))  # heads that need targets
    return filled if only is None else [(n, i) for n, i in filled if n == only] or filled


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


def _channels_last(frames: torch.Tensor) -> torch.Tensor:
    """``(batch, frames, C, H, W)`` as ``(batch, frames, H, W, C)``."""
    return frames.permute(0, 1, 3, 4, 2).contiguous()


def _video(cfg: Any, image: torch.Tensor) -> torch.Tensor:
    """Frames (video models) or an image pair (matching models): ``(batch, frames, C, H, W)``."""
    frames = _find(cfg, "num_frames", "frames_per_clip")
    frames = int(frames) if _is_int(frames) and frames > 0 else 2
    return image.unsqueeze(1).expand(-1, frames, -1, -1, -1).contiguous()


def _integer_params(model: nn.Module) -> set[str]:
    """The forward's arguments annotated as integer tensors (``torch.LongTensor``)."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return set()
    return {name for name, p in params.items() if re.search(r"\b(Long|Int)Tensor\b", str(p.annotation))}


def _by_name(cfg: Any, inputs: dict[str, Any], required: set[str], ids: torch.Tensor, batch: int,
             g: torch.Generator, integers: Collection[str] = ()) -> None:
    """Required arguments no layout supplies, made from their names: ids and indices, lengths,
    then integer tensors by their annotation (ones: a count of one, a first position; JEV's
    ``marks`` index rows from 1), then float features as wide as the model (masks are added
    separately)."""
    seq = ids.shape[1]
    width = _find_int(cfg, "hidden_size", "d_model", "n_embd", "embed_dim", default=64)
    for name in sorted(required - set(inputs)):
        if name.endswith("mask"):
            continue
        if (kinds := _modalities(name, cfg, ids)) is not None:
            inputs[name] = kinds
        elif name.endswith("type_ids"):  # a type or segment index into a small table (token_type_ids'): the first
            inputs[name] = torch.zeros_like(ids)
        elif "ids" in name or "index" in name or "indices" in name or name in ("tokens", "input") or \
                name.endswith("_inputs"):  # OneFormer's task_inputs: a (batch, sequence) row per example
            rows = _table_rows(cfg, name)
            inputs[name] = ids.clone() if rows is None else ids % rows
        elif "length" in name:
            inputs[name] = _full_lengths(name, inputs, cfg, batch, seq)
        elif (shown := _image_sizes(name, inputs, batch)) is not None:
            inputs[name] = shown
        elif "mel" in name:
            inputs[name] = torch.randn(batch, seq, _mel_bins(cfg), generator=g)
        elif name in integers:
            inputs[name] = torch.ones(batch, seq, dtype=torch.long)
        else:  # hidden states, embeddings, latents, robot states...: features as wide as the model
            inputs[name] = torch.randn(batch, seq, width, generator=g)


_INDEX_SUFFIX = re.compile(r"_(ids|id|index|indices)$")


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
    return {
        patches_name: torch.randn(batch * side * side, chans * temporal * patch * patch, generator=g),
        grid_name: _grid_rows(grid_name, (side, side), batch),
    }


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
    if not _is_int(token) or (type(model).__name__, kind) in _NO_MEDIA_COUNT:
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
    if count is None:
        count = _count_from_check(model, ids, media, int(token))
    if count is None:
        return None
    with_tokens = _ids_with_tokens(ids, int(token), count)
    return None if with_tokens is None else {"input_ids": with_tokens, **media}


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
                feats = get(**{k: mode.from_tensor(v.to("meta")) for k, v in media.items()})
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


# -- building ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _as_export() -> Iterator[None]:
    """Run eager code on fake meta tensors the way export sees it: autocast regions on meta
    allowed, and ``torch.compiler.is_exporting()`` true, so library code takes the same branches
    as under ``torch.export`` (Hugging Face's MoE layers pick their exportable fallback)."""
    from torch import compiler

    from .tracer import meta_autocast

    flags = (compiler._is_compiling_flag, compiler._is_exporting_flag)
    compiler._is_compiling_flag = compiler._is_exporting_flag = True
    try:
        with meta_autocast():
            yield
    finally:
        compiler._is_compiling_flag, compiler._is_exporting_flag = flags


def _probe(model: nn.Module, inputs: Mapping[str, Any]) -> str | None:
    """None when a forward pass on fake meta tensors accepts ``inputs``, else why not.

    Fake tensors, as export uses: Hugging Face code sees it is being traced and takes the paths
    export takes (plain meta tensors fail on the ``.item()`` calls of eager-only shortcuts)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    try:
        with FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv()) as mode, torch.no_grad(), \
                _as_export():
            fake = {k: (mode.from_tensor(v.to("meta")) if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
            model(**fake)
    except Exception as err:
        line = _model_line(err)
        return _short(err, 200) + (f" [at: {line}]" if line else "")
    return None


def _asked_in_training(model: nn.Module, inputs: Mapping[str, Any]) -> list[str]:
    """Optional forward arguments the model asks for in training mode only: inputs that run in
    eval mode but not in the training captures of ``--to identity`` and the training loop."""
    model.train()
    try:
        why = _probe(model, inputs)
    finally:
        model.eval()
    return _asked_for(model, inputs, why) if why is not None else []


_REAL_RUN_PARAMETERS = 20_000_000  # larger candidates are left to the tracer's own real run


def _runs_on_cpu(meta: nn.Module) -> bool:
    """Whether :func:`_real_run` makes the model (else it leaves the check to the tracer)."""
    return sum(p.numel() for p in meta.parameters()) <= _REAL_RUN_PARAMETERS


def _real_run(tf: Any, head: str, cfg: Any, inputs: Mapping[str, Any], seed: int, meta: nn.Module) -> str | None:
    """None when the model, built on the CPU, runs ``inputs`` (or is too large to try), else why
    not: the check for candidates whose fake-tensor probe stopped at a branch on values."""
    if not _runs_on_cpu(meta):
        return None
    try:
        torch.manual_seed(seed)
        model = _instantiate(tf, head, cfg).eval()
        with torch.no_grad():
            model(**inputs)
    except Exception as err:
        line = _model_line(err)
        return _short(err, 200) + (f" [at: {line}]" if line else "")
    return None


def _real_run_repaired(tf: Any, head: str, cfg: Any, inputs: Mapping[str, Any], seed: int, meta: nn.Module,
                       why: str | None = None) -> tuple[str | None, tuple[Fix, ...]]:
    """A real run (``why``: its failure, where it ran already), and where the failure asks for a
    config repair (the rotary sections Qwen2-VL's text model splits its head by), the run of the
    repaired config: its failure or None, and the repairs it needed."""
    why = _real_run(tf, head, cfg, inputs, seed, meta) if why is None else why
    fixes = _repair(cfg, why, inputs) if why is not None else ()
    if fixes and _real_run(tf, head, _apply_fixes(cfg, fixes), inputs, seed, meta) is None:
        return None, fixes
    return why, ()


def _model_line(err: BaseException) -> str:
    """The statement of model code that raised (it names the argument a ``NoneType`` error is
    about), all its lines: LLaVA-NeXT's ``image_num_patches = [`` names ``image_sizes`` two
    lines down. Of an ``if`` that raised deciding its test, the test: the block it guards names
    arguments the test never read (wav2vec2's layer drop, ``layer(h, attention_mask=...)``)."""
    import linecache
    import traceback

    for fr in reversed(traceback.extract_tb(err.__traceback__)):
        if "/transformers/" in fr.filename and "/utils/" not in fr.filename:
            first = fr.lineno or 0
            last = min(fr.end_lineno or first, first + 8)
            lines: list[str] = []
            for n in range(first, last + 1):
                lines.append(linecache.getline(fr.filename, n).strip())
                if lines[-1].split("#")[0].rstrip().endswith(":"):  # a branch raises on its whole block: its header
                    break
            text = " ".join(x for x in lines if x) or (fr.line or "").strip()
            return text[:320]
    return ""


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
    asked = sorted({p for p in params if p in words or p.removeprefix("decoder_") in words})  # a decoder's input_ids
    # where the message says which is missing, that one only ("Multimodal data was passed (via
    # `image_grid_thw` or `video_grid_thw`) but `mm_token_type_ids` is missing": no video grid)
    missing = [p for p in asked if re.search(rf"`?\b{p}\b`? (is|are) missing|missing `?\b{p}\b", why)]
    asked = missing or asked
    if not asked and "'NoneType'" in why and "attention_mask" in params:
        asked = ["attention_mask"]  # an unnamed None where a tensor was due: the mask most code assumes
    return asked


def _named_inputs(names: list[str], cfg: Any, inputs: Mapping[str, Any], batch: int, seq: int,
                  seed: int) -> dict[str, Any]:
    """Inputs made from their names, sized by the config field named after them where there is
    one (``visual_feats`` -> ``visual_feat_dim``, ``encoder_hidden_states`` ->
    ``encoder_hidden_size``): boxes, positions, masks, lengths, ids and time steps, then features."""
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
        if low == "flattened_patches":  # Pix2Struct: each patch row is (row id, column id, pixels)
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
        elif low.endswith("mask"):
            out[name] = _mask(name, (batch, n), torch.long)
        elif low.endswith(("length", "lengths")):  # XLM's per-example lengths: every row full
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
            out[name] = torch.randn(batch, n, dim(name, width), generator=g)
    return out


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


@dataclass
class Built:
    """What :func:`build` chose: the plan, the head, the inputs' layout, and what it tried."""

    model_type: str
    plan: str
    task: str
    head: str
    layout: str
    probed: bool
    tried: list[str] = field(default_factory=list)


# probe failures no other plan can fix: branches on values, missing arguments
_SIZE_INDEPENDENT = ("DataDependent", "data-dependent", "missing a required argument", "missing 1 required",
                     "unexpected keyword argument", "has no attribute")

# probe failures that say more about fake tensors than about the inputs
_PROBE_LIMITS = ("NotImplementedError", "concrete integers", "Unrecognised padding", "DataDependent", "data-dependent",
                 "meta tensor", "on the meta device", "out of meta")

Fix = tuple[tuple[str, ...], str, Any, str]  # (path of sub-config names, field, value, what it sets)


@dataclass(frozen=True)
class _Choice:
    """A candidate: plan, head, inputs layout, and what was added to make it run."""

    plan: Plan
    task: str
    head: str
    layout: str
    probed: bool
    tried: list[str]
    fixes: tuple[Fix, ...] = ()
    named: tuple[str, ...] = ()  # optional inputs the model's own error asked for
    shaped: tuple[tuple[str, tuple[int, ...]], ...] = ()  # inputs remade at the shape the first layer asked for
    tokens: tuple[str, int] | None = None  # (media kind, count): tokens a real run's check asked the text to hold


_CHOICES: dict[tuple[Any, ...], _Choice] = {}

_CONV_CHANNELS = re.compile(r"expected input\[([\d, ]+)\] to have (\d+) channels, but got (\d+) channels")
_BROADCAST = re.compile(r"Attempting to broadcast a dimension of length \d+ at -\d+! Mismatching argument at index \d+ "
                        r"had torch.Size\(\[([\d, ]*)\]\); but expected shape should be broadcastable to \[([\d, ]+)\]")
_CONV_RANK = re.compile(r"Expected 3D \(unbatched\) or 4D \(batched\) input to conv2d, but got input of size: "
                        r"\[(\d+), (\d+)\]")
_TOO_SMALL = re.compile(r"Output size is too small|Kernel size can't be greater than actual input size|"
                        r"[Ii]mage size \S+ is too small")
_NORMALIZED = re.compile(r"normalized_shape=\[(\d+)\], expected input with shape \[[\d, ]*\], but got input of size "
                         r"torch.Size\(\[([\d, ]+)\]\)")
_UNPACK = re.compile(r"not enough values to unpack \(expected (\d+), got (\d+)\)")
# the statement a failure names unpacks a tensor's shape: the names of its axes and the tensor's
_SHAPE_READ = re.compile(r"\[at: ([\w, ]+) = (\w+)\.shape\]")
_MAT1_MAT2 = re.compile(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)")
_REDUCTION = re.compile(r"a and b must have same reduction dim, but got \[(\d+), (\d+)\] X \[(\d+), (\d+)\]")


_SPLIT_SUM = re.compile(r"split_with_sizes expects split_sizes to sum exactly to (\d+) .*but got split_sizes=\[([\d, ]+)\]")
_LATENT_FRAMES = 16


def _axis_size(cfg: Any, axis: str) -> int:
    """How large an axis named ``axis`` (``num_tiles``) is: the config's int field of that name or
    ending in it (``max_num_tiles``), else 1."""
    for c in _walk(cfg) if cfg is not None else ():
        for k, v in vars(c).items():
            if _is_int(v) and 0 < v <= 64 and (k == axis or k.endswith(f"_{axis}")):
                return int(v)
    return 1


def _reshaped(why: str, inputs: Mapping[str, Any], cfg: Any = None) -> list[tuple[str, tuple[int, ...]]]:
    """Shapes for an input that a probe failure in the layer reading it asks for: a conv's
    "expected input[2, 16, 70] to have 1 channels" (channels first, or the input transposed), a
    layer norm's "normalized_shape=[8] ... got input of size [2, 16, 64]" (features as wide), a
    broadcast against a fixed-size tensor ("had torch.Size([448, 448]) ... broadcastable to [2, 3,
    64, 64]": the input's trailing dims become that tensor's; ids too, Kyutai's one column per
    codebook offset), a projection's "[384, 64] X [192, 64]" (rows as wide as its in-features, as
    patch rows too), a conv patch embedding given patch rows (each row as a c x p x p patch). Only an input whose shape the message shows (give or take the few steps a conv
    pads its input by) is changed, so layers deeper in the model (whose sizes the config ties) are
    never guessed at; the one exception is a pooling or patching window larger than what is left
    of the image, which asks for a larger image."""
    floats = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor) and v.is_floating_point()}
    out: list[tuple[str, tuple[int, ...]]] = []
    m = _CONV_CHANNELS.search(why)
    if m:
        shape, want = tuple(int(x) for x in m.group(1).split(",")), int(m.group(2))
        for name, v in floats.items():
            if v.dim() == 3 and shape == (1, *v.shape):
                # (batch, sequence, width) read by a 2-D conv as one unbatched (channels, height,
                # width) image: a batch of feature maps with that many channels (a VQ-VAE's latents)
                out.append((name, (int(v.shape[0]), want, *(int(d) for d in v.shape[1:]))))
                continue
            if len(shape) < 3 or v.dim() != len(shape) or tuple(v.shape[:-1]) != shape[:-1]:
                continue
            if v.shape[-1] != shape[-1] and not 0 < shape[-1] - v.shape[-1] <= 16:
                continue  # the same input, padded by the conv first (a causal conv's left context)
            dims = tuple(int(x) for x in v.shape)
            if dims[-1] == want:
                out.append((name, (dims[0], want, *dims[1:-1])))
            if want >= 16 and len(dims) == 3 and dims[-1] > _LATENT_FRAMES:
                # a waveform asked for that many channels is a latent sequence, each frame of which
                # a decoder turns into thousands of samples: 16 frames (VibeVoice's decoder made 10
                # million samples of 3200 frames, and their comparison needed 1.9 TiB)
                out.append((name, (dims[0], want, _LATENT_FRAMES)))
            out.append((name, (dims[0], want, *dims[2:])))
    m = _BROADCAST.search(why)
    if m:
        other, shape = (tuple(int(x) for x in g.split(",") if x.strip()) for g in m.group(1, 2))
        wants = [(*shape[: len(shape) - len(other)], *other)] if 0 < len(other) <= len(shape) else []
        if len(other) == 1:
            wants.append((*shape, *other))  # one more axis (Kyutai's ids: one column per codebook)
        out.extend((name, want) for want in wants for name, v in inputs.items()
                   if isinstance(v, torch.Tensor) and tuple(v.shape) == shape and want != shape)
        if "attention_mask" in why and len(other) == len(shape) == 4 and other[1] == 1 \
                and (other[0], other[2]) == (shape[0], shape[2]) and other[3] < shape[3]:
            # a (batch, 1, queries, keys) mask the model made from its queries alone, where the keys
            # also span a context it prepends (DFlash's context states): a padding mask as long as
            # the keys (a real run skips the mask; a traced one cannot)
            out.append(("attention_mask", (shape[0], shape[3])))
    m = _CONV_RANK.search(why)
    unpacked = _UNPACK.search(why)
    more = int(unpacked.group(1)) - int(unpacked.group(2)) if unpacked else 0  # axes the unpacking lacks
    if m or more >= 2:
        # patch rows (n, c * p * p) where a conv patch embedding wants patch images (n, c, p, p),
        # with as many leading axes as the unpacking lacks besides (PaddleOCR-VL's model adds its
        # tower's batch axis, (batch, patches, c, h, w); its tower alone takes (1, n, c, p, p))
        for name, v in floats.items():
            if v.dim() == 2 and (m is None or tuple(v.shape) == (int(m.group(1)), int(m.group(2)))):
                rows, feats = (int(x) for x in v.shape)
                for c in (3, 1):
                    p = round((feats / c) ** 0.5)
                    if c * p * p == feats:
                        out.append((name, (*(1,) * max(0, more - 2), rows, c, p, p)))
                        break
    if unpacked and more >= 1:
        # an image unpacked into more axes than it has ("b, media, tiles, c, h, w = pixel_values.shape"
        # given (b, c, h, w)): the axes it lacks after its batch axis, each as large as the config
        # field ending in its name says (Mllama's ``max_num_tiles``), else 1
        read = _SHAPE_READ.search(why)
        axes = [a.strip() for a in read.group(1).split(",")] if read else []
        have = int(unpacked.group(2))
        named = {read.group(2)} & set(floats) if read and len(axes) == have + more else set()
        for name in named or [k for k, v in floats.items() if v.dim() >= 3]:
            v = floats[name]
            if v.dim() != have or v.dim() < 3:  # patch rows are remade as patch images above
                continue
            by_config = tuple(_axis_size(cfg, a) for a in axes[1:1 + more]) if axes else (1,) * more
            for lacking in dict.fromkeys([by_config, (1,) * more]):
                out.append((name, (int(v.shape[0]), *lacking, *(int(d) for d in v.shape[1:]))))
    if _TOO_SMALL.search(why):
        # a pooling or patching layer deep in the model left with less than its window: a larger
        # image, twice and four times the side (the shrunk config does not tie the image size)
        for name, v in floats.items():
            if v.dim() == 4 and v.shape[1] <= 4:
                out.extend((name, (*v.shape[:2], v.shape[2] * k, v.shape[3] * k)) for k in (2, 4))
    m = _NORMALIZED.search(why)
    if m:
        want, shape = int(m.group(1)), tuple(int(x) for x in m.group(2).split(","))
        out.extend((name, (*shape[:-1], want)) for name, v in floats.items() if tuple(v.shape) == shape)
    m = _SPLIT_SUM.search(why)
    if m:
        # each example's tiles as many as the model counts for its image (LLaVA-NeXT splits the
        # features of (batch, tiles, c, h, w) by the tiles its image size needs; a processor pads
        # every example to the largest count)
        have, sizes = int(m.group(1)), [int(x) for x in m.group(2).split(",")]
        for name, v in floats.items():
            if v.dim() == 5 and v.shape[0] == len(sizes) and v.shape[0] * v.shape[1] == have and len(set(sizes)) == 1:
                out.append((name, (v.shape[0], sizes[0], *v.shape[2:])))
    said = _reduction(why)
    if said:
        rows, have, want = said
        tensors = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor) and v.dim() >= 2}
        for name, v in [(k, v) for k, v in tensors.items() if v.shape[-1] == have and v.numel() == rows * have]:
            out.append((name, (*v.shape[:-1], want)))
            if v.dim() == 3:  # one vector per example (PI0's robot state), not one per position
                out.append((name, (v.shape[0], want)))
            if v.dim() > 3:  # an image read as patch rows: (batch, patches, features)
                out.append((name, (v.shape[0], rows // v.shape[0], want)))
    return [o for o in out if math.prod(o[1]) <= _MAX_REMADE]


_MAX_REMADE = 2**25  # elements of an input a failure's shape remakes: a larger ask is a misreading


def _with_companions(inputs: Mapping[str, Any], o: tuple[str, tuple[int, ...]]
                     ) -> list[tuple[tuple[str, tuple[int, ...]], ...]]:
    """``o`` alone, then with the integer inputs given per example remade per item of the axes
    ``o`` adds after the batch axis: Mllama's (batch, images, tiles, c, h, w) pixels come with
    ``aspect_ratio_ids`` per image (batch, images) and ``aspect_ratio_mask`` per tile (batch,
    images, tiles); each such input at each prefix of the new leading axes."""
    name, shape = o
    v = inputs.get(name)
    out: list[tuple[tuple[str, tuple[int, ...]], ...]] = [(o,)]
    if not isinstance(v, torch.Tensor) or len(shape) <= v.dim() or shape[0] != v.shape[0] \
            or tuple(shape[len(shape) - v.dim() + 1:]) != tuple(v.shape[1:]):
        return out
    lead = shape[:len(shape) - v.dim() + 1]  # the batch axis and the axes added after it
    others = [k for k, t in inputs.items() if k != name and isinstance(t, torch.Tensor) and not t.is_floating_point()
              and t.dim() >= 1 and t.shape[0] == shape[0] and t.dim() < len(lead) and not k.endswith("input_ids")][:3]
    options = [[None, *(lead[:n] for n in range(2, len(lead) + 1) if lead[:n] != tuple(inputs[k].shape))]
               for k in others]
    for pick in itertools.product(*options):
        extra = tuple((k, tuple(s)) for k, s in zip(others, pick) if s is not None)
        if extra:
            out.append((o, *extra))
    return out


def _with_shapes(inputs: Mapping[str, Any], shaped: tuple[tuple[str, tuple[int, ...]], ...], seed: int) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    out = dict(inputs)
    for name, shape in shaped:
        old = out.get(name)
        if name in _TOKEN_MASKS and len(shape) == 2:
            out[name] = _mask(name, (shape[0], shape[1]), torch.long if old is None else old.dtype)
        elif old is None:  # a mask the inputs left out: every position kept
            out[name] = torch.ones(shape, dtype=torch.long)
        elif old.is_floating_point():
            out[name] = torch.randn(shape, generator=g, dtype=old.dtype)
        elif old.numel() and bool((old == old.flatten()[0]).all()):  # a mask of ones stays ones
            out[name] = torch.full(shape, int(old.flatten()[0]), dtype=old.dtype)
        else:  # ids keep their range
            out[name] = torch.randint(0, max(2, int(old.max()) + 1), shape, generator=g, dtype=old.dtype)
    return out


def _paths(cfg: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, cfg
    for name, sub in _subconfigs(cfg).items():
        yield from _paths(sub, (*path, name))


def _reduction(why: str) -> tuple[int, int, int] | None:
    """A projection's failure: (rows, the width it was given, the width it reads)."""
    m = _REDUCTION.search(why) or _MAT1_MAT2.search(why)  # the fake-tensor and the real-run wording
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def _shows_input(inputs: Mapping[str, Any], rows: int, have: int) -> bool:
    """Whether an input is the (rows, have) operand a projection's failure shows (batch and
    sequence axes flattened)."""
    return any(isinstance(v, torch.Tensor) and v.dim() >= 2 and v.shape[-1] == have and v.numel() == rows * have
               for v in inputs.values())


def _repair_widths(cfg: Any, why: str, inputs: Mapping[str, Any] | None) -> tuple[Fix, ...]:
    """A projection fed by another layer, not by an input, reading a width that layer does not
    produce: the config sizes the two independently where the checkpoint ties them (Llama 4's
    vision projector reads ``intermediate_size`` features from a pixel shuffle that makes
    ``hidden_size / ratio**2`` of them; its own default config breaks the tie). Every width field
    of the config tree as wide as the projection reads becomes as wide as it was given. Where an
    input is the operand the message shows, the input is what is wrong (:func:`_reshaped`)."""
    said = _reduction(why)
    if said is None or inputs is None:
        return ()
    rows, have, want = said
    if have == want or _shows_input(inputs, rows, have):
        return ()
    return tuple((path, key, have, f"{key} (as wide as its input)") for path, c in _paths(cfg)
                 for key, v in vars(c).items()
                 if _is_int(v) and not isinstance(v, bool) and v == want and _width_like(key.lower()))


def _repair(cfg: Any, why: str, inputs: Mapping[str, Any] | None = None) -> tuple[Fix, ...]:
    """Config changes that answer a probe failure the model's own hard-coded defaults cause.

    Multimodal rotary code reads ``rope_parameters.get("mrope_section", [8, 12, 12])``: a default
    written for the checkpoint's rotary dim, which the default config (and any smaller one) does
    not have. The split sizes the model asked for are scaled to the rotary dim it has; sections
    left unset get three. Position ids counted from an unset padding id get one. A projection
    between two layers whose widths the config does not tie gets them tied
    (:func:`_repair_widths`, given the ``inputs`` the failure ran)."""
    if widths := _repair_widths(cfg, why, inputs):
        return widths
    if "NoneType" in why and re.search(r"\bpad(ding)?_(idx|token_id)\b", why):
        # position ids counted from the padding id (RoBERTa-style, ESM) on a config that leaves it unset
        return tuple((path, "pad_token_id", 1, "pad_token_id (unset)") for path, c in _paths(cfg)
                     if _has(c, "pad_token_id") and _get(c, "pad_token_id") is None)
    if "NoneType" in why and "mrope_section" in why:
        # multimodal rotary code that reads its sections from a config that leaves them unset: the
        # rotary half split over (time, height, width)
        unset: list[Fix] = []
        for path, c in _paths(cfg):
            rope, heads, width = _get(c, "rope_parameters"), _get(c, "num_attention_heads"), _main_width(c)
            head = _get(c, "head_dim") or (width // heads if width and _is_int(heads) and heads else None)
            if isinstance(rope, dict) and rope.get("mrope_section") is None and _is_int(head) and head >= 12:
                third = head // 2 // 3
                unset.append((path, "rope_parameters", {**rope, "mrope_section": [head // 2 - 2 * third, third, third]},
                              "rope_parameters.mrope_section (unset)"))
        return tuple(unset)
    m = re.search(r"split_sizes to sum exactly to (\d+).*?split_sizes=\[([\d, ]+)\]", why)
    if not m:
        return ()
    total, sizes = int(m.group(1)), [int(x) for x in m.group(2).split(",")]
    if len(sizes) < 2 or total < len(sizes):
        return ()
    scaled = [max(1, x * total // sum(sizes)) for x in sizes]
    scaled[0] += total - sum(scaled)
    fixes: list[Fix] = []
    for path, c in _paths(cfg):
        rope = _get(c, "rope_parameters")
        if isinstance(rope, dict) and rope.get("mrope_section") != scaled:
            fixes.append((path, "rope_parameters", {**rope, "mrope_section": scaled}, "rope_parameters.mrope_section"))
    return tuple(fixes)


_NO_ATTRIBUTE = re.compile(r"'(\w+)' object has no attribute '(\w+)'")
_CONFIG_LIST = re.compile(r"config\.(\w+)\s*\[")
_LITERAL = re.compile(r"""[!=]=\s*["'](\w+)["']""")


def _known_value(cfg: Any, owner: Any, name: str) -> Any:
    """A value for a field ``owner`` lacks: the nearest config in the tree that has it, a rotary
    parameter of that name, else the default a config class of the same model module declares,
    its parent's first (T5Gemma2's encoder sub-config reads the ``dropout_rate`` only its parent
    declares)."""
    import sys

    for _, c in _paths(cfg):
        v = _get(c, name, _SAME)
        if c is not owner and v is not _SAME and v is not None:
            return v
    for _, c in _paths(cfg):
        rope = _get(c, "rope_parameters")
        if isinstance(rope, dict) and rope.get(name) is not None:
            return rope[name]
    module = sys.modules.get(type(owner).__module__)
    classes = [obj for obj in (vars(module).values() if module else ()) if isinstance(obj, type)]
    # the parent config that holds ``owner`` first (Pix2Struct's text sub-config: its parent's
    # 0.02, not the 1e-10 its vision sibling declares)
    parents = [c for c in classes if type(owner) in dict(getattr(c, "sub_configs", None) or {}).values()]
    for obj in parents + [c for c in classes if c not in parents]:
        if dataclasses.is_dataclass(obj):
            v = _declared(obj).get(name, dataclasses.MISSING)
            if v is not dataclasses.MISSING and v is not None and v != "<factory>":
                return v
    stand_in = _stand_in(owner, name)  # declared nowhere (Qwen3-Omni's talker reads a shared expert's width)
    return _SAME if stand_in is None else stand_in


_WIDTH_FIELD = re.compile(r"_size$|_dim$")


def _stand_in(owner: Any, name: str) -> int | None:
    """A value for a size field no config sets: a width as wide as ``owner``'s feed-forward (or
    model), a count 2; None for any other field."""
    if _WIDTH_FIELD.search(name):
        wide = _get(owner, "intermediate_size") or _get(owner, "hidden_size")
        return int(wide) if _is_int(wide) else None
    return 2 if re.search(r"^num_|top_k|expert", name) else None


def _repair_build(cfg: Any, err: BaseException) -> tuple[Fix, ...]:
    """Config changes that let a model class be instantiated from a default config that its own
    code cannot read (transformers ships configs whose checkpoints set what the default leaves out):

    - a sub-config without a field the model reads: the value from elsewhere in the config tree;
    - per-layer-type rotary parameters looked up by a layer type the flat (or empty) dict lacks:
      one default rotary entry per layer type;
    - a per-layer list left None (``layer_types``, ``mlp_layer_types``): one entry per layer, the
      standard ``full_attention`` or the kind the failing line compares against;
    - a tuple default the model code concatenates to a list: that field as a list."""
    text = f"{type(err).__name__}: {err}"
    m = _NO_ATTRIBUTE.search(text)
    if isinstance(err, AttributeError) and m:
        cls_name, name = m.groups()
        for path, c in _paths(cfg):
            if type(c).__name__ == cls_name:
                value = _known_value(cfg, c, name)
                return () if value is _SAME else ((path, name, value, f"{name} (missing)"),)
        return ()
    if isinstance(err, KeyError) and err.args and isinstance(err.args[0], str):
        kind = err.args[0]
        for path, c in _paths(cfg):
            types = _get(c, "layer_types")
            rope = _get(c, "rope_parameters")
            if isinstance(types, (list, tuple)) and kind in types and isinstance(rope, dict) and kind not in rope:
                theta = rope.get("rope_theta") or getattr(type(c), "default_theta", None) or 10000.0
                flat = {k: v for k, v in rope.items() if not isinstance(v, dict)}
                entry = {**flat, "rope_type": "default", "rope_theta": theta}
                nested = {t: entry for t in dict.fromkeys(types)}
                return ((path, "rope_parameters", nested, "rope_parameters per layer type"),)
        return ()
    if isinstance(err, TypeError) and 'concatenate list (not "tuple")' in text:
        # a default declared as a tuple that the model code extends as a list (ViTMatte's
        # ``[config.hidden_size] + config.fusion_hidden_sizes``): the fields the line reads, as lists
        names = re.findall(r"config\.(\w+)", _model_line(err))
        return tuple((path, name, list(_get(c, name)), f"{name} (as a list)") for name in dict.fromkeys(names)
                     for path, c in _paths(cfg) if isinstance(_get(c, name), tuple))
    if isinstance(err, TypeError) and "NoneType" in text:
        line = _model_line(err)
        for name in _CONFIG_LIST.findall(line):
            if not name.endswith("layer_types"):
                continue
            for path, c in _paths(cfg):
                layers = _layer_count(c)
                if _has(c, name) and _get(c, name) is None and layers:
                    lit = _LITERAL.search(line)
                    kind = "full_attention" if name == "layer_types" or lit is None else lit.group(1)
                    return ((path, name, [kind] * layers[1], f"{name} (unset)"),)
        return _unset_sizes(cfg, re.findall(r"config\.(\w+)", line))
    return ()


_MOE_FIELD = re.compile(r"expert|moe")


def _unset_sizes(cfg: Any, read: list[str]) -> tuple[Fix, ...]:
    """Counts and widths the failing line reads that the default config leaves None (Diffusion
    Gemma builds a router of ``num_experts`` outputs that only checkpoints set): widths as wide
    as the config's feed-forward, counts 2; a mixture of experts' unset fields all at once (its
    ``top_k_experts`` fails only in forward)."""
    for name in dict.fromkeys(read):
        for path, c in _paths(cfg):
            if not _has(c, name) or _get(c, name) is not None:
                continue
            family = [k for k in vars(c) if not k.startswith("_") and _get(c, k) is None and _MOE_FIELD.search(k)] \
                if _MOE_FIELD.search(name) else []
            return tuple((path, k, v, f"{k} (unset)") for k in dict.fromkeys([name, *family])
                         if (v := _stand_in(c, k)) is not None)
    return ()


def _instantiate_repaired(tf: Any, head: str, cfg: Any, seed: int,
                          device: str | torch.device = "meta") -> tuple[nn.Module, tuple[Fix, ...]]:
    """The model on ``device``, with the config repairs its constructor's failures ask for. On
    the CPU, weight initialisation runs and can ask for more (Pix2Struct's text sub-config lacks
    the ``initializer_range`` its parent declares)."""
    fixes: tuple[Fix, ...] = ()
    for _ in range(4):
        try:
            with torch.device("meta") if str(device) == "meta" else contextlib.nullcontext():
                torch.manual_seed(seed)
                return _instantiate(tf, head, _apply_fixes(cfg, fixes)), fixes
        except Exception as err:
            more = _repair_build(_apply_fixes(cfg, fixes), err)
            if not more or all(f in fixes for f in more):
                raise
            fixes = (*fixes, *more)
    raise HFError(f"{head}: too many config repairs")


def _apply_fixes(cfg: Any, fixes: tuple[Fix, ...]) -> Any:
    if not fixes:
        return cfg
    import copy

    cfg = copy.deepcopy(cfg)
    for path, key, value, _ in fixes:
        node = cfg
        for part in path:
            node = getattr(node, part)
        setattr(node, key, value)
    return cfg


def CONFIG_MAPPING_CLS(model_type: str) -> Any:  # noqa: N802 (reads as the mapping it wraps)
    from transformers import CONFIG_MAPPING

    return CONFIG_MAPPING[model_type]


def _for_class(cls: type, cfg: Any) -> Any:
    """The config a model class takes: ``cfg`` itself, or its sub-config of the class's
    ``config_class`` where the auto mapping pairs a composite config with a sub-model's class
    (``MusicgenForCausalLM`` takes the decoder's config, ``Emu3ForCausalLM`` the text config)."""
    wanted = getattr(cls, "config_class", None)
    if not isinstance(wanted, type) or isinstance(cfg, wanted):
        return cfg
    return next((sub for _, sub in _paths(cfg) if isinstance(sub, wanted)), cfg)


_ENCODERS: dict[type, type] = {}


def _entry_class(cls: type) -> type:
    """``cls``, or for a model class without ``forward`` that encodes (a VQ-VAE tokenizer with
    only ``encode`` and ``decode``) the same class whose ``forward`` is its ``encode``: what a user
    of the model calls, and a call the checks can run. The subclass keeps the name, so reports
    and state-dict keys are the model's."""
    forward = getattr(cls, "forward", None)
    if getattr(forward, "__name__", "") != "_forward_unimplemented" or not callable(getattr(cls, "encode", None)):
        return cls
    if cls not in _ENCODERS:
        model_cls: Any = cls
        _ENCODERS[cls] = type(cls.__name__, (cls,), {"forward": model_cls.encode, "__module__": cls.__module__,
                                                     "__qualname__": cls.__qualname__})
    return _ENCODERS[cls]


def _head_class(tf: Any, head: str) -> Any:
    """A head named by transformers' exports, or ``module:Class`` where it is not exported."""
    module, _, name = head.rpartition(":")
    return getattr(importlib.import_module(module), name) if module else getattr(tf, head)


def _instantiate(tf: Any, head: str, cfg: Any) -> nn.Module:
    cls = _entry_class(_head_class(tf, head))
    cfg = _for_class(cls, cfg)
    model: nn.Module = cls._from_config(cfg) if hasattr(cls, "_from_config") else cls(cfg)
    meta = torch.empty(0).device.type == "meta"  # built under torch.device("meta")
    if meta and any(t.device.type != "meta" for t in (*model.parameters(), *model.buffers())):
        # the legacy ``torch.Tensor(n, d)`` constructor ignores the device context (OneFormer's
        # level embedding, LW-DETR's layer scales): a CPU parameter in a meta model
        model.to("meta")
    return model


def _choose(model_type: str, overrides: Mapping[str, Any], batch: int, seq: int, seed: int) -> _Choice:
    """Search plans x heads x input layouts on the meta device; the first whose forward runs wins."""
    key = (model_type, tuple(sorted((k, repr(v)) for k, v in overrides.items())), batch, seq, seed)
    if key in _CHOICES:
        return _CHOICES[key]
    tf = _transformers()
    heads = head_classes(model_type)
    try:
        enc_dec = bool(_get(CONFIG_MAPPING_CLS(model_type)(), "is_encoder_decoder", False))
    except Exception:  # a default config that cannot be built: make_config below says why
        enc_dec = False
    if enc_dec:
        heads.sort(key=lambda h: h[0] not in ("seq_to_seq_causal_lm", "speech_seq_2_seq"))
    if not heads:
        raise HFError(f"{model_type} has no model class in transformers' auto mappings (a configuration-only or "
                      "sub-model type)")
    tried: list[str] = []
    first: _Choice | None = None
    t0 = time.perf_counter()
    config_errors: list[str] = []
    previous: set[str] | None = None
    hopeless: set[tuple[str, str]] = set()  # (head, layout) pairs that fail whatever the size
    refused_ids: set[tuple[str, str]] = set()  # (plan, head) whose input_ids the model refused by name
    limited: _Choice | None = None  # the first candidate a real run passed where fake tensors could not decide
    limited_inputs: frozenset[str] = frozenset()

    def drops_limited(used: Mapping[str, Any]) -> bool:
        """Whether inputs leave out some a real run took (Kimi-K2.5's text without its image):
        the layouts come most faithful first, so the earlier candidate is kept."""
        return limited is not None and frozenset(used) < limited_inputs

    stopped: tuple[_Choice, frozenset[str]] | None = None  # the first candidate a value branch stopped

    def with_tokens(inputs: dict[str, Any], config: Any, asked: list[str], said: tuple[str, int] | None
                    ) -> tuple[dict[str, Any], tuple[str, int]] | None:
        """The text holding ``said`` media tokens, where a real run passes on it (else on as many
        over the embedding width, where the check counted numbers): the inputs and the tokens."""
        for _ in range(2):
            if said is None:
                break
            remade = _with_tokens(inputs, config, said)  # masks as long as the text:
            remade.update(_named_inputs(asked, config, remade, batch, seq, seed))
            again = _real_run(tf, head, config, remade, seed, model)
            if again is None:
                return remade, said
            # the same count again: the message counted numbers, not feature vectors (Mistral 3's
            # "tokens: 2048, features: 2048" for 64 vectors as wide as its text embeddings)
            width = _embedding_width(model) if _tokens_said(again, config, inputs) == said else 0
            said = (said[0], said[1] // width) if width and said[1] % width == 0 else None
        return None

    def real_run(inputs: dict[str, Any], config: Any = None, asked: list[str] | None = None
                 ) -> tuple[str | None, dict[str, Any], tuple[str, int] | None]:
        """A real run of the candidate (of ``config``, else the plan's), and where it failed for
        want of media tokens in the text, of the text holding them: its failure, the inputs it
        ran, the tokens it added."""
        config = cfg if config is None else config
        real = _real_run(tf, head, config, inputs, seed, model)
        placed = with_tokens(inputs, config, named if asked is None else asked, _tokens_said(real or "", config, inputs))
        return (None, *placed) if placed else (real, inputs, None)

    def media_tokens(inputs: dict[str, Any], config: Any, named: list[str], tower: nn.Module
                     ) -> tuple[str, int] | None:
        """Media beside text that passed on fake tensors, which defer the check that the text holds
        one token per feature: a real run counts them (Granite Docling's images came with none,
        and the CPU example failed); where the count its failure says is not the features'
        (Granite Speech's says the batch), ``tower`` counts them, as the layouts do."""
        if "input_ids" not in inputs or not _runs_on_cpu(model) or not any(
                isinstance(v, torch.Tensor) and v.is_floating_point() for v in inputs.values()):
            return None
        ids = inputs["input_ids"]
        held = (_media_token(config, kind) for kind in ("image", "video", "audio"))
        if isinstance(ids, torch.Tensor) and any(_is_int(t) and bool((ids == int(t)).any()) for t in held):
            return None  # the layout placed its tokens already (LLaVA's counted images): nothing to count
        real, _, said = real_run(inputs, config, named)
        if real is None:
            return said
        counted = _counted_by_tower(tower, config, inputs)
        placed = with_tokens(inputs, config, named, counted) if counted != said else None
        return placed[1] if placed else None

    for plan in PLANS:
        failures: set[str] = set()
        try:
            cfg = make_config(model_type, overrides, plan)
        except OverrideError:
            raise
        except HFError as err:
            config_errors.append(str(err))
            tried.append(f"{plan.name}: {err}")
            continue
        plain_cfg = cfg
        for task, head, labels in heads:
            try:
                model, built = _instantiate_repaired(tf, head, plain_cfg, seed)
                model.eval()
            except Exception as err:
                tried.append(f"{plan.name}/{head}: build: {_short(err, 160)}")
                continue
            cfg = _apply_fixes(plain_cfg, built)
            try:
                _default_language(model, cfg)
                layouts = _input_layouts(model, _for_class(type(model), cfg), labels, batch, seq, seed)
            except Exception as err:
                tried.append(f"{plan.name}/{head}: inputs: {_short(err, 160)}")
                continue
            for layout, inputs in layouts:
                if first is None:
                    first = _Choice(plan, task, head, layout, False, tried, built)
                if (head, layout) in hopeless or ("*", layout) in hopeless:
                    continue
                if layout == _EMBEDS and (plan.name, head) not in refused_ids:
                    continue  # embeddings only where the ids were refused: they skip the model's own table
                why = _probe(model, inputs)
                fixes = _repair(cfg, why, inputs) if why is not None else ()
                if fixes:
                    try:
                        with torch.device("meta"):
                            torch.manual_seed(seed)
                            repaired = _instantiate(tf, head, _apply_fixes(cfg, fixes))
                        repaired.eval()
                        if _probe(repaired, inputs) is None:
                            choice = _Choice(plan, task, head, layout, True, tried, (*built, *fixes),
                                             tokens=media_tokens(inputs, _apply_fixes(cfg, fixes), [], repaired))
                            _CHOICES[key] = limited if limited and drops_limited(inputs) else choice
                            return _CHOICES[key]
                    except Exception as err:
                        tried.append(f"{plan.name}/{head}/{layout} repaired: {_short(err, 160)}")
                named: list[str] = []
                current = inputs
                while why is not None and len(named) < 4 and (asked := _asked_for(model, current, why)):
                    named += asked  # "You have to specify bbox": give it one and try again
                    current = {**inputs, **_named_inputs(named, cfg, inputs, batch, seq, seed)}
                    why = _probe(model, current)
                shaped: tuple[tuple[str, tuple[int, ...]], ...] = ()
                for _ in range(2):  # the layer reading an input says the shape it wants
                    if why is None:
                        break
                    results = [((*shaped, *os), t, _probe(model, t)) for o in _reshaped(why, current, cfg)
                               for os in _with_companions(current, o) for t in [_with_shapes(current, os, seed)]]
                    best = next((r for r in results if r[2] is None), None) or next((r for r in results if r[2] != why), None)
                    if best is None:
                        break
                    shaped, current, why = best
                # layouts holding every input the first stopped one holds (MiniCPM-V's packed patches
                # with their grid, after the image alone): a real run trades no input away
                same_inputs = stopped is None or (stopped[1] <= frozenset(inputs) and stopped[0].head == head)
                if why is not None and limited is None and same_inputs and any(k in why for k in _PROBE_LIMITS):
                    # export may manage it; where fake tensors cannot decide, a real run decides
                    # between layouts of the same inputs (a waveform with or without its channel
                    # axis); the first such candidate stays the choice if no real run passes, so a
                    # real-run failure never trades inputs away (GLM-5-Next keeps its image)
                    if stopped is None:
                        stopped = (_Choice(plan, task, head, layout, False, tried, built, tuple(named), shaped),
                                   frozenset(inputs))
                    real, current, tokens = real_run(current)
                    for o in _reshaped(real or "", current, cfg):  # the real run's error shows an input's shape
                        again, remade, said = real_run(_with_shapes(current, (o,), seed))
                        more = _asked_for(model, remade, again) if again is not None else []
                        if more:  # the reshaped input let the run on to an argument it names (PI0's
                            # robot state, then its cameras' pixel_attention_mask)
                            again, remade, said = real_run({**remade, **_named_inputs([*named, *more], cfg, remade,
                                                                                      batch, seq, seed)})
                        if again is None:
                            shaped, current, real, tokens, named = (*shaped, o), remade, None, said, [*named, *more]
                            break
                    asked = _asked_for(model, current, real) if real is not None else []
                    run_fixes: tuple[Fix, ...] = ()
                    if asked:  # the real run's error names an optional argument (UDOP's bbox)
                        remade = {**current, **_named_inputs(asked, cfg, current, batch, seq, seed)}
                        again, run_fixes = _real_run_repaired(tf, head, cfg, remade, seed, model)
                        if again is None:
                            named, current, real = [*named, *asked], remade, None
                    elif real is not None:
                        real, run_fixes = _real_run_repaired(tf, head, cfg, current, seed, model, real)
                    if real is None:
                        limited = _Choice(plan, task, head, layout, False, tried, (*built, *run_fixes), tuple(named),
                                          shaped, tokens)
                        # a run too large to make proves nothing: it does not outrank what the probe passes
                        limited_inputs = frozenset(current) if _runs_on_cpu(model) else frozenset()
                    else:
                        why = f"{why}; on real values: {real}"
                if why is None and limited and drops_limited(current):
                    _CHOICES[key] = limited
                    return limited
                if why is None:
                    asked = _asked_in_training(model, current)
                    if asked:  # Molmo2 needs ``mm_token_type_ids`` in training only
                        remade = {**current, **_named_inputs(asked, cfg, current, batch, seq, seed)}
                        if _probe(model, remade) is None:
                            named, current = [*named, *asked], remade
                    choice = _Choice(plan, task, head, layout, True, tried, built, tuple(named), shaped,
                                     media_tokens(current, cfg, named, model))
                    _CHOICES[key] = choice
                    return choice
                tried.append(f"{plan.name}/{head}/{layout}: {why}")
                failures.add(why)
                if layout == "input_ids" and "input_ids" in why:
                    refused_ids.add((plan.name, head))
                if any(k in why for k in _SIZE_INDEPENDENT):
                    # a branch on values fails in every head that runs the same tower
                    hopeless.add(("*" if "ata-dependent" in why or "DataDependent" in why else head, layout))
            if time.perf_counter() - t0 > _BUDGET_S and first is not None:
                break
        if time.perf_counter() - t0 > _BUDGET_S and first is not None:
            break
        if plan.name == "layers-only" and first is not None and previous is not None and failures and failures <= previous:
            break  # unshrunk widths failed the same way: size is not the cause, skip the full-size default
        if plan.name == "small":
            previous = failures
    if first is None:
        why = tried[0] if tried else (config_errors[0] if config_errors else "no input layout for its forward")
        missing = re.search(r"requires the (\w+) library", " ".join(tried))
        if missing:
            why = f"its model class needs the {missing.group(1)} library, which is not installed"
        raise HFError(f"cannot build {model_type} on CPU from its config: {why}")
    _CHOICES[key] = limited or (stopped[0] if stopped else None) or first
    return _CHOICES[key]


def image_size_overrides(cfg: Any, size: int) -> dict[str, Any]:
    """``--set`` overrides bringing every ``image_size`` above ``size`` (in the config and its
    sub-configs) down to it: the oracle's float64 copy of SAM at 1024x1024 needs about 70 GiB,
    at 256x256 a sixteenth of that, and the fields that follow the image size are derived."""
    out: dict[str, Any] = {}

    def walk(c: Any, path: str) -> None:
        for key in list(vars(c)):
            v = _get(c, key)
            if key == "image_size" and (_is_int(v) and v > size or _int_list(v) and max(v) > size):
                out[path + key] = [size] * len(v) if isinstance(v, (list, tuple)) else size
            elif hasattr(v, "to_dict") and hasattr(v, "model_type"):
                walk(v, f"{path}{key}.")

    walk(cfg, "")
    return out


def build(
    model_type: str,
    overrides: Mapping[str, Any] | None = None,
    batch: int = 2,
    seq: int = 16,
    seed: int = 0,
    device: str | torch.device = "cpu",
    info: list[Built] | None = None,
) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """The model (the first head that returns a loss, else the base model) and its keyword inputs.

    ``info``, when given, receives a :class:`Built` saying which plan, head and inputs were chosen."""
    model_type = resolve_type(model_type)
    try:
        return _build(model_type, dict(overrides or {}), batch, seq, seed, device, info)
    except HFError:
        raise
    except Exception as err:  # transformers code raising on a config it shipped: a one-line reason
        raise HFError(f"cannot build {model_type}: {_short(err)}") from None


def _build(model_type: str, overrides: dict[str, Any], batch: int, seq: int, seed: int,
           device: str | torch.device, info: list[Built] | None) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    tf = _transformers()
    with _quiet():
        choice = _choose(model_type, overrides, batch, seq, seed)
        plan, task, head, layout, probed, tried, fixes = (choice.plan, choice.task, choice.head, choice.layout,
                                                          choice.probed, choice.tried, choice.fixes)
        cfg = _apply_fixes(make_config(model_type, overrides, plan), fixes)
        if str(device) != "meta":
            _check_fits_on_cpu(model_type, tf, head, cfg)
        try:
            model, more = _instantiate_repaired(tf, head, cfg, seed, device)
        except Exception as err:
            raise HFError(f"cannot build {model_type} ({head}): {_short(err)}") from None
        fixes = (*fixes, *more)
        model.eval()
        _default_language(model, cfg)
        layouts = dict(_input_layouts(model, _for_class(type(model), cfg), _label_kind(model_type, head), batch, seq,
                                      seed, only=layout))
    inputs = layouts.get(layout) or next(iter(layouts.values()))
    if choice.named:
        inputs = {**inputs, **_named_inputs(list(choice.named), cfg, inputs, batch, seq, seed)}
        layout = "+".join((layout, *choice.named))
    for i, (name, shape) in enumerate(choice.shaped):
        inputs = _with_shapes(inputs, choice.shaped[i:i + 1], seed)
        layout += f" ({name} as {list(shape)})"
    if choice.tokens:
        inputs = _with_tokens(inputs, cfg, choice.tokens)
        inputs.update(_named_inputs(list(choice.named), cfg, inputs, batch, seq, seed))
        layout += f" ({choice.tokens[1]} {choice.tokens[0]} tokens)"
    if info is not None:
        repaired = sorted({".".join((*path, what)) for path, _, _, what in fixes})
        name = plan.name + (f" (repaired {', '.join(repaired)})" if repaired else "")
        info.append(Built(model_type, name, task, head.rpartition(":")[2], layout, probed, list(tried)))
    return model, inputs


def cpu_memory() -> int:
    """Bytes of memory this machine has (8 GiB where it cannot say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not a POSIX system
        return 8 * 2**30


def _check_fits_on_cpu(model_type: str, tf: Any, head: str, cfg: Any) -> None:
    """Refuse, in one line, a model whose float32 weights alone take half the machine's memory
    (a type no plan could shrink: dots3's 20B, Molmo 2's 8.7B): building it gets the process
    killed, not an error."""
    with torch.device("meta"):
        probe = _instantiate(tf, head, cfg)
    n = sum(p.numel() for p in probe.parameters())
    if 4 * n > cpu_memory() // 2:
        raise HFError(f"cannot build {model_type} on CPU: {n / 1e9:.1f}B parameters take {4 * n / 2**30:.0f} GiB "
                      f"in float32, more than half this machine's {cpu_memory() / 2**30:.0f} GiB")


def _default_language(model: nn.Module, cfg: Any) -> None:
    """Models with per-language adapters (X-MOD) refuse to run until a language is chosen."""
    setter = getattr(model, "set_default_language", None)
    languages = _get(cfg, "languages")
    if callable(setter) and languages:
        with contextlib.suppress(Exception):
            setter(list(languages)[0])


def _label_kind(model_type: str, head: str) -> str:
    return next((labels for _, name, labels in head_classes(model_type) if name == head), "none")
