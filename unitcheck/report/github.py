"""GitHub Actions workflow commands: ``::error file=...,line=...,title=...::message``.

One annotation per group of findings (they share the source line, so a pull request shows one
note where 32 layers would stack 32 identical ones); ``group=False`` annotates every finding."""

from __future__ import annotations

from typing import Any

from .group import compact_names, group_findings, index_span, singletons
from .paths import repo_relative, repo_root

__all__ = ["render"]

_KIND = {"error": "error", "warning": "warning", "info": "notice"}


def _escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_prop(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def render(report: Any, root: str | None = None, group: bool = True) -> str:
    root = root or repo_root()
    lines = []
    for g in (group_findings if group else singletons)(report.violations):
        v = g.example
        props = []
        if v.location is not None:
            path = repo_relative(v.location.file, root) or v.location.file
            props += [f"file={_escape_prop(path)}", f"line={v.location.line}"]
        title = f"{v.rule} {g.span}" if g.count == 1 else f"{v.rule} x{g.count} {g.span}"
        props.append(f"title={_escape_prop(title)}")
        message = g.message
        if g.count > 1:
            message += f" ({g.count} findings in {index_span([m.module for m in g.members])}: nodes "
            message += compact_names([m.node for m in g.members]) + ")"
        lines.append(f"::{_KIND[v.severity]} {','.join(props)}::{_escape_data(f'{message} (fix: {v.fix})')}")
    n = len(report.violations)
    lines.append(f"{report.model}: {n} violation{'s' if n != 1 else ''} in {report.nodes} nodes")
    return "\n".join(lines) + "\n"
