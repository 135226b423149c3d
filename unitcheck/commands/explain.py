"""``unitcheck explain MODEL FINDING``: how each generator of a finding's units reached it."""

from __future__ import annotations

import argparse
import difflib
import json
import re
from typing import Any

from ._common import UsageError, load, write_output

_HEX = re.compile(r"[0-9a-f]{16}")
_KEY = re.compile(r"([0-9a-f]{16}):(\d+)")
_CODE = re.compile(r"UC\d{3}", re.IGNORECASE)


def resolve(report: Any, query: str) -> tuple[Any, str | None, Any]:
    """``(finding, key, node)`` for FINDING: a rule code (its first finding), a fingerprint or a
    finding key (``fingerprint:n``), or a node name (its finding, else the node alone). The
    report's findings come first; then those selection, suppression or a baseline dropped."""
    from ..codes import CODES
    from ..report.group import finding_keys

    q = query.strip()
    kept = list(report.violations)
    found: list[tuple[Any, str | None]] = [*zip(kept, finding_keys(kept), strict=True)]
    found += [(v, None) for v in (*report.suppressed, *report.unit_graph.violations)
              if not any(v is w for w, _ in found)]
    ug = report.unit_graph
    if _CODE.fullmatch(q):
        code = q.upper()
        if code not in CODES:
            raise UsageError(f"unknown rule code {q!r}; `unitcheck rules` lists them")
        for v, k in found:
            if v.rule == code:
                return v, k, ug.node(v.node) if _has_node(ug, v.node) else None
        raise UsageError(f"{report.model} has no {code} finding; {_what_it_has(found)}")
    low = q.lower()
    if m := _KEY.fullmatch(low):
        same = [(v, k) for v, k in found if v.fingerprint == m.group(1)]
        n = int(m.group(2))
        if 1 <= n <= len(same):
            v, _ = same[n - 1]
            return v, f"{m.group(1)}:{n}", ug.node(v.node) if _has_node(ug, v.node) else None
    if _HEX.fullmatch(low):
        for v, k in found:
            if v.fingerprint == low:
                return v, k, ug.node(v.node) if _has_node(ug, v.node) else None
    for v, k in found:
        if v.node == q:
            return v, k, ug.node(v.node) if _has_node(ug, v.node) else None
    if _has_node(ug, q):
        return None, None, ug.node(q)
    names = [v.node for v, _ in found] + [n.name for n in ug.graph.nodes if n.op != "output"]
    close = difflib.get_close_matches(q, list(dict.fromkeys(names)), n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise UsageError(f"no finding or node {q!r} in {report.model}: {hint}FINDING is a node name, a "
                     f"fingerprint (lint --format json) or a rule code; {_what_it_has(found)}")


def _has_node(ug: Any, name: str) -> bool:
    try:
        ug.node(name)
    except KeyError:
        return False
    return True


def _what_it_has(found: list[tuple[Any, str | None]]) -> str:
    if not found:
        return "it has no findings (`unitcheck units MODEL --node NAME` shows one node)"
    first: dict[str, str] = {}
    for v, _ in found:
        first.setdefault(v.rule, v.node)
    return "its findings: " + ", ".join(f"{code} (first at {node})" for code, node in sorted(first.items()))


def run(args: argparse.Namespace) -> int:
    from ..config import load_config
    from ..explain import explain_finding, explain_node, render_text, to_json
    from ..infer import DEFAULT_FLOOR_EPS
    from ..linter import lint

    cfg = load_config(args.config)
    loaded = load(args)
    report = lint(
        loaded.model, loaded.inputs, name=loaded.name, select=cfg.select, ignore=cfg.ignore,
        per_module_ignores=cfg.per_module_ignores, declare=cfg.declare or None,
        floor_eps=cfg.floor_eps if cfg.floor_eps is not None else DEFAULT_FLOOR_EPS, method=args.tracer,
    )
    v, key, node = resolve(report, args.finding)
    ug = report.unit_graph
    expl = explain_finding(ug, v, key) if v is not None else explain_node(ug, node)
    if args.format == "json":
        text = json.dumps({"model": loaded.name, **to_json(expl)}, indent=2) + "\n"
    else:
        text = render_text(expl)
    write_output(text, args.output)
    return 0
