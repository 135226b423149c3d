"""Report formats: text, json, sarif, junit, github, html (and dot for unit graphs)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["render", "FORMATS"]

FORMATS = ("text", "json", "sarif", "junit", "github", "html")


def render(report: Any, fmt: str, verbose: bool = False, fixed: list[Any] | None = None, root: str | None = None,
           group: bool = True, explanations: Mapping[str, str] | None = None) -> str:
    """``group`` folds findings that repeat per layer in text, github and html (the machine
    formats list every finding). ``explanations`` maps a finding key (``group.finding_keys``)
    to the text, or ``html.Html``, folded under that finding in the html format."""
    if fmt == "text":
        from . import text

        out = text.render(report, root=root, verbose=verbose, group=group)
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

        return github.render(report, root=root, group=group)
    if fmt == "html":
        from . import html

        return html.render(report, root=root, verbose=verbose, group=group, fixed=fixed, explanations=explanations)
    raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
