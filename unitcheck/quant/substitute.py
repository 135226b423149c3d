"""The NVFP4 substitution pass: replace every weight GEMM of a model, report what was left.

Replaced: ``nn.Linear`` (``F.linear``), Hugging Face ``Conv1D`` (``addmm``), and any module that
implements ``nvfp4_substitute(recipe) -> list[str]`` for its functional matmuls against a
parameter. The report is parameter-centric: every matrix parameter is either consumed by a
replaced GEMM or listed with the reason it stays in high precision (embedding lookups, a
``--keep-last`` layer, a dimension not divisible by 16, a functional use the pass cannot see),
so nothing is skipped silently. Attention's batched GEMMs (activations times activations) stay
in high precision, as in seed 001.

The output head stays in high precision by default, as seed 001 keeps embeddings in BF16 and the
NVFP4 recipe it builds on keeps the output layer in high precision (``quantise_head=True``, the
training loop's ``--quantise-head``, includes it). The head is ``get_output_embeddings()`` where a
model defines it, else a top-level ``lm_head``/``head`` linear, or a module hook marked
``nvfp4_head = True`` (GCT's functional logits GEMM).

A model may declare the norms of its GEMM operands with ``nvfp4_operand_norms()``: a mapping from
a linear's path to ``(input norm, weight norm)``, each ``"unit"``, ``"rms"`` or ``None``. The pass
turns them into element bounds (``norm_bound``) that the ``matched`` recipe uses as fixed scales.
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
from .gemm import RECIPES, NVFP4Linear, norm_bound, nvfp4_linear

__all__ = ["SubstitutionReport", "substitute_nvfp4", "NVFP4Conv1D"]


class NVFP4Conv1D(nn.Module):
    """Hugging Face's Conv1D (``addmm(b, x, W)`` with W stored (in, out)) in NVFP4."""

    weight: nn.Parameter
    bias: nn.Parameter | None

    def __init__(self, conv: nn.Module, recipe: str, x_amax: float = 0.0, w_amax: float = 0.0) -> None:
        super().__init__()
        self.nf = conv.nf  # type: ignore[attr-defined]
        self.weight = conv.weight  # type: ignore[assignment]
        self.bias = conv.bias  # type: ignore[assignment]
        self.nx = int(self.weight.shape[0])
        self.recipe = recipe
        self.x_amax, self.w_amax = x_amax, w_amax

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nvfp4_linear(x, self.weight.t(), self.bias, self.recipe, self.x_amax, self.w_amax)


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


HEAD_REASON = ("output head: kept in high precision (seed 001 keeps embeddings in BF16 and its NVFP4 "
               "recipe keeps the output layer; --quantise-head includes it)")


def head_paths(model: nn.Module) -> set[str]:
    """Module paths of the model's output head (linear layers), as the substitution finds them."""
    paths = {n: m for n, m in model.named_modules()}
    by_id = {id(m): n for n, m in paths.items()}
    found: set[str] = set()
    get = getattr(model, "get_output_embeddings", None)
    if callable(get):
        try:
            head = get()
        except Exception:  # a model whose accessor needs state it lacks: fall back to the names
            head = None
        if isinstance(head, nn.Module) and id(head) in by_id:
            found.add(by_id[id(head)])
    if not found:
        found = {n for n in ("lm_head", "head") if isinstance(paths.get(n), nn.Linear)}
    return found


def operand_bounds(model: nn.Module) -> dict[str, tuple[float, float]]:
    """``nvfp4_operand_norms()`` as element bounds per linear path: (input, weight), 0 for none."""
    declare = getattr(model, "nvfp4_operand_norms", None)
    if not callable(declare):
        return {}
    out = {}
    for path, (x_norm, w_norm) in declare().items():
        mod = model.get_submodule(path)
        if not isinstance(mod, nn.Linear):
            raise UsageError(f"nvfp4_operand_norms names {path!r}, which is not an nn.Linear")
        out[path] = (norm_bound(x_norm, mod.in_features), norm_bound(w_norm, mod.in_features))
    return out


def substitute_nvfp4(
    model: nn.Module, recipe: str = "te", keep_last: float = 0.0, backend: str = "auto",
    quantise_head: bool = False,
) -> SubstitutionReport:
    """Swap the model's weight GEMMs for NVFP4 ones in place; returns the report. The output head
    stays in high precision unless ``quantise_head``."""
    if recipe not in RECIPES and recipe != "fp8":
        raise UsageError(f"unknown NVFP4 recipe {recipe!r}; choose one of {', '.join(RECIPES)}")
    from . import te_backend

    use_te, reason = (False, "emulation requested") if backend == "emulate" else te_backend.availability()
    if backend == "te" and not use_te:
        raise UsageError(f"the Transformer Engine backend is not available: {reason}")
    report = SubstitutionReport(recipe, "transformer_engine" if use_te else "emulated", reason)
    layers = sorted({i for n, _ in model.named_modules() if (i := _layer_index(n)) is not None})
    n_layers = len(layers)
    first_kept = n_layers - math.floor(n_layers * keep_last + 1e-9) if keep_last > 0 else None
    covered: set[int] = set()
    heads = set() if quantise_head else head_paths(model)
    bounds = operand_bounds(model)
    for path, mod in list(model.named_modules()):
        kind = type(mod).__name__
        if isinstance(mod, (NVFP4Linear, NVFP4Conv1D)):
            covered.add(id(mod.weight))
            continue
        is_linear = type(mod) is nn.Linear
        is_conv1d = kind == "Conv1D" and hasattr(mod, "nf")
        hook = getattr(mod, "nvfp4_substitute", None)
        if callable(hook) and not is_linear:
            if getattr(mod, "nvfp4_head", False) and not quantise_head:
                report.kept.append({"name": f"{path or '<root>'}: functional logits GEMM", "reason": HEAD_REASON})
                for p in getattr(mod, "nvfp4_weights", lambda: [])():
                    covered.add(id(p))
                continue
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
        if path in heads:
            report.kept.append({"name": path, "reason": HEAD_REASON})
            covered.add(id(w))
            continue
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
            new = NVFP4Linear.from_linear(mod, recipe, *bounds.get(path, (0.0, 0.0)))  # type: ignore[arg-type]
        else:
            new = NVFP4Conv1D(mod, recipe)
        _set_child(model, path, new)
        covered.add(id(w))
        entry: dict[str, Any] = {"name": path, "kind": "Linear" if is_linear else "Conv1D (addmm)",
                                 "shape": [int(out_f), int(in_f)]}
        if path in bounds and not use_te:
            entry["scaling"] = _scaling_note(recipe, *bounds[path])
        report.replaced.append(entry)
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


def _scaling_note(recipe: str, x_amax: float, w_amax: float) -> str:
    """How the recipe scales a linear's two forward operands, for the report."""
    r = RECIPES[recipe]

    def one(bound: float) -> str:
        per_tensor, amax = r.scaling(bound)
        return "per-tensor" if per_tensor else f"fixed amax {amax:.4g}"

    return f"input {one(x_amax)}, weight {one(w_amax)}"
