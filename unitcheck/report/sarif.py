"""SARIF 2.1.0 for GitHub code scanning: every rule in the driver, repository-relative locations,
stable partial fingerprints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..codes import CODES
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


def to_sarif(report: Any, root: str | None = None) -> dict[str, Any]:
    from .. import __version__

    root = root or repo_root()
    index = {code: i for i, code in enumerate(CODES)}
    occurrence: dict[str, int] = {}
    results = []
    for v in report.violations:
        n = occurrence[v.fingerprint] = occurrence.get(v.fingerprint, 0) + 1
        results.append({
            "ruleId": v.rule,
            "ruleIndex": index[v.rule],
            "level": _LEVEL[v.severity],
            "message": {"text": f"{v.message}. Fix: {v.fix}"},
            "locations": [_location(v, root, getattr(report, "default_location", None))],
            "partialFingerprints": {"unitcheck/v1": f"{v.fingerprint}:{n}"},
            "properties": {"module": v.module, "node": v.node, "op": v.op,
                           "units": {k: str(u) for k, u in v.units.items()}},
        })
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
