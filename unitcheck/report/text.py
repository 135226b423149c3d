"""Text report in the style of ruff and rustc: one block per group of findings (one per finding
with ``--no-group``), then a summary."""

from __future__ import annotations

import linecache
import os
import re
import textwrap
from collections.abc import Iterable, Sequence
from typing import Any

from ..diagnostics import Violation
from .group import Group, compact_names, group_findings, index_span, singletons
from .group import pattern as layer_pattern

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


def _block(v: Violation, root: str | None, title: str | None = None, example: bool = False) -> list[str]:
    loc = v.location
    head = f"{relpath(loc.file, root)}:{loc.line}:{_column(loc.file, loc.line)}" if loc else "<unknown>"
    lines = [f"{head}: {v.rule} [{v.severity}] {title or v.message}"]
    lines.append(f"  --> {'example: ' if example else ''}module: {v.module or '<root>'}  node: {v.node}  op: {v.op}")
    if loc and loc.code:
        width = len(str(loc.line))
        lines.append(f"{' ' * width} |")
        lines.append(f"{loc.line} | {loc.code}")
        lines.append(f"{' ' * width} |")
    if v.units:
        lines.append("  = units: " + "; ".join(f"{k} {u}" for k, u in v.units.items()))
    lines.append(f"  = fix: {v.fix}")
    return lines


def _group_block(g: Group, root: str | None) -> list[str]:
    """A group of one is the plain block; a larger group shows its example in full and names
    the other members compactly by node (the names ``--no-group`` and JSON use)."""
    if g.count == 1:
        return _block(g.example, root)
    lines = _block(g.example, root, title=f"x{g.count} {g.span}: {g.message}", example=True)
    rest = g.members[1:]
    also = f"  = {len(rest)} more in {index_span([v.module for v in rest]) or '<root>'}: " + compact_names([v.node for v in rest])
    lines += textwrap.wrap(also, width=100, subsequent_indent="      ", break_long_words=False, break_on_hyphens=False)
    return lines


def render(report: Any, root: str | None = None, verbose: bool = False, group: bool = True) -> str:
    """Plain text; the CLI adds colour on a terminal. ``group=False`` prints every finding."""
    make = group_findings if group else singletons
    groups = make(report.violations)
    out: list[str] = []
    for g in groups:
        out.extend(_group_block(g, root))
        out.append("")
    if verbose:
        for g in make(report.notes):
            out.extend(_group_block(g, root))
            out.append("")
    out.extend(summary_lines(report, groups if group else None))
    return "\n".join(out) + "\n"


_STYLES = [
    (re.compile(r"^(\S+:\d+:\d+):", re.M), "bold"),
    (re.compile(r"\bUC\d{3}\b"), "bold red"),
    (re.compile(r"(?<=\] )x\d+\b"), "bold"),
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


def _module_rows(report: Any, grouped: bool) -> list[tuple[str, str]]:
    counts = report.by_module()
    if not grouped:
        return [(mod, str(count)) for mod, count in counts.items()]
    by_pattern: dict[str, list[str]] = {}
    for mod in counts:
        by_pattern.setdefault(layer_pattern(mod), []).append(mod)
    return [(index_span(mods) if len(mods) > 1 else mods[0], str(sum(counts[m] for m in mods)))
            for mods in by_pattern.values()]


def summary_lines(report: Any, groups: Sequence[Group] | None = None) -> list[str]:
    """Totals, the per-rule table and the per-module table; with ``groups`` the module table
    folds modules that differ only in their layer index, like the findings above it."""
    n = len(report.violations)
    lines = [
        f"{report.model}: {n} violation{'s' if n != 1 else ''} in {report.nodes} nodes "
        f"(coverage {report.coverage:.1%}"
        + (f", {len(report.suppressed)} suppressed" if report.suppressed else "")
        + ")"
    ]
    if groups is not None and len(groups) < n:
        lines.append(f"shown as {len(groups)} groups of findings that repeat per layer (--no-group prints each)")
    if n:
        lines.append("")
        lines.append(_table(["rule", "count", "what"], [
            (code, str(count), _summary(code)) for code, count in report.by_rule().items()
        ]))
        lines.append("")
        lines.append(_table(["module", "violations"], _module_rows(report, groups is not None)))
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
