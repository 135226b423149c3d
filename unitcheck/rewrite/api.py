"""``rewrite``: a model to its Gauge-Canonical form (optionally with NVFP4 GEMMs), or regenerated
unchanged (``to="identity"``, the code generator's own test)."""

from __future__ import annotations

import linecache
import sys
import time
import types
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from ..declarations import resolve_declarations
from ..tracer import uncompiled
from ..units import Unit
from .codegen import generate, render_source, structured_inputs
from .equal import compiled_note
from .gct import GCTResult, RewriteError, gct_graph
from .variants import capture

__all__ = ["RewriteResult", "rewrite", "rewrite_gct", "write_rewrite", "RewriteError", "TARGETS"]

TARGETS = ("gct", "identity")


@dataclass
class RewriteResult:
    module: nn.Module  # an instance of the generated class (the same code as model.py)
    source: str
    gct: GCTResult
    nvfp4: Any = None
    units: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    to: str = "gct"
    notes: list[str] = field(default_factory=list)
    violations_left: list[Any] = field(default_factory=list)  # what a lint of the result finds (GCT)
    kept: list[str] = field(default_factory=list)  # submodules the generated module calls whole

    @property
    def complete(self) -> bool:
        """Every rule did its part and the result lints clean (the null rewrite has nothing to do;
        its test is equality with the original, :mod:`.equal`)."""
        return self.to == "identity" or (self.gct.complete and not self.gct.unhandled and not self.violations_left)

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "residuals": self.gct.residuals,
            "residuals_rewritten": self.gct.residuals_rewritten,
            "new_parameters": {k: {"unit": p.unit, "why": p.why} for k, p in self.gct.new_params.items()},
            "dropped_parameters": self.gct.dropped,
            "declared_parameters": self.gct.declared,
            "log": self.gct.log,
            "unhandled": self.gct.unhandled,
            "kept_whole": self.kept,
            "notes": self.notes,
        }
        if self.nvfp4 is not None:
            out["nvfp4"] = self.nvfp4.to_json()
        return out


def _kept_declarations(model: nn.Module, root: nn.Module) -> dict[str, str]:
    """The original's own declarations (``__units__``, ``declare()``) of the parameters and
    buffers the generated module still has: without them a regenerated GCT model's gains and
    step sizes become unit variables, and the null rewrite of a clean model lints dirty."""
    have = {n for n, _ in root.named_parameters()} | {n for n, _ in root.named_buffers()}
    return {n: str(u) for n, u in resolve_declarations(model).items() if n in have}


def _unchanged(traced: Any) -> GCTResult:
    return GCTResult(traced, {}, [], [], 0, 0)


def rewrite(model: nn.Module, example_inputs: Any, nvfp4: str | None = None,
            source_name: str | None = None, to: str = "gct") -> RewriteResult:
    """Capture ``model`` (eval, training mode and a second dtype: see :mod:`.variants`), apply
    the ``to`` rules (none for ``identity``), and generate the module."""
    if to not in TARGETS:
        raise RewriteError(f"unknown rewrite target {to!r}: choose from {', '.join(TARGETS)}")
    t0 = time.perf_counter()
    compiled = compiled_note(model)
    model = uncompiled(model)
    caps = capture(model, example_inputs)
    if to == "identity":
        res = _unchanged(caps.eval)
        train = _unchanged(caps.train) if caps.train is not None else None
    else:
        res = gct_graph(model, example_inputs, traced=caps.eval)
        train = gct_graph(model, example_inputs, traced=caps.train) if caps.train is not None else None
        if train is not None and set(train.new_params) != set(res.new_params):
            raise RewriteError(f"{type(model).__name__}: the GCT rules rewrite its training-mode graph "
                               "differently from its eval-mode graph")
    nv = None
    if nvfp4:
        from .nvfp4 import nvfp4_graph

        nv = nvfp4_graph(res.traced, nvfp4)
        if train is not None:
            nvfp4_graph(train.traced, nvfp4)
    gen = generate(res.traced, train.traced if train is not None else None, caps.dtype, caps.other)
    gen.arguments = structured_inputs(model, example_inputs)
    units = {**_kept_declarations(model, gen.root), **res.declared,
             **{name: p.unit for name, p in res.new_params.items()}}
    how = f"--to {to}" + (f" --nvfp4 {nvfp4}" if nvfp4 else "")
    if to == "identity":
        summary = "The model regenerated with no rewrite applied: it computes what the original computes."
    else:
        summary = (f"{res.residuals_rewritten}/{res.residuals} residual adds on canonical coordinates; "
                   f"{len(res.new_params)} new dimensionless parameters; "
                   f"{len(res.dropped)} normaliser parameters dropped.")
    source = render_source(gen, units, source_name or type(model).__name__, how, summary)
    module = instantiate(source)
    left: list[Any] = []
    if to == "gct":
        from ..infer import infer_units
        from .kept import kept_rules

        ug = infer_units(module, example_inputs)
        for _ in range(4):  # a swap or a declaration can bring the next to light
            swapped = kept_rules(gen.root, caps.kept, ug)
            for new in swapped.gains:
                res.new_params[new.name] = new
                units[new.name] = new.unit
            gains = parameter_gains(module, ug.violations, set(units))
            for name, (where, unit) in gains.items():
                res.declared[name] = units[name] = unit
                said = "dimensionless" if unit == "1" else f"with the unit {unit}"
                res.log.append(f"[parameter_gains] {where} -> {name} declared {said}")
            res.log.extend(swapped.log)
            if not gains and not swapped.log:
                break
            source = render_source(gen, units, source_name or type(model).__name__, how, summary)
            module = instantiate(source)
            ug = infer_units(module, example_inputs)
        left = ug.violations
    module.load_state_dict(gen.root.state_dict())
    notes: list[str] = [compiled] if compiled else []
    if to == "gct":
        from .mixing import Unmeasured, new_dependencies

        try:
            for found in new_dependencies(model, module, example_inputs):
                res.unhandled.append({"module": "<root>", "reason": f"the rewrite mixes positions: {found} "
                                      "(C or P_perp over an axis other than the features)"})
        except Unmeasured as err:
            notes.append(f"positions not compared: {err}")
    return RewriteResult(module, source, res, nv, units, time.perf_counter() - t0, to,
                         [*caps.notes, *gen.notes, *notes], left, caps.kept)


