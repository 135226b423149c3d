"""Checks at the boundary, shared by every loader: ``--set`` values against a config field,
example inputs, and JSON files the user points at.

They exist so that a bad value fails here, with the flag or file that carries it, instead of as an
exception deep inside a model constructor, the tracer or torch (which the CLI would call a bug).
"""

from __future__ import annotations

import json
import math
import re
import types
import typing
from collections.abc import Mapping
from typing import Any

from .errors import UnitcheckError

__all__ = ["InputError", "check_override", "apply_override", "check_example_inputs", "read_json",
           "is_size_field", "state_dict_mismatch", "load_error", "MAX_SIZE", "MAX_DEPTH"]

MAX_SIZE = 2**31 - 1
"""The largest value a size field (width, depth, heads, vocabulary) may take: beyond it no model
can be built, and a tensor dimension that large is not what a config field is for."""

MAX_DEPTH = 1024
"""The most layers a depth field may ask for: a deeper model takes hours to build and trace, and
such a value is a typo (``n_layer=1000000``), not a model."""

_DEPTH_FIELD = re.compile(r"(^|_)layers?$")
_SIZE_FIELD = re.compile(
    r"(_size|_dim|_layers?|_heads?|_embd|_embeddings|_positions)$|^(d_model|d_ff|d_kv|n_ctx|channels|n_classes)$"
)


class InputError(UnitcheckError, ValueError):
    """A ``--set`` value, example inputs or a JSON file that cannot be used: exit 2."""


def is_size_field(name: str) -> bool:
    """Widths, depths, head counts, vocabularies: fields that must be at least 1."""
    return bool(_SIZE_FIELD.search(name))


_KIND_NAMES = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
               "none": "none"}


def _kind(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, (list, tuple, dict, set)):
        return "collection"
    return "other"


def _declared_kinds(declared: Any) -> set[str] | None:
    """The kinds a field's annotation admits ({'int', 'none'} for ``int | None``); None when the
    annotation says nothing usable."""
    if declared is None:
        return None
    if isinstance(declared, str):
        parts = [p.strip() for p in declared.split("|")]
        names = {"int": "int", "float": "float", "bool": "bool", "str": "str", "None": "none"}
        return {names.get(p, "other") for p in parts}
    args = typing.get_args(declared) if isinstance(declared, types.UnionType) or typing.get_origin(declared) is typing.Union else (declared,)
    out: set[str] = set()
    for a in args:
        if a is type(None):
            out.add("none")
        elif a in (int, float, bool, str):
            out.add(a.__name__)
        else:
            out.add("other")
    return out


