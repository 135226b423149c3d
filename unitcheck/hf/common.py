"""What every part of ``hf:`` shares: its errors, transformers imported quietly, the size plans,
and lookups over a config tree."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import importlib
import importlib.util
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeGuard

from ..errors import UnitcheckError
from ..quiet import quiet_loggers


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


def _walk(cfg: Any) -> Iterator[Any]:
    yield cfg
    for sub in _subconfigs(cfg).values():
        yield from _walk(sub)


def _short(err: BaseException, limit: int = 240) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:limit]}"


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


def _find_int(cfg: Any, *keys: str, default: int) -> int:
    """:func:`_find` for a count (a patch size, channels): ``default`` where it is unset or not an int."""
    v = _find(cfg, *keys)
    return int(v) if _is_int(v) else default


def _paths(cfg: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, cfg
    for name, sub in _subconfigs(cfg).items():
        yield from _paths(sub, (*path, name))


def CONFIG_MAPPING_CLS(model_type: str) -> Any:  # noqa: N802 (reads as the mapping it wraps)
    from transformers import CONFIG_MAPPING

    return CONFIG_MAPPING[model_type]
