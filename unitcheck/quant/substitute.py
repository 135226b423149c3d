"""The NVFP4 substitution pass: replace every weight GEMM of a model, report what was left.

Replaced: ``nn.Linear`` (``F.linear``), Hugging Face ``Conv1D`` (``addmm``), and any module that
implements ``nvfp4_substitute(recipe) -> list[str]`` for its functional matmuls against a
parameter. The report is parameter-centric: every matrix parameter is either consumed by a
replaced GEMM or listed with the reason it stays in high precision (embedding lookups, a
``--keep-last`` layer, a dimension not divisible by 16, a functional use the pass cannot see),
so nothing is skipped silently. Attention's batched GEMMs (activations times activations) stay
in high precision, as in seed 001.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..errors import UsageError
from .gemm import RECIPES, NVFP4Linear, nvfp4_linear

__all__ = ["SubstitutionReport", "substitute_nvfp4", "NVFP4Conv1D"]


class NVFP4Conv1D(nn.Module):
    """Hugging Face's Conv1D (``addmm(b, x, W)`` with W stored (in, out)) in NVFP4."""

    weight: nn.Parameter
    bias: nn.Parameter | None

    def __init__(self, conv: nn.Module, recipe: str) -> None:
        super().__init__()
        self.nf = conv.nf  # type: ignore[attr-defined]
        self.weight = conv.weight  # type: ignore[assignment]
        self.bias = conv.bias  # type: ignore[assignment]
        self.nx = int(self.weight.shape[0])
        self.recipe = recipe

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nvfp4_linear(x, self.weight.t(), self.bias, self.recipe)


@dataclass
class SubstitutionReport:
    recipe: str
    backend: str
    backend_reason: str
    replaced: list[dict[str, Any]] = field(default_factory=list)
    kept: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> str:
        lines = [f"NVFP4 ({self.recipe} recipe, {self.backend}: {self.backend_reason}): "
                 f"{len(self.replaced)} GEMM(s) replaced, {len(self.kept)} weight(s) kept in high precision"]
        for k in self.kept:
            lines.append(f"  kept {k['name']}: {k['reason']}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"recipe": self.recipe, "backend": self.backend, "backend_reason": self.backend_reason,
                "replaced": self.replaced, "kept": self.kept}

    def __str__(self) -> str:
        return json.dumps(self.to_json(), indent=2)


_LAYER = re.compile(r"(?:^|\.)(?:h|layers|layer|blocks|block)\.(\d+)(?:\.|$)")


def _layer_index(path: str) -> int | None:
    m = _LAYER.search(path)
    return int(m.group(1)) if m else None


def _set_child(model: nn.Module, path: str, new: nn.Module) -> None:
    parent_path, _, name = path.rpartition(".")
    parent = model.get_submodule(parent_path) if parent_path else model
    setattr(parent, name, new)


def substitute_nvfp4(
    model: nn.Module, recipe: str = "te", keep_last: float = 0.0, backend: str = "auto"
) -> SubstitutionReport:
    """Swap the model's weight GEMMs for NVFP4 ones in place; returns the report."""
    if recipe not in RECIPES and recipe != "fp8":
        raise UsageError(f"unknown NVFP4 recipe {recipe!r}; choose te or ngpt")
    from . import te_backend

    use_te, reason = (False, "emulation requested") if backend == "emulate" else te_backend.availability()
    if backend == "te" and not use_te:
        raise UsageError(f"the Transformer Engine backend is not available: {reason}")
    report = SubstitutionReport(recipe, "transformer_engine" if use_te else "emulated", reason)
    layers = sorted({i for n, _ in model.named_modules() if (i := _layer_index(n)) is not None})
    n_layers = len(layers)
    first_kept = n_layers - math.floor(n_layers * keep_last + 1e-9) if keep_last > 0 else None
    covered: set[int] = set()
    for path, mod in list(model.named_modules()):
        kind = type(mod).__name__
        if isinstance(mod, (NVFP4Linear, NVFP4Conv1D)):
            covered.add(id(mod.weight))
            continue
        is_linear = type(mod) is nn.Linear
        is_conv1d = kind == "Conv1D" and hasattr(mod, "nf")
        hook = getattr(mod, "nvfp4_substitute", None)
        if callable(hook) and not is_linear:
            for item in hook(recipe):
                report.replaced.append({"name": item, "kind": f"{kind} hook", "module": path})
            for p in getattr(mod, "nvfp4_weights", lambda: [])():
                covered.add(id(p))
            continue
        if not (is_linear or is_conv1d):
            continue
        w = mod.weight
        out_f, in_f = (w.shape if is_linear else (w.shape[1], w.shape[0]))
        layer = _layer_index(path)
        if first_kept is not None and first_kept < n_layers and layer is not None and layer >= layers[first_kept]:
            report.kept.append({"name": path, "reason": f"layer {layer} is in the last {keep_last:.0%} of layers (--keep-last)"})
            covered.add(id(w))
            continue
        if use_te and (in_f % 16 or out_f % 16):
            report.kept.append({"name": path, "reason": f"shape {tuple(w.shape)} is not a multiple of 16 (Transformer Engine)"})
            covered.add(id(w))
            continue
        if use_te and is_linear:
            new: nn.Module = te_backend.to_te_linear(mod)  # type: ignore[arg-type]
        elif is_linear:
            new = NVFP4Linear.from_linear(mod, recipe)  # type: ignore[arg-type]
        else:
            new = NVFP4Conv1D(mod, recipe)
        _set_child(model, path, new)
        covered.add(id(w))
        report.replaced.append({"name": path, "kind": "Linear" if is_linear else "Conv1D (addmm)",
                                "shape": [int(out_f), int(in_f)]})
    for name, p in model.named_parameters():
        if p.dim() < 2 or id(p) in covered:
            continue
        owner = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
        if isinstance(owner, nn.Embedding):
            reason = "embedding lookup, not a GEMM: kept in high precision (seed 001)"
        elif isinstance(owner, (nn.Conv2d, nn.Conv1d, nn.Conv3d)):
            reason = "convolution: no NVFP4 kernel in this pass"
        else:
            reason = f"used functionally by {type(owner).__name__}; no module to replace (kept in high precision)"
        report.kept.append({"name": name, "reason": reason})
        covered.add(id(p))
    return report
