"""Text report in the style of ruff and rustc: one block per violation, then a summary."""

from __future__ import annotations

import linecache
import os
import re
from collections.abc import Iterable
from typing import Any

from ..diagnostics import Violation

__all__ = ["render", "relpath"]


def relpath(path: str, root: str | None = None) -> str:
    root = root or os.getcwd()
    try:
        rel = os.path.relpath(path, root)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def _column(file: str, line: int) -> int:
    text = linecache.getline(file, line)
    return len(text) - len(text.lstrip()) + 1 if text.strip() else 1


def _block(v: Violation, root: str | None) -> list[str]:
    loc = v.location
    head = f"{relpath(loc.file, root)}:{loc.line}:{_column(loc.file, loc.line)}" if loc else "<unknown>"
    lines = [f"{head}: {v.rule} [{v.severity}] {v.message}"]
    lines.append(f"  --> module: {v.module or '<root>'}  node: {v.node}  op: {v.op}")
    if loc and loc.code:
        width = len(str(loc.line))
        lines.append(f"{' ' * width} |")
        lines.append(f"{loc.line} | {loc.code}")
        lines.append(f"{' ' * width} |")
    if v.units:
        lines.append("  = units: " + "; ".join(f"{k} {u}" for k, u in v.units.items()))
    lines.append(f"  = fix: {v.fix}")
    return lines


def render(report: Any, root: str | None = None, verbose: bool = False) -> str:
    """Plain text; the CLI adds colour on a terminal."""
    out: list[str] = []
    for v in report.violations:
        out.extend(_block(v, root))
        out.append("")
    if verbose:
        for v in report.notes:
            out.extend(_block(v, root))
            out.append("")
    out.extend(summary_lines(report))
    return "\n".join(out) + "\n"


_STYLES = [
    (re.compile(r"^(\S+:\d+:\d+):", re.M), "bold"),
    (re.compile(r"\bUC\d{3}\b"), "bold red"),
    (re.compile(r"\[(error|warning|info)\]"), "yellow"),
    (re.compile(r"^\s*= fix:.*$", re.M), "green"),
    (re.compile(r"^\d+ \|.*$", re.M), "cyan"),
]


def print_colour(text: str) -> None:
    """Print with colour on a terminal (rich); callers print plain text in pipes and CI."""
    from rich.console import Console
    from rich.text import Text

    t = Text(text)
    for pattern, style in _STYLES:
        t.highlight_regex(pattern, style)
    Console(highlight=False, soft_wrap=True).print(t, end="")


def summary_lines(report: Any) -> list[str]:
    n = len(report.violations)
    lines = [
        f"{report.model}: {n} violation{'s' if n != 1 else ''} in {report.nodes} nodes "
        f"(coverage {report.coverage:.1%}"
        + (f", {len(report.suppressed)} suppressed" if report.suppressed else "")
        + ")"
    ]
    if n:
        lines.append("")
        lines.append(_table(["rule", "count", "what"], [
            (code, str(count), _summary(code)) for code, count in report.by_rule().items()
        ]))
        lines.append("")
        lines.append(_table(["module", "violations"], [
            (mod, str(count)) for mod, count in report.by_module().items()
        ]))
    unknown = report.unit_graph.unknown_ops
    if unknown:
        lines.append("ops with no unit rule: " + ", ".join(f"{k} ({v})" for k, v in unknown.items()))
    return lines


def _summary(code: str) -> str:
    from ..codes import CODES

    return CODES[code].summary


def _table(header: list[str], rows: Iterable[tuple[str, ...]]) -> str:
    rows = list(rows)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*r) for r in rows]
    return "\n".join(out)
