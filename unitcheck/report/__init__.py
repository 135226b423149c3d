"""Report formats: text, json, sarif, junit, github (and dot for unit graphs)."""

from __future__ import annotations

from typing import Any

__all__ = ["render", "FORMATS"]

FORMATS = ("text", "json", "sarif", "junit", "github")


def render(report: Any, fmt: str, verbose: bool = False, fixed: list[Any] | None = None, root: str | None = None) -> str:
    if fmt == "text":
        from . import text

        out = text.render(report, root=root, verbose=verbose)
        if fixed:
            out += f"fixed since the baseline: {len(fixed)}\n" + "".join(f"  {f}\n" for f in fixed)
        return out
    if fmt == "json":
        from . import json

        return json.render(report, root=root, fixed=fixed)
    if fmt == "sarif":
        from . import sarif

        return sarif.render(report, root=root)
    if fmt == "junit":
        from . import junit

        return junit.render(report, root=root)
    if fmt == "github":
        from . import github

        return github.render(report, root=root)
    raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
