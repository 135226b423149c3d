"""Which model classes a type has (loss-returning heads first) and how each is instantiated."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
from typing import Any

import torch
from torch import nn

from ..fxutil import defines_forward
from .common import CONFIG_MAPPING_CLS, _paths

PART = "part"  # the task of a block of another model (:mod:`.parts` builds it as that model calls it)

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
            name = _exported_or_qualified(model_type, name)
            if all(name != n for _, n, _ in out):
                out.append((task, name, labels))
    if not out:  # a type with task heads only (depth, pose, matting, keypoints, a backbone...)
        out = [(_task(mapping), name, "none")
               for mapping in sorted(vars(modeling_auto)) if mapping.startswith("MODEL_FOR_")
               and mapping.endswith("_MAPPING_NAMES") and isinstance(getattr(modeling_auto, mapping), dict)
               and isinstance(name := getattr(modeling_auto, mapping).get(model_type), str)]
        out = [h for i, h in enumerate(out) if all(h[1] != n for _, n, _ in out[:i])]
    if not out:
        out = _named_like_config(model_type) or _taking_config(model_type) or _block_named_like_config(model_type)
    return out


@functools.cache
def _exports() -> frozenset[str]:
    import transformers

    return frozenset(dir(transformers))


def _exported_or_qualified(model_type: str, name: str) -> str:
    """A class the auto mappings name, as ``module:Class`` where transformers does not export it
    but the type's modeling module defines it (``VoxtralRealtimeTextModel`` in 5.24)."""
    if name in _exports():
        return name
    modeling = _modeling_module(model_type)
    return f"{modeling.__name__}:{name}" if modeling is not None and hasattr(modeling, name) else name


def _modeling_module(model_type: str) -> Any:
    """The modeling module beside the type's config class, or None (no such module, or one whose
    backend is missing)."""
    try:
        package = CONFIG_MAPPING_CLS(model_type).__module__.rpartition(".")[0]
        return importlib.import_module(f"{package}.modeling_{package.rpartition('.')[2]}")
    except Exception:  # noqa: BLE001
        return None


def _taking_config(model_type: str) -> list[tuple[str, str, str]]:
    """Sub-model types whose model class is named otherwise (``qwen2_vl_vision``'s
    ``Qwen2VisionTransformerPretrainedModel``, ``idefics2_vision``'s ``Idefics2VisionTransformer``)
    and often not exported: the classes of the type's modeling module whose ``config_class`` is
    its config class (a model of its own, not a block that takes the config) and that define a
    forward, causal LMs first, as ``module:Class``."""
    modeling = _modeling_module(model_type)
    if modeling is None:
        return []
    cfg_cls = CONFIG_MAPPING_CLS(model_type)
    found = [obj for obj in vars(modeling).values() if inspect.isclass(obj) and issubclass(obj, nn.Module)
             and obj.__module__ == modeling.__name__ and defines_forward(obj)
             and getattr(obj, "config_class", None) is cfg_cls]
    found.sort(key=lambda c: not c.__name__.endswith("ForCausalLM"))
    return [("causal_lm" if c.__name__.endswith("ForCausalLM") else "base", f"{c.__module__}:{c.__name__}",
             "tokens" if c.__name__.endswith("ForCausalLM") else "none") for c in found]


def _named_like_config(model_type: str) -> list[tuple[str, str, str]]:
    """Sub-model types (``clip_text_model``...) have no auto mapping; their model class is named
    after the config class (``CLIPTextConfig`` -> ``CLIPTextModel``)."""
    import transformers

    out = []
    for name, task, labels in _config_named(model_type):
        try:
            found = getattr(transformers, name, None) is not None
        except Exception:  # a backend the class needs is missing: the build says so
            found = True
        if found:
            out.append((task, name, labels))
    return out


def _config_named(model_type: str) -> list[tuple[str, str, str]]:
    """The class names a sub-model type's config suggests, with their task and labels."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    config_name = CONFIG_MAPPING_NAMES.get(model_type, "")
    if not config_name.endswith("Config"):
        return []
    stem = config_name.removesuffix("Config")
    return [(stem + "ForCausalLM", "causal_lm", "tokens"), (stem + "Model", "base", "none"), (stem, "base", "none")]


def _block_named_like_config(model_type: str) -> list[tuple[str, str, str]]:
    """A block of another model named after the config, in the type's modeling module only
    (``SamMaskDecoderConfig`` -> ``SamMaskDecoder``: a module that takes the config and defines a
    forward, not a pretrained model), as ``module:Class`` with task :data:`PART`."""
    from transformers import PreTrainedModel

    modeling = _modeling_module(model_type)
    for name, _, labels in _config_named(model_type):
        cls = getattr(modeling, name, None)
        if inspect.isclass(cls) and issubclass(cls, nn.Module) and not issubclass(cls, PreTrainedModel) \
                and cls.__module__ == modeling.__name__ and defines_forward(cls):
            return [(PART, f"{modeling.__name__}:{name}", labels)]
    return []


def has_base_model(model_type: str) -> bool:
    from transformers.models.auto import modeling_auto

    return model_type in modeling_auto.MODEL_MAPPING_NAMES


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
    if defines_forward(cls) or not callable(getattr(cls, "encode", None)):
        return cls
    if cls not in _ENCODERS:
        model_cls: Any = cls
        _ENCODERS[cls] = type(cls.__name__, (cls,), {"forward": model_cls.encode, "__module__": cls.__module__,
                                                     "__qualname__": cls.__qualname__})
    return _ENCODERS[cls]


def _uncallable(tf: Any, head: str) -> str | None:
    """Why the head's class (as :func:`_entry_class` gives it) cannot be called on tensors, or
    None. Bark's and the Qwen Omni models' top classes have no forward (they only generate); the
    SAM 2 video models take an inference session, an object holding the video's state. A class
    that cannot be resolved here counts as callable (instantiating it says why it fails)."""
    try:
        cls: Any = _entry_class(_head_class(tf, head))
    except Exception:  # noqa: BLE001
        return None
    if not defines_forward(cls):
        return "has no forward: it only generates"
    try:
        params = list(inspect.signature(cls.forward, eval_str=True).parameters.values())[1:]
    except Exception:  # noqa: BLE001 (annotations that do not resolve: nothing to say)
        return None
    objects = [(p.name, p.annotation.__name__) for p in params if p.default is inspect.Parameter.empty
               and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and _an_object(p.annotation)]
    if objects:
        return "takes " + ", ".join(f"`{name}` (a {kind})" for name, kind in objects) + ", an object, not tensors"
    return None


# where the classes an argument may be annotated with that hold tensors or numbers come from
# (``torch.LongTensor`` is no subclass of ``torch.Tensor``; no annotation is ``Parameter.empty``)
_DATA_MODULES = ("torch", "builtins", "numpy", "typing", "collections", "inspect")


def _an_object(annotation: Any) -> bool:
    """Is an argument's annotation a class of the model's library, an object the builder cannot
    make from tensors (an inference session, a structure of atom inputs)?"""
    return inspect.isclass(annotation) and not issubclass(annotation, torch.Tensor) \
        and not str(getattr(annotation, "__module__", "")).startswith(_DATA_MODULES)


def _head_class(tf: Any, head: str) -> Any:
    """A head named by transformers' exports, or ``module:Class`` where it is not exported."""
    module, _, name = head.rpartition(":")
    return getattr(importlib.import_module(module), name) if module else getattr(tf, head)


def _label_kind(model_type: str, head: str) -> str:
    return next((labels for _, name, labels in head_classes(model_type) if name == head), "none")
