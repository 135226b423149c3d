"""Hugging Face architectures built from their config classes with random weights (no download).

``hf:<model_type>`` builds any architecture in transformers' config mapping at a small default
size (2 layers, width 64); ``--set key=value`` overrides config fields.

>>> model, inputs = build("gpt2", {"n_layer": 2})     # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from .errors import UnitcheckError
from .validate import apply_override

__all__ = ["build", "HFError", "SMALL_DEFAULTS", "parse_value"]


class HFError(UnitcheckError, ValueError):
    """A bad model type, a bad config key or value, or transformers missing."""


SMALL_DEFAULTS: dict[str, Any] = {
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 128,
    "max_position_embeddings": 128,
    "head_dim": 16,
    # encoder-decoder (T5 family) spelling
    "num_layers": 2,
    "num_decoder_layers": 2,
    "d_model": 64,
    "d_ff": 128,
    "d_kv": 16,
    "num_heads": 4,
}


def parse_value(text: str) -> Any:
    """``--set`` values: ints, floats, booleans, None, else the string itself."""
    low = text.strip().lower()
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
    loggers = [logging.getLogger(n) for n in ("transformers", "torchao", "torch.utils._pytree", "torch")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, lv in zip(loggers, levels):
            lg.setLevel(lv)


def _transformers() -> Any:
    try:
        import transformers
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise HFError("hf: models need the 'hf' extra: pip install 'unitcheck[hf]'") from err
    return transformers


def make_config(model_type: str, overrides: Mapping[str, Any] | None = None) -> Any:
    tf = _transformers()
    from transformers import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:
        close = [k for k in CONFIG_MAPPING if model_type.replace("-", "_") in k][:5]
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise HFError(f"unknown Hugging Face model type {model_type!r}{hint}")
    cls = CONFIG_MAPPING[model_type]
    cfg = cls()
    known = set(cfg.to_dict()) | set(getattr(cfg, "attribute_map", {}))
    for key, value in SMALL_DEFAULTS.items():
        if key in known:
            setattr(cfg, key, value)
    if hasattr(cfg, "use_cache"):
        cfg.use_cache = False
    if getattr(cfg, "is_encoder_decoder", False):
        for key in ("decoder_start_token_id", "pad_token_id"):
            if getattr(cfg, key, None) is None:
                setattr(cfg, key, 0)
    vocab = getattr(cfg, "vocab_size", None)
    for key in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"):
        v = getattr(cfg, key, None)
        if isinstance(v, int) and isinstance(vocab, int) and v >= vocab:
            setattr(cfg, key, vocab - 1)
    for key, value in (overrides or {}).items():
        if key not in known:
            raise HFError(f"{model_type} config has no field {key!r}")
        apply_override(cfg, key, value, f"hf:{model_type}")
    cfg._attn_implementation = "sdpa"
    del tf
    return cfg


def build(
    model_type: str,
    overrides: Mapping[str, Any] | None = None,
    batch: int = 2,
    seq: int = 16,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """The model (task head chosen by architecture) and keyword inputs ``input_ids``, ``labels``."""
    tf = _transformers()
    with _quiet():
        cfg = make_config(model_type, overrides)
        torch.manual_seed(seed)
        model = None
        errors = []
        heads = (
            ("AutoModelForSeq2SeqLM", "AutoModelForCausalLM", "AutoModelForMaskedLM", "AutoModel")
            if getattr(cfg, "is_encoder_decoder", False)
            else ("AutoModelForCausalLM", "AutoModelForMaskedLM", "AutoModel")
        )
        ctx = torch.device(device) if str(device) == "meta" else contextlib.nullcontext()
        for head in heads:
            try:
                with ctx:  # type: ignore[attr-defined]
                    model = getattr(tf, head).from_config(cfg)
                break
            except (ValueError, KeyError, AttributeError) as err:
                errors.append(f"{head}: {err}")
        if model is None:
            raise HFError(f"cannot build {model_type} from its config: {errors[-1] if errors else '?'}")
        model.eval()
    vocab = int(getattr(cfg, "vocab_size", 100) or 100)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    inputs: dict[str, torch.Tensor] = {"input_ids": ids}
    if "labels" in _forward_params(model):
        inputs["labels"] = ids.clone()
    return model, inputs


def _forward_params(model: nn.Module) -> set[str]:
    import inspect

    try:
        return set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return set()
