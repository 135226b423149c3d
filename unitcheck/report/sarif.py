"""SARIF 2.1.0 for GitHub code scanning: every rule in the driver, repository-relative locations,
stable partial fingerprints, one result per finding.

Findings that repeat per layer (``group.py``) are linked through ``relatedLocations`` as a star:
the group's first finding lists every other member, each member points back at the first. A
full clique would grow with the square of the depth (80 layers: 6,000 links per group)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..codes import CODES
from .group import Group, finding_keys, group_findings
from .paths import repo_relative, repo_root

__all__ = ["render", "to_sarif"]

_LEVEL = {"error": "error", "warning": "warning", "info": "note"}


def _rule_name(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("-"))


def _rules() -> list[dict[str, Any]]:
    out = []
    for c in CODES.values():
        out.append({
            "id": c.code,
            "name": _rule_name(c.name),
            "shortDescription": {"text": c.summary},
            "fullDescription": {"text": c.doc.split("## Why it matters")[0].replace("## What it does", "").strip()},
            "help": {"text": c.doc, "markdown": c.doc},
            "helpUri": f"https://github.com/unitcheck/unitcheck/blob/main/docs/rules/{c.code}.md",
            "defaultConfiguration": {"level": _LEVEL[c.severity]},
            "properties": {"tags": ["units", c.severity], "precision": "very-high"},
        })
    return out


def _location(v: Any, root: str, fallback: Any) -> dict[str, Any]:
    loc = v.location or fallback
    physical: dict[str, Any]
    if loc is None:
        physical = {"artifactLocation": {"uri": "pyproject.toml", "uriBaseId": "%SRCROOT%"}}
    else:
        rel = repo_relative(loc.file, root)
        artifact = ({"uri": rel, "uriBaseId": "%SRCROOT%"} if rel is not None
                    else {"uri": Path(loc.file).resolve().as_uri()})
        physical = {"artifactLocation": artifact, "region": {"startLine": max(1, int(loc.line))}}
    out: dict[str, Any] = {"physicalLocation": physical}
    if v.module:
        out["logicalLocations"] = [{"fullyQualifiedName": v.module, "kind": "module"}]
    return out


def _related(v: Any, g: Group, root: str, fallback: Any) -> list[dict[str, Any]]:
    """The star of links described in the module docstring; ``id`` is the member's index."""
    def link(i: int, text: str) -> dict[str, Any]:
        m = g.members[i]
        loc = _location(m, root, fallback)
        loc["id"] = i
        loc["message"] = {"text": f"{text}: {m.module or '<root>'} (node {m.node})"}
        return loc

    if v is g.example:
        return [link(i, f"same finding, {i + 1} of {g.count}") for i in range(1, g.count)]
    return [link(0, f"first of the {g.count} findings of this group")]


def to_sarif(report: Any, root: str | None = None) -> dict[str, Any]:
    from .. import __version__

    root = root or repo_root()
    fallback = getattr(report, "default_location", None)
    index = {code: i for i, code in enumerate(CODES)}
    group_of = {id(m): g for g in group_findings(report.violations) for m in g.members}
    results = []
    for v, key in zip(report.violations, finding_keys(report.violations), strict=True):
        result: dict[str, Any] = {
            "ruleId": v.rule,
            "ruleIndex": index[v.rule],
            "level": _LEVEL[v.severity],
            "message": {"text": f"{v.message}. Fix: {v.fix}"},
            "locations": [_location(v, root, fallback)],
            "partialFingerprints": {"unitcheck/v1": key},
            "properties": {"module": v.module, "node": v.node, "op": v.op,
                           "units": {k: str(u) for k, u in v.units.items()}},
        }
        g = group_of[id(v)]
        if g.count > 1:
            result["relatedLocations"] = _related(v, g, root, fallback)
        results.append(result)
    return {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "unitcheck",
                "version": __version__,
                "semanticVersion": __version__,
                "informationUri": "https://github.com/unitcheck/unitcheck",
                "rules": _rules(),
            }},
            "originalUriBaseIds": {"%SRCROOT%": {"uri": Path(root).resolve().as_uri() + "/"}},
            "automationDetails": {"id": f"unitcheck/{report.model}/"},
            "results": results,
        }],
    }


def render(report: Any, root: str | None = None) -> str:
    return json.dumps(to_sarif(report, root), indent=2) + "\n"
