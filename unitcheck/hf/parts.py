"""Sub-model types that are blocks of another model (``sam_mask_decoder``'s ``SamMaskDecoder``):
a module that takes its config and defines a forward, with no documented inputs and no
``main_input_name``. Its inputs are internal tensors (image embeddings as wide as the decoder,
prompt embeddings with a point axis, a ``multimask_output`` flag) that no name says how to make,
so they are taken from a real call: the parent type whose config holds this one is built, run
once, and the block's first call is recorded. The block is the parent's own instance, so its
sizes are the ones the recorded inputs fit."""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_leaves, tree_map_only

from .common import CONFIG_MAPPING_CLS, HFError, OverrideError, _quiet, _short
from .heads import _head_class
from .inputs import _NOT_ASKED, _TOKEN_MASKS, _declared, _documented_size, _mask


@functools.cache
def _parents(model_type: str) -> list[tuple[str, str]]:
    """``(parent type, sub-config field)`` for every type whose config class holds this type's
    config class among its ``sub_configs`` (T5Gemma holds its module config twice)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    wanted = CONFIG_MAPPING_CLS(model_type)
    out = []
    for parent in CONFIG_MAPPING_NAMES:
        if parent == model_type:
            continue
        try:
            subs = getattr(CONFIG_MAPPING_CLS(parent), "sub_configs", None) or {}
        except Exception:  # noqa: BLE001 (a config class whose backend is missing)
            continue
        out += [(parent, field) for field, cls in subs.items()
                if cls is wanted or cls.__name__ == "AutoConfig" and _default_holds(parent, field, wanted)]
    return out


@functools.cache
def _default_config(model_type: str) -> Any:
    """The type's default config, read only (None where its own validators reject it)."""
    try:
        return CONFIG_MAPPING_CLS(model_type)()
    except Exception:  # noqa: BLE001
        return None


def _default_holds(parent: str, field: str, wanted: type) -> bool:
    """Whether the parent's default config holds a ``wanted`` config under ``field``, which its
    class declares as any config (``AutoConfig``: Voxtral Realtime's text model)."""
    return type(getattr(_default_config(parent), field, None)) is wanted