def _text(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def check_override(owner: str, key: str, value: Any, current: Any, declared: Any = None) -> Any:
    """The value to set for ``--set key=value`` on a field now holding ``current`` (annotated
    ``declared`` where known), converted where that is lossless (an integer for a float field).

    Type: the field's annotation, else the type of its current value. Range: numbers finite; a
    size field (``is_size_field``) from 1 to MAX_SIZE; a number whose current value is not
    negative stays not negative. Raises InputError naming the flag, the field and its value now.
    """
    flag = f"--set {key}={_text(value)}"
    now = f" (now {_text(current)})" if current is not None else ""
    kind = _kind(value)
    if kind == "float" and not math.isfinite(value):
        raise InputError(f"{flag}: {owner} field {key!r} needs a finite number{now}")
    allowed = _declared_kinds(declared)
    if allowed is None:
        cur = _kind(current)
        allowed = None if cur in ("none", "other") else {cur}
    if allowed is not None and "other" not in allowed:
        if "collection" in allowed:
            raise InputError(f"{flag}: {owner} field {key!r} holds {type(current).__name__} "
                             f"{current!r}, which --set cannot give")
        if kind == "int" and "int" not in allowed and "float" in allowed:
            value, kind = float(value), "float"
        if kind not in allowed:
            wanted = " or ".join(_KIND_NAMES.get(k, k) for k in sorted(allowed))
            got = f"the string {value!r}" if kind == "str" else _text(value)
            raise InputError(f"{flag}: {owner} field {key!r} takes {wanted}{now}, not {got}")
    if kind in ("int", "float"):
        high = MAX_DEPTH if _DEPTH_FIELD.search(key) else MAX_SIZE
        if is_size_field(key) and not 1 <= value <= high:
            raise InputError(f"{flag}: {owner} field {key!r} is a size and must lie in "
                             f"[1, {high}]{now}")
        if isinstance(current, (int, float)) and not isinstance(current, bool) and current >= 0 and value < 0:
            raise InputError(f"{flag}: {owner} field {key!r} must not be negative{now}")
        if kind == "int" and abs(value) >= 2**63:
            raise InputError(f"{flag}: {owner} field {key!r} is out of the 64-bit integer range")
    return value


def apply_override(config: Any, key: str, value: Any, owner: str) -> None:
    """``check_override`` against the config object's field, then set it. A library's own
    validation of the assignment (transformers' strict config fields) becomes an InputError."""
    import dataclasses

    mapped = getattr(config, "attribute_map", {}).get(key, key)
    declared = None
    if dataclasses.is_dataclass(config):
        declared = next((f.type for f in dataclasses.fields(config) if f.name == mapped), None)
    value = check_override(owner, key, value, getattr(config, key, None), declared)
    try:
        setattr(config, key, value)
    except Exception as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[-1].strip()
        raise InputError(f"--set {key}={_text(value)}: {owner} rejected it: {first}") from None


def _has_tensor(obj: Any) -> bool:
    import torch

    if isinstance(obj, torch.Tensor):
        return True
    if isinstance(obj, (list, tuple)):
        return any(_has_tensor(x) for x in obj)
    if isinstance(obj, Mapping):
        return any(_has_tensor(x) for x in obj.values())
    return False


def check_example_inputs(example: Any, where: str) -> Any:
    """Example inputs must be a tensor, a tuple or list of positional inputs, a dict of keyword
    inputs or an ``(args, kwargs)`` pair, holding at least one tensor; ``where`` names their
    source (a factory, a file) in the message."""
    import torch

    if isinstance(example, torch.Tensor):
        return example
    if isinstance(example, Mapping):
        bad = [k for k in example if not isinstance(k, str)]
        if bad:
            raise InputError(f"{where}: keyword inputs need string names, got {bad[0]!r}")
    elif not isinstance(example, (list, tuple)):
        raise InputError(f"{where}: example inputs must be a tensor, a tuple of tensors or a dict of "
                         f"keyword tensors, not {type(example).__name__} {str(example)[:60]!r}")
    if not _has_tensor(example):
        raise InputError(f"{where}: the example inputs hold no tensor; give tensors "
                         "(or pass --input, e.g. --input float32[8,16])")
    return example


def state_dict_mismatch(expected: Mapping[str, Any], found: Mapping[str, Any]) -> str | None:
    """One sentence on how ``found`` differs from a model's state dict (names and shapes), or
    None when it fits."""
    missing = [k for k in expected if k not in found]
    extra = [k for k in found if k not in expected]
    shapes = [f"{k} {tuple(getattr(found[k], 'shape', ()))} instead of {tuple(v.shape)}"
              for k, v in expected.items() if k in found and getattr(found[k], "shape", None) != v.shape]
    parts = []
    if missing:
        parts.append(f"{len(missing)} tensor(s) missing (e.g. {missing[0]})")
    if extra:
        parts.append(f"{len(extra)} unexpected (e.g. {extra[0]})")
    if shapes:
        parts.append(f"{len(shapes)} with another shape (e.g. {shapes[0]})")
    return "; ".join(parts) or None


def load_error(err: BaseException) -> str:
    """What ``torch.load`` (or safetensors) said about a file it cannot read, in a few words: the
    unpickler's advice on ``weights_only`` is about code, not about the user's file."""
    if type(err).__name__ == "UnpicklingError":
        return "not a file torch.save wrote, or one that holds code"
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    return f"{type(err).__name__}: {lines[0][:160]}" if lines else type(err).__name__


def read_torch_file(path: str, what: str) -> Any:
    """``torch.load`` of a user's file with ``weights_only``; a file torch cannot read (truncated,
    another format, a pickle that holds code) raises InputError naming it."""
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise InputError(f"{path} is not a readable {what}, truncated or damaged ({load_error(err)})") from None


def read_json(path: str, what: str) -> Any:
    """A JSON file's content; every failure names ``path`` and says what the file should be."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file ({what})") from None
    except IsADirectoryError:
        raise InputError(f"{path} is a directory, not {what}") from None
    except UnicodeDecodeError as err:
        raise InputError(f"{path} is not UTF-8 text (byte {err.start}): expected {what}") from None
    except json.JSONDecodeError as err:
        ends = err.pos >= len(err.doc.rstrip()) or err.msg.startswith("Unterminated string")
        cut = " (truncated or empty)" if ends else ""
        raise InputError(f"{path} is not valid JSON{cut}: {err.msg} (line {err.lineno}, column "
                         f"{err.colno}); expected {what}") from None
