"""JSON report: the versioned schema of SPEC 10 (docs/schema/lint.schema.json)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["render"]


def render(report: Any, root: str | None = None, fixed: list[Any] | None = None) -> str:
    data = report.to_json()
    if fixed is not None:
        data["fixed"] = list(fixed)
    if root is not None:
        from .text import relpath

        for v in data["violations"] + data["suppressed"] + data["notes"]:
            if "location" in v:
                v["location"]["file"] = relpath(v["location"]["file"], root)
    return json.dumps(data, indent=2, sort_keys=False) + "\n"
