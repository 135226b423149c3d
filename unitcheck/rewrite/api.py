"""``rewrite_gct``: a model to its Gauge-Canonical form (optionally with NVFP4 GEMMs)."""

from __future__ import annotations

import sys
import time
import types
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from .codegen import render_source, to_module
from .gct import GCTResult, RewriteError, gct_graph

__all__ = ["RewriteResult", "rewrite_gct", "write_rewrite", "RewriteError"]


@dataclass
class RewriteResult:
    module: nn.Module  # an instance of the generated class (the same code as model.py)
    source: str
    gct: GCTResult
    nvfp4: Any = None
    units: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "residuals": self.gct.residuals,
            "residuals_rewritten": self.gct.residuals_rewritten,
            "new_parameters": {k: {"unit": p.unit, "why": p.why} for k, p in self.gct.new_params.items()},
            "dropped_parameters": self.gct.dropped,
            "log": self.gct.log,
            "unhandled": self.gct.unhandled,
        }
        if self.nvfp4 is not None:
            out["nvfp4"] = self.nvfp4.to_json()
        return out


def rewrite(model: nn.Module, example_inputs: Any, nvfp4: str | None = None,
            source_name: str | None = None) -> RewriteResult:
    t0 = time.perf_counter()
    res = gct_graph(model, example_inputs)
    nv = None
    if nvfp4:
        from .nvfp4 import nvfp4_graph

        nv = nvfp4_graph(res.traced, nvfp4)
    gm = to_module(res.traced, "Rewritten")
    units = {name: p.unit for name, p in res.new_params.items()}
    how = "--to gct" + (f" --nvfp4 {nvfp4}" if nvfp4 else "")
    summary = (f"{res.residuals_rewritten}/{res.residuals} residual adds on canonical coordinates; "
               f"{len(res.new_params)} new dimensionless parameters; "
               f"{len(res.dropped)} normaliser parameters dropped.")
    source = render_source(gm, units, source_name or type(model).__name__, how, summary)
    module = instantiate(source)
    module.load_state_dict(gm.state_dict())
    return RewriteResult(module, source, res, nv, units, time.perf_counter() - t0)


def instantiate(source: str, filename: str = "<unitcheck-rewrite>") -> nn.Module:
    """Run generated code as a module of its own (registered, so deep copies find the class)."""
    name = f"_unitcheck_generated_{abs(hash(source))}"
    mod = types.ModuleType(name)
    mod.__file__ = filename
    exec(compile(source, filename, "exec"), mod.__dict__)  # noqa: S102 (our own generated code)
    sys.modules[name] = mod
    return mod.Rewritten()  # type: ignore[no-any-return]


def rewrite_gct(model: nn.Module, example_inputs: Any, nvfp4: str | None = None) -> nn.Module:
    """The model rewritten to GCT form (existing weights kept); ``nvfp4`` is a recipe name."""
    return rewrite(model, example_inputs, nvfp4).module


def write_rewrite(result: RewriteResult, out_dir: str, source: str, example_inputs: Any) -> list[str]:
    from .save import save_rewritten

    manifest = {"source": source, "to": "gct", "nvfp4": result.nvfp4.recipe if result.nvfp4 else None,
                "report": result.report()}
    return save_rewritten(out_dir, result.source, result.module, example_inputs, manifest)