def _recorded_call(model: nn.Module, inputs: Mapping[str, Any], block: nn.Module) -> dict[str, Any] | None:
    """The arguments of ``block``'s first call when ``model`` runs on ``inputs``, by name (None
    where it is not called); arguments not passed, and None passed where the default is None or
    through ``**kwargs``, are left out. A parent that fails after the block returned (Dia's loss
    on labels it shapes otherwise) still recorded the call; a block that fails on it raises."""
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    begun = [0]  # calls begun so far
    open_calls: list[int] = []  # the numbers of the calls begun and not yet returned
    first_returned: list[bool] = []

    def record(_: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not calls:
            calls.append(tree_map_only(torch.Tensor, lambda t: t.detach().clone(), (args, kwargs)))
        begun[0] += 1
        open_calls.append(begun[0])

    def returns(*_: Any) -> None:
        if open_calls and open_calls.pop() == 1:
            first_returned.append(True)

    handles = (block.register_forward_pre_hook(record, with_kwargs=True), block.register_forward_hook(returns))
    try:
        with torch.no_grad():
            model(**inputs)
    except Exception:
        if not first_returned:
            raise
    finally:
        for handle in handles:
            handle.remove()
    if not calls:
        return None
    if not first_returned:  # the parent caught the block's failure and called it again
        raise ValueError(f"{type(block).__name__} fails on its first call, which the parent's own code catches")
    params = inspect.signature(block.forward).parameters
    out: dict[str, Any] = {}
    for name, value in inspect.signature(block.forward).bind(*calls[0][0], **calls[0][1]).arguments.items():
        kind = params[name].kind
        if kind is inspect.Parameter.POSITIONAL_ONLY:
            raise ValueError(f"{type(block).__name__} takes {name} by position only: inputs are passed by name")
        if kind is inspect.Parameter.VAR_KEYWORD:
            out.update((k, v) for k, v in value.items() if v is not None)  # by name again (``return_dict=True``)
        elif kind is inspect.Parameter.VAR_POSITIONAL:
            if value:
                raise ValueError(f"{type(block).__name__} is called with {len(value)} unnamed extra arguments")
        elif not (value is None and params[name].default is None):
            out[name] = _padded(name, value) if params[name].default is inspect.Parameter.empty else value
    return out


def _padded(name: str, value: Any) -> Any:
    """A required token mask recorded full, padded as the builder pads the masks it makes
    (:func:`.inputs._mask`): transformers drops a full mask in eager and keeps it when exported,
    so with IDEFICS2's all-ones mask the perceiver's null rewrite compared the two paths (equal
    to rounding only)."""
    if name in _TOKEN_MASKS and isinstance(value, torch.Tensor) and value.dim() == 2 and bool(value.all()):
        return _mask(name, (value.shape[0], value.shape[1]), value.dtype)
    return value


def _has_tensor(call: Mapping[str, Any] | None) -> bool:
    return call is not None and any(isinstance(v, torch.Tensor) for v in tree_leaves(call))


def _documented_inputs(model: nn.Module, inputs: Mapping[str, Any], seed: int) -> list[tuple[str, torch.Tensor]]:
    """The parent's optional inputs its docstring gives a shape the example fixes, each count it
    names (``num_boxes``) taken as one: the prompts a block is called with only when they are
    given (SAM calls its prompt encoder with tensors only where points, boxes or masks are)."""
    if not hasattr(model, "config"):  # sizes come from the parent's config
        return []
    declared = _declared(model)
    g = torch.Generator().manual_seed(seed + 2)
    batch = next((int(v.shape[0]) for v in inputs.values() if isinstance(v, torch.Tensor) and v.dim() >= 1), 1)
    ids = inputs.get("input_ids")
    seq = int(ids.shape[-1]) if isinstance(ids, torch.Tensor) and ids.dim() == 2 else 1  # the text's, if any
    out = []
    for name, shape in declared.shapes.items():
        if name in inputs or name in _NOT_ASKED:
            continue
        counted = re.sub(r"(?<![\w.])num_(?!channels\b)\w+", "1", shape)  # not ``config.num_labels``
        size = _documented_size(counted, model.config, inputs, batch, seq, 1)
        if size is not None:
            integers = declared.forms.get(name) == "integers"
            out.append((name, torch.zeros(size, dtype=torch.long) if integers else torch.rand(size, generator=g)))
    return out


def _prompted_call(model: nn.Module, inputs: dict[str, Any], block: nn.Module,
                   seed: int) -> tuple[dict[str, Any] | None, dict[str, Any], str]:
    """The block's recorded call, its parent's inputs and what was added to them: where the
    parent's own inputs reach the block with no tensor, each input :func:`_documented_inputs`
    makes is tried alone, and the first whose call gives the block a tensor is kept."""
    call = _recorded_call(model, inputs, block)
    if _has_tensor(call):
        return call, inputs, ""
    for name, value in _documented_inputs(model, inputs, seed):
        try:
            again = _recorded_call(model, {**inputs, name: value}, block)
        except Exception:  # noqa: BLE001 (an input the parent refuses in that shape: the next one)
            continue
        if _has_tensor(again):
            return again, {**inputs, name: value}, f"; given {name} {tuple(value.shape)}"
    return call, inputs, ""


def _block(model: nn.Module, cls: type | None, field: str, config: str = "") -> nn.Module | None:
    """The parent's block: of the modules of class ``cls``, the one keeping the parent's
    sub-config ``field`` itself (CLVP holds a ``ClvpEncoder`` under two fields), else the first;
    where the type names no class, the outermost module keeping that sub-config (IDEFICS's vision
    tower keeps ``config.vision_config`` as its ``config``), else the outermost whose class is
    named after the config class ``config`` (IDEFICS's ``IdeficsPerceiverResampler``, built from
    the fields of its ``IdeficsPerceiverConfig``, not the object)."""
    sub = getattr(getattr(model, "config", None), field, None)
    keeps = [m for m in model.modules() if sub is not None and getattr(m, "config", None) is sub]
    if cls is None:
        prefix = config.removesuffix("Config")
        named = [m for m in model.modules() if prefix and type(m).__name__.startswith(prefix)]
        return keeps[0] if keeps else named[0] if named else None
    of_class = [m for m in model.modules() if type(m) is cls]
    return next((m for m in of_class if m in keeps), of_class[0] if of_class else None)


def _switches(parent: str) -> list[str]:
    """The parent's ``use_*`` switches its default config leaves off: a block one gates is built
    only with it on (IDEFICS's perceiver, ``use_resampler``)."""
    cfg = _default_config(parent)
    return sorted(k for k, v in vars(cfg).items() if k.startswith("use_") and v is False) if cfg is not None else []


class _NoBlock(Exception):
    """A parent that does not build, or holds no block: why, to say with the others'."""


def _parent_holding(parent: str, field: str, cls: type | None, config: str, mapped: Mapping[str, Any],
                    build: Callable[..., tuple[nn.Module, dict[str, Any]]], **kwargs: Any
                    ) -> tuple[nn.Module, dict[str, Any], Any, nn.Module, str]:
    """The parent built with the block: as its default config has it, else with the first of its
    :func:`_switches` on that makes it hold one; its model, inputs, Built record, the block and
    the switch said (``"; use_resampler=True"``). Raises :class:`_NoBlock` saying why not."""
    heads: list[str] = []
    for switch in (None, *_switches(parent)):
        info: list[Any] = []
        try:
            model, inputs = build(parent, {**mapped, **({switch: True} if switch else {})}, info=info, **kwargs)
        except OverrideError:
            raise
        except HFError as err:
            if switch is None:
                raise _NoBlock(f"{parent} does not build ({_short(err, 120)})") from None
            continue
        block = _block(model, cls, field, config)
        if block is not None:
            return model, inputs, info[0], block, f"; {switch}=True" if switch else ""
        heads.append(info[0].head)
    what = cls.__name__ if cls is not None else f"module keeping its {config}"
    raise _NoBlock(f"{parent}'s {heads[0]} holds no {what}")


def build_part(model_type: str, head: str | None, overrides: Mapping[str, Any], batch: int, seq: int, seed: int,
               device: str | torch.device, build: Callable[..., tuple[nn.Module, dict[str, Any]]],
               info: list[Any] | None, made: Callable[..., Any]) -> tuple[nn.Module, dict[str, Any]]:
    """The block ``head`` (``module:Class``; None where the type names no class) as the first
    parent type that builds and calls it, and the inputs of that call. ``build`` builds the
    parent (``hf.build``, at ``batch`` and ``seq``); ``made(parent's Built, parent type, block,
    what was added)`` makes the :class:`Built` record. The parent runs on the CPU, where the call
    has real values (point labels, flags); the block moves to ``device`` after, and so do the
    inputs, except to the meta device. A ``--set`` key the type's own config lacks is the user's error, said in the
    type's name before any parent is built."""
    import transformers

    from .common import PLANS
    from .config import make_config

    make_config(model_type, overrides, PLANS[0])  # raises OverrideError for a key the type's config lacks
    cls = _head_class(transformers, head) if head else None
    parents = _parents(model_type)
    config = CONFIG_MAPPING_CLS(model_type).__name__
    why: list[str] = []
    for parent, field in parents:
        try:
            model, inputs, parent_built, block, switched = _parent_holding(
                parent, field, cls, config, {f"{field}.{k}": v for k, v in overrides.items()}, build, batch=batch,
                seq=seq, seed=seed, device="cpu")
        except _NoBlock as err:
            why.append(str(err))
            continue
        try:
            with _quiet():
                call, inputs, given = _prompted_call(model, inputs, block, seed)
        except Exception as err:  # noqa: BLE001 (the parent's own forward failing: say so, try the next)
            why.append(f"{parent}'s call fails ({_short(err, 120)})")
            continue
        if call is None or not _has_tensor(call):
            why.append(f"{parent}'s forward calls its {type(block).__name__} with no tensor" if call is not None
                       else f"{parent}'s forward does not call its {type(block).__name__}")
            continue
        if info is not None:
            info.append(made(parent_built, parent, block, switched + given))
        if str(device) != "meta":  # on meta, inputs stay real, as every build's (a caller's to_meta keeps their values)
            call = tree_map_only(torch.Tensor, lambda t: t.to(device), call)
        return block.to(device), call
    subject = cls.__name__ if cls is not None else f"its {config}"
    raise HFError(f"cannot build {model_type}: {subject} configures a block of another model, which is built as "
                  f"that model calls it, but {'; '.join(why)}")
