"""``lint(model, inputs) -> Report``: unit inference plus selection, suppression and severity."""

from __future__ import annotations

import fnmatch
import linecache
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from .codes import CODES, SEVERITY_RANK
from .diagnostics import Violation
from .errors import UsageError
from .infer import infer_units
from .tracer import uncompiled
from .unitgraph import UnitGraph

__all__ = ["Report", "lint", "select_codes", "JSON_VERSION"]

JSON_VERSION = "1.0"
_SUPPRESS = re.compile(r"#\s*unitcheck:\s*ignore(?:\[(?P<codes>[A-Za-z0-9_,\s]+)\])?")


def select_codes(codes: Iterable[str], select: Iterable[str] | None, ignore: Iterable[str] | None) -> set[str]:
    """Prefix matching as in ruff: ``UC2`` selects UC201..UC204; ``ALL`` everything."""
    def expand(pats: Iterable[str]) -> set[str]:
        out: set[str] = set()
        for p in pats:
            p = p.strip().upper()
            if not p:
                continue
            if p == "ALL":
                out.update(codes)
                continue
            hits = {c for c in codes if c.startswith(p)}
            if not hits:
                raise UsageError(f"unknown rule code or prefix {p!r}; `unitcheck rules` lists them")
            out.update(hits)
        return out

    all_codes = set(codes)
    chosen = expand(select) if select else {c for c in all_codes if not CODES[c].opt_in}
    return chosen - (expand(ignore) if ignore else set())


def _suppressed(v: Violation) -> bool:
    if v.location is None:
        return False
    line = v.location.code or linecache.getline(v.location.file, v.location.line)
    m = _SUPPRESS.search(line or "")
    if not m:
        line = linecache.getline(v.location.file, v.location.line)
        m = _SUPPRESS.search(line or "")
    if not m:
        return False
    codes = m.group("codes")
    return codes is None or v.rule in {c.strip().upper() for c in codes.split(",")}


@dataclass
class Report:
    """Violations kept after selection and suppression, with the unit graph they came from."""

    model: str
    unit_graph: UnitGraph
    violations: list[Violation]
    suppressed: list[Violation] = field(default_factory=list)
    notes: list[Violation] = field(default_factory=list)

    @property
    def nodes(self) -> int:
        return self.unit_graph.compute_nodes

    @property
    def coverage(self) -> float:
        return self.unit_graph.coverage

    def by_rule(self) -> dict[str, int]:
        return dict(sorted(Counter(v.rule for v in self.violations).items()))

    def by_module(self) -> dict[str, int]:
        return dict(Counter(v.module or "<root>" for v in self.violations))

    def count_at_least(self, level: str) -> int:
        if level == "never":
            return 0
        rank = SEVERITY_RANK[level]
        return sum(SEVERITY_RANK[v.severity] >= rank for v in self.violations)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": JSON_VERSION,
            "model": self.model,
            "summary": {
                "nodes": self.nodes,
                "violations": len(self.violations),
                "by_rule": self.by_rule(),
                "coverage": round(self.coverage, 6),
                "unknown_ops": dict(self.unit_graph.unknown_ops),
                "suppressed": len(self.suppressed),
            },
            "violations": [v.to_json() for v in self.violations],
            "suppressed": [v.to_json() for v in self.suppressed],
            "notes": [v.to_json() for v in self.notes],
        }


def filter_violations(
    violations: Iterable[Violation],
    select: Iterable[str] | None = None,
    ignore: Iterable[str] | None = None,
    per_module_ignores: Mapping[str, Iterable[str]] | None = None,
) -> tuple[list[Violation], list[Violation]]:
    """(kept, suppressed). Inline ``# unitcheck: ignore[UC201]`` comments suppress."""
    chosen = select_codes(CODES, select, ignore)
    kept: list[Violation] = []
    suppressed: list[Violation] = []
    for v in violations:
        if v.rule not in chosen:
            continue
        if per_module_ignores and any(
            fnmatch.fnmatchcase(v.module, pat) and v.rule in select_codes(CODES, codes, None)
            for pat, codes in per_module_ignores.items()
        ):
            continue
        if _suppressed(v):
            v.suppressed = True
            suppressed.append(v)
        else:
            kept.append(v)
    return kept, suppressed


def lint(
    model: nn.Module,
    example_inputs: Any,
    *,
    name: str | None = None,
    select: Iterable[str] | None = None,
    ignore: Iterable[str] | None = None,
    per_module_ignores: Mapping[str, Iterable[str]] | None = None,
    optimizer: Any = None,
    unit_graph: UnitGraph | None = None,
    **infer_kw: Any,
) -> Report:
    """Trace, infer units and report violations (SPEC 4), optionally update typing (SPEC 6)."""
    ug = unit_graph if unit_graph is not None else infer_units(model, example_inputs, **infer_kw)
    found = list(ug.violations)
    if optimizer is not None:
        from .updates import check_updates

        found += check_updates(ug, optimizer)
    kept, suppressed = filter_violations(found, select, ignore, per_module_ignores)
    return Report(name or type(uncompiled(model)).__name__, ug, kept, suppressed, list(ug.notes))
