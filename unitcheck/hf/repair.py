"""Configs repaired from the errors their model classes raise when built or run (a field left
None, a width that must match another), and the real run that uses them."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from .common import HFError, _declared, _get, _has, _is_int, _paths
from .heads import _entry_class, _for_class, _head_class
from .runs import _failure, _model_line, _runs_on_cpu, _statement
from .shapes import _CONCATENATED, _reduction, _shows_input
from .shrink import _SAME, _layer_count, _main_width, _width_like, _width_list


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
        return _failure(err)
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


Fix = tuple[tuple[str, ...], str, Any, str]  # (path of sub-config names, field, value, what it sets)


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


def _repair_joined(cfg: Any, why: str, inputs: Mapping[str, Any] | None) -> tuple[Fix, ...]:
    """Two layers' outputs a concatenation joins, of widths the config sizes independently where
    the checkpoint ties them (DeepSeek-OCR 2's default config: its SAM neck's last
    ``downsample_channels`` 896 against the encoder's ``hidden_size`` 4096, 72 against 64 once
    shrunk). The width fewer fields hold, in width fields and width lists, becomes the other, so
    the fewest fields change; where the joining statement names an input, the input is what is
    wrong (:func:`_reshaped`), and nothing is repaired."""
    m = _CONCATENATED.search(why)
    if m is None or inputs is None:
        return ()
    statement = _statement(why) or why  # without a statement, the whole message
    if any(re.search(rf"\b{re.escape(k)}\b", statement) for k in inputs):
        return ()

    def holders(width: int) -> list[tuple[tuple[str, ...], str, Any]]:
        return [(path, key, v) for path, c in _paths(cfg) for key, v in vars(c).items()
                if (_is_int(v) and not isinstance(v, bool) and v == width and _width_like(key.lower()))
                or (isinstance(v, (list, tuple)) and width in v and _width_list(key.lower()))]

    (old, held), (new, other) = sorted(((w, holders(w)) for w in (int(m.group(1)), int(m.group(2)))),
                                       key=lambda t: len(t[1]))
    if not held or not other:
        return ()
    return tuple((path, key, new if _is_int(v) else type(v)(new if x == old else x for x in v),
                  f"{key} (as wide as what it is joined to)") for path, key, v in held)


# a model's own check of a count its config fixes: "Expected `image_tokens` to have shape
# `(batch_size, 1024)`, but got shape `torch.Size([2, 16])`"
_EXPECTED_COUNT = re.compile(r"to have shape `?\(batch_size, (\d+)\)`?,? but got shape `?torch\.Size\(\[\d+, (\d+)\]\)")
_COUNT_FIELD = re.compile(r"patch|grid|token")


def _repair_count(cfg: Any, why: str) -> tuple[Fix, ...]:
    """A count of tokens a config field fixes that the shrunk images do not give: Janus's VQ
    decodes ``num_patches`` x ``num_patches`` tokens, 32 x 32 in the default config, whatever the
    image size its encoder saw (4 x 4 at the small size). A patch, grid or token field whose
    value or square is the count expected takes the count the run had (or its side)."""
    m = _EXPECTED_COUNT.search(why)
    if m is None:
        return ()
    want, have = int(m.group(1)), int(m.group(2))
    if want == have:
        return ()
    side = math.isqrt(have)
    fixes: list[Fix] = []
    for path, c in _paths(cfg):
        for key, v in vars(c).items():
            if not _is_int(v) or isinstance(v, bool) or not _COUNT_FIELD.search(key.lower()):
                continue
            if v == want:
                fixes.append((path, key, have, f"{key} (the count its input gives)"))
            elif v * v == want and side * side == have:
                fixes.append((path, key, side, f"{key} (the grid its input gives)"))
    return tuple(fixes)


def _repair(cfg: Any, why: str, inputs: Mapping[str, Any] | None = None) -> tuple[Fix, ...]:
    """Config changes that answer a probe failure the model's own hard-coded defaults cause.

    Multimodal rotary code reads ``rope_parameters.get("mrope_section", [8, 12, 12])``: a default
    written for the checkpoint's rotary dim, which the default config (and any smaller one) does
    not have. The split sizes the model asked for are scaled to the rotary dim it has; sections
    left unset get three. Position ids counted from an unset padding id get one. A projection
    between two layers whose widths the config does not tie gets them tied, and so do two parts a
    concatenation joins (:func:`_repair_widths`, :func:`_repair_joined`, given the ``inputs`` the
    failure ran)."""
    if widths := _repair_widths(cfg, why, inputs) or _repair_joined(cfg, why, inputs) or _repair_count(cfg, why):
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
_GROUPS = re.compile(r"num_channels \((\d+)\) must be divisible by num_groups \((\d+)\)")


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
    groups = _GROUPS.search(text)
    if isinstance(err, ValueError) and groups:
        # a group norm whose group count the model code fixes (Emu3's VQ-VAE: 32) over channels
        # the shrink made fewer: every width scaled alike until those channels hold the groups,
        # so widths the model ties (its attention's hidden_size, base_channels x the last
        # multiplier) stay tied; entries under 16 are not widths, as in the shrink
        have, want = (int(x) for x in groups.groups())
        factor = want // math.gcd(have, want)
        return tuple((path, k, v * factor, f"{k} x{factor} ({want} groups)") for path, c in _paths(cfg)
                     for k, v in vars(c).items() if _is_int(v) and v >= 16 and _width_like(k.lower()))
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

    cfg = copy.deepcopy(cfg)
    for path, key, value, _ in fixes:
        node = cfg
        for part in path:
            node = getattr(node, part)
        setattr(node, key, value)
    return cfg


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