def parameter_gains(module: nn.Module, violations: list[Any], declared: set[str]) -> dict[str, tuple[str, str]]:
    """Parameters that scale one term of a sum to the other's unit, among the UC101s a lint of
    ``module`` found, each undeclared: ``{name: (where, unit)}``.

    Where the rewrite made one term dimensionless and the other is a product of parameters alone
    (Mamba's skip term ``y + x * D``), each of them is a dimensionless gain. Where one term holds
    exactly one parameter (to the first power) and the other none (a super-resolution net's
    ``up(C(h)) + upsample(x)``, its head mapping canonical coordinates to the image's unit), the
    parameter takes the unit that makes the two agree (``in:x``). Only those units make the sum
    consistent, so the rewrite declares them (the oracle then checks them); anything else is left
    for the lint to report."""
    params = {name for name, _ in module.named_parameters()}
    free = {f"p:{n}" for n in params if n not in declared}
    out: dict[str, tuple[str, str]] = {}
    for v in violations:
        if v.rule != "UC101" or len(v.units) != 2:
            continue
        where = f"{v.op.split('.')[1] if v.op.count('.') >= 2 else v.op}@{v.module or '<root>'}"
        a, b = v.units.values()
        other = b if a.is_dimensionless else a if b.is_dimensionless else None
        if other is not None and not other.is_dimensionless and all(g in free for g in other.generators()):
            for g in other.generators():
                out.setdefault(g[2:], (where, "1"))
            continue
        for term, target in ((a, b), (b, a)):
            own = [g for g in term.generators() if g in free]
            if len(own) == 1 and term.exponent(own[0]) == 1 and not any(
                    g in free or g.startswith("v:") for g in (*target.generators(), *(term / Unit.generator(own[0])).generators())):
                out.setdefault(own[0][2:], (where, str(target / (term / Unit.generator(own[0])))))
                break
    return out


def instantiate(source: str) -> nn.Module:
    """Run generated code as a module of its own (registered, so deep copies find the class;
    its source in linecache, so tracebacks and the tracer's module comments can read it)."""
    name = f"_unitcheck_generated_{abs(hash(source))}"
    filename = f"<unitcheck-rewrite-{abs(hash(source))}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    mod = types.ModuleType(name)
    mod.__file__ = filename
    exec(compile(source, filename, "exec"), mod.__dict__)  # noqa: S102 (our own generated code)
    sys.modules[name] = mod
    return mod.Rewritten()  # type: ignore[no-any-return]


def rewrite_gct(model: nn.Module, example_inputs: Any, nvfp4: str | None = None) -> nn.Module:
    """The model rewritten to GCT form (existing weights kept); ``nvfp4`` is a recipe name."""
    return rewrite(model, example_inputs, nvfp4).module


def write_rewrite(result: RewriteResult, out_dir: str, source: str, example_inputs: Any,
                  extra: dict[str, Any] | None = None) -> list[str]:
    from .save import save_rewritten

    manifest = {"source": source, "to": result.to, "nvfp4": result.nvfp4.recipe if result.nvfp4 else None,
                "report": result.report(), **(extra or {})}
    return save_rewritten(out_dir, result.source, result.module, example_inputs, manifest)
