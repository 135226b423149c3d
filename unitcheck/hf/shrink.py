"""A config shrunk field by field to a small size (width, heads, layers, experts), keeping the
relations its class checks: one scale factor per (sub-)config, derived fields left to the class."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .common import (
    CONFIG_MAPPING_CLS,
    SMALL_DEFAULTS,
    Plan,
    _declared,
    _get,
    _int_list,
    _is_int,
    _pow2_at_most,
    _round,
    _subconfigs,
)

# -- shrinking a config -----------------------------------------------------------------------

_WIDTH_KEYS = ("hidden_size", "d_model", "n_embd", "embed_dim", "dim", "hidden_dim", "width", "emb_dim", "embedding_dim")


_WIDTH_SUFFIX = (
    "hidden_size", "hidden_dim", "d_model", "n_embd", "embed_dim", "emb_dim", "embedding_size", "embedding_dim",
    "intermediate_size", "ffn_dim", "d_ff", "n_inner", "mlp_dim", "bottleneck_size", "lora_rank", "proj_dim",
    "projection_dim", "d_inner", "inner_dim", "conv_dim", "hidden_sizes", "embed_dims", "out_channels",
    "hidden_channels", "stage_out_channels", "filter_size", "fpn_dim", "expert_dim", "inner_size", "intermediate_dim",
    "_dim", "d_latents",
)


_WIDTH_EXACT = {"dim", "width", "channels", "d_inner", "in_channels_list"}


_HEAD_DIM_SUFFIX = ("head_dim", "head_size", "d_kv", "kv_channels", "dim_head", "rotary_dim", "rope_dim", "rope_head_dim",
                    "nope_head_dim", "v_head_dim", "qk_head_dim")


_NOT_SIZE = ("vocab", "position", "max_", "patch", "image", "kernel", "window", "stride", "mel", "label", "token",
             "num_channels", "sampling", "sample_rate", "bucket", "distance", "frames", "chunk", "codebook_size")


_LAYER_EXACT = {"num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers",
                "num_encoder_layers", "num_decoder_layers", "depth", "layers", "decoder_num_layers", "encoder_num_layers",
                "num_blocks", "text_layers", "vision_layers", "num_text_layers", "num_vision_layers",
                "num_self_attends_per_block"}


_LAYER_LISTS = ("depths", "blocks_per_stage", "num_layers_per_stage", "layers_per_stage")


_EXPERTS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "num_routed_experts")


_EXPERTS_PER_TOKEN = ("num_experts_per_tok", "moe_topk", "num_selected_experts", "experts_per_token", "moe_k",
                      "num_experts_per_token", "top_k", "router_top_k")


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


def _heads_list(value: Any) -> Any:
    """Per-stage head counts in the proportions they had, as powers of two up to 8 (Swin's 3,
    6, 12, 24 become 1, 2, 4, 8), so each divides its stage's shrunk width."""
    base = min(value)
    return type(value)(_pow2_at_most(max(1, x // base), 8) for x in value)


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
        # one entry per layer: cut to the layers kept
        cut = isinstance(value, (list, tuple, str)) and layer is not None and len(value) == layer[1] >= 5
        if low in _LAYER_LISTS and _int_list(value):
            # a stack counted in stages (Swin2SR's six residual groups: ``num_layers`` is
            # ``len(depths)``) keeps in its depths the stages every per-stage list keeps
            kept = [value[i] for i in keep] if cut and keep is not None else value
            return type(value)(min(x, SMALL_DEFAULTS["layers"]) for x in kept)
        if cut and keep is not None and (isinstance(value, (list, tuple)) or _layer_pattern(value)):
            picked = [value[i] for i in keep]
            staged = any(_int_list(v := values.get(k)) and len(v) == len(value) for k in _LAYER_LISTS)
            if staged and plan.widths and low.endswith("heads") and _int_list(picked):
                # per-stage heads shrink as a heads list does (cut alone, Swin2SR's two head counts
                # of 6 beside a 64-wide stage failed every build)
                return _heads_list(type(value)(picked))
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
        return _heads_list(value)
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
