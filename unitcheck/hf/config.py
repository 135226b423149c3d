"""``make_config``: a model type's config built small through its own class, with ``--set``
overrides, the attention implementation and the fields the class leaves unset filled in."""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..validate import check_override
from .common import (
    PLANS,
    SMALL_DEFAULTS,
    HFError,
    OverrideError,
    Plan,
    _declared,
    _get,
    _has,
    _int_list,
    _is_int,
    _paths,
    _short,
    _subconfigs,
    _transformers,
    _walk,
    resolve_type,
)
from .shrink import (
    _collect_necks,
    _collect_widths,
    _follow_image_sizes,
    _main_width,
    _Shrink,
    shrink_kwargs,
)

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
