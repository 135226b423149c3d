"""GitHub Actions workflow commands: ``::error file=...,line=...,title=...::message``."""

from __future__ import annotations

from typing import Any

from .paths import repo_relative, repo_root

__all__ = ["render"]

_KIND = {"error": "error", "warning": "warning", "info": "notice"}


def _escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_prop(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def render(report: Any, root: str | None = None) -> str:
    root = root or repo_root()
    lines = []
    for v in report.violations:
        props = []
        if v.location is not None:
            path = repo_relative(v.location.file, root) or v.location.file
            props += [f"file={_escape_prop(path)}", f"line={v.location.line}"]
        title = f"{v.rule} {v.module or '<root>'}"
        props.append(f"title={_escape_prop(title)}")
        lines.append(f"::{_KIND[v.severity]} {','.join(props)}::{_escape_data(f'{v.message} (fix: {v.fix})')}")
    n = len(report.violations)
    lines.append(f"{report.model}: {n} violation{'s' if n != 1 else ''} in {report.nodes} nodes")
    return "\n".join(lines) + "\n"
