"""One self-contained HTML page per lint: summary, layer x rule heatmap, grouped findings with
code excerpts and fixes, and an explanation folded under every finding.

Self-contained means a CI artifact that opens anywhere, offline: inline CSS, inline SVG, no
script, no font, image or link that leaves the page (in-page ``#anchors`` only).

Explanations: ``render(..., explanations={key: text})`` puts the given text (or ``Html``, markup
the caller built and escaped) in the folded block of the finding with that key
(``group.finding_keys``: fingerprint plus occurrence, as in SARIF). Without one a finding's block
shows what ``unitcheck explain`` prints: for each generator of its units the tree of steps by
which it reached the node, an opaque ``v:`` scale linked to the finding that produced it.
"""

from __future__ import annotations

import linecache
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from ..diagnostics import Violation
from .group import Group, group_findings, layer_index, singletons
from .heatmap import render_svg
from .text import relpath

__all__ = ["render", "Html", "anchor", "EXCERPT_CONTEXT"]

EXCERPT_CONTEXT = 2  # source lines shown above and below a finding's line


class Html(str):
    """Markup that is already safe to insert (the caller escaped it); plain ``str`` is escaped."""


_CSS = """
:root{--fg:#1f2328;--muted:#656d76;--line:#d0d7de;--bg:#f6f8fa;--err:#b91c1c;--warn:#b45309;--info:#1d4ed8}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;color:var(--fg);background:#fff}
main{max-width:1320px;margin:0 auto;padding:20px 28px 40px}
h1{font-size:22px;margin:0 0 4px}h1 .model{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
h2{font-size:17px;margin:28px 0 10px;padding-bottom:4px;border-bottom:1px solid var(--line)}
h3{font-size:15px;margin:0 0 6px;display:flex;gap:8px;align-items:baseline;flex-wrap:wrap}
code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
.muted{color:var(--muted)}
.chips{display:flex;gap:8px;flex-wrap:wrap;margin:8px 0 0}
.chip{border:1px solid var(--line);border-radius:999px;padding:2px 10px;background:var(--bg)}
.chip b{font-variant-numeric:tabular-nums}
.chip.bad{border-color:#fca5a5;background:#fef2f2}.chip.good{border-color:#86efac;background:#f0fdf4}
table{border-collapse:collapse}th,td{text-align:left;padding:4px 12px 4px 0;border-bottom:1px solid #eaeef2;vertical-align:top}
th{font-weight:600;color:var(--muted)}td.num{text-align:right;font-variant-numeric:tabular-nums}
.rule{font-weight:700;font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.sev{font-size:11px;text-transform:uppercase;letter-spacing:.04em;border-radius:4px;padding:1px 6px;color:#fff}
.sev.error{background:var(--err)}.sev.warning{background:var(--warn)}.sev.info{background:var(--info)}
.count{font-weight:700;font-variant-numeric:tabular-nums}
.heatmap text{font:12px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;fill:var(--fg)}
.heatmap text.axis{fill:var(--muted);font-family:system-ui,sans-serif}.heatmap text.tick{fill:var(--muted)}
.heatmap text.rule{font-weight:700}.heatmap text.n{font-size:11px}.heatmap text.on-dark{fill:#fff}
.heatmap a rect:hover{stroke:var(--fg);stroke-width:1.5}
article.group{border:1px solid var(--line);border-left:4px solid var(--err);border-radius:6px;padding:12px 16px;margin:0 0 14px}
article.group.warning{border-left-color:var(--warn)}article.group.info{border-left-color:var(--info)}
.msg{margin:0 0 6px}.loc{margin:0 0 8px;color:var(--muted)}.loc code{color:var(--fg)}
pre.excerpt{background:var(--bg);border:1px solid #eaeef2;border-radius:6px;padding:6px 0;margin:0 0 8px;overflow-x:auto}
pre.excerpt span{display:block;padding:0 12px}pre.excerpt .ln{display:inline-block;min-width:3.5em;color:var(--muted);user-select:none}
pre.excerpt .hit{background:#fff1c2;border-left:3px solid #d4a72c;padding-left:9px}
dl.units{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:0 0 8px}dl.units dt{color:var(--muted)}dl.units dd{margin:0}
.fix{margin:0 0 8px;padding:6px 10px;background:#f0fdf4;border-left:3px solid #16a34a;border-radius:4px}
details{margin:4px 0}details>summary{cursor:pointer;color:#0b57d0}details>summary::marker{color:var(--muted)}
details.explain>div{margin:6px 0 6px 18px;padding:6px 10px;border-left:2px solid var(--line)}
details.explain ul{margin:2px 0;padding-left:18px}details.explain pre{margin:0;white-space:pre-wrap}
details.explain p{margin:4px 0}details.explain pre.tree{white-space:pre;overflow-x:auto;background:var(--bg);padding:6px 8px;border-radius:4px;margin:0 0 6px}
details.members>ol{margin:6px 0;padding-left:28px}details.members li{margin:2px 0}
footer{margin-top:32px;color:var(--muted);font-size:12px}
"""


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def anchor(key: str) -> str:
    """The page id of the finding with this ``finding_keys`` key."""
    return "f-" + key.replace(":", "-")


def _excerpt(v: Violation, context: int = EXCERPT_CONTEXT) -> str:
    loc = v.location
    if loc is None:
        return ""
    first = max(1, loc.line - context)
    rows = [(n, linecache.getline(loc.file, n).rstrip("\n")) for n in range(first, loc.line + context + 1)]
    if not any(text.strip() for _, text in rows):
        rows = [(loc.line, loc.code)] if loc.code else []
    while rows and not rows[-1][1].strip() and rows[-1][0] > loc.line:
        rows.pop()
    if not rows:
        return ""
    body = "".join(
        f'<span{" class=" + chr(34) + "hit" + chr(34) if n == loc.line else ""}><span class="ln">{n}</span>'
        f"{_e(text.expandtabs(4))}</span>"
        for n, text in rows
    )
    return f'<pre class="excerpt">{body}</pre>'


def _units(v: Violation) -> str:
    if not v.units:
        return ""
    rows = "".join(f"<dt>{_e(role)}</dt><dd><code>{_e(u)}</code></dd>" for role, u in v.units.items())
    return f'<dl class="units">{rows}</dl>'


class _Page:
    """What every finding's block needs to know about the rest of the report."""

    def __init__(self, groups: Sequence[Group], root: str | None, explanations: Mapping[str, str] | None,
                 unit_graph: Any = None) -> None:
        self.root = root
        self.explanations = explanations or {}
        self.unit_graph = unit_graph
        self.by_node: dict[str, str] = {}  # node name -> anchor of the finding there
        self.rule_of: dict[str, str] = {}
        for g in groups:
            for v, key in zip(g.members, g.keys, strict=True):
                self.by_node.setdefault(v.node, anchor(key))
                self.rule_of.setdefault(v.node, v.rule)

    def _generator(self, gen: str) -> str:
        kind, _, name = gen.partition(":")
        if kind == "p":
            return "a learnable parameter: every weight is its own scale degree of freedom"
        if kind == "in":
            return "a model input's scale"
        if kind == "s":
            return "a user-declared scale"
        if kind == "v":
            where = self.by_node.get(name)
            if where:
                return (f'an opaque scale born at node <code>{_e(name)}</code>, the output of the '
                        f'<a href="#{_e(where)}">{_e(self.rule_of[name])} finding</a> there')
            return f"an opaque scale born at node <code>{_e(name)}</code> (an unreported violation or an op with no rule)"
        return "a generator"

    def explanation(self, v: Violation, key: str) -> str:
        given = self.explanations.get(key)
        if given is not None:
            return given if isinstance(given, Html) else f"<pre>{_e(given)}</pre>"
        if self.unit_graph is not None:
            tree = self.provenance(v, key)
            if tree:
                return tree
        items = []
        for role, u in v.units.items():
            gens = "".join(
                f"<li><code>{_e(g)}{'' if e == 1 else '^' + _e(e)}</code>: {self._generator(g)}</li>"
                for g, e in (u.items() if hasattr(u, "items") else [])
            )
            items.append(f"<li><b>{_e(role)}</b> <code>{_e(u)}</code><ul>{gens}</ul></li>")
        return (f"<p>node <code>{_e(v.node)}</code> (<code>{_e(v.op)}</code>) in <code>{_e(v.module or '<root>')}</code>; "
                f"the generators of its units:</p><ul>{''.join(items)}</ul>")

    def provenance(self, v: Violation, key: str) -> str:
        """The finding's provenance trees (``unitcheck explain``): one per generator of each of
        its units, an opaque scale's origin linked to the finding that created it."""
        from ..explain import LEGEND, explain_finding, tree_lines

        expl = explain_finding(self.unit_graph, v, key)
        if not expl.roles:
            return ""
        parts = [f'<p class="muted">{_e(LEGEND)}</p>']
        for r in expl.roles:
            src = f" (from {_e(', '.join(r.sources))})" if r.sources and r.sources != [v.node] else ""
            parts.append(f"<p><b>{_e(r.role)}</b> <code>{_e(r.unit)}</code>{src}</p>")
            for t in r.trees:
                lines = []
                for text, step in tree_lines(t, indent=""):
                    line = _e(text)
                    if step is not None and step.kind == "origin" and t.generator.startswith("v:"):
                        where = self.by_node.get(step.node)
                        if where:
                            line += f' <a href="#{_e(where)}">({_e(self.rule_of[step.node])} finding)</a>'
                    lines.append(line)
                parts.append(f'<pre class="tree">{chr(10).join(lines)}</pre>')
        return "".join(parts)

    def folded(self, v: Violation, key: str, summary: str, open_: bool = False) -> str:
        return (f'<details class="explain"{" open" if open_ else ""}><summary>{summary}</summary>'
                f"<div>{self.explanation(v, key)}</div></details>")

    def card(self, g: Group, open_first: bool) -> str:
        v = g.example
        loc = v.location
        where = (f"<code>{_e(relpath(loc.file, self.root))}:{loc.line}</code>" if loc else "<code>&lt;unknown&gt;</code>")
        count = f'<span class="count">&times;{g.count}</span>' if g.count > 1 else ""
        example = "example: " if g.count > 1 else ""
        parts = [
            f'<article class="group {_e(g.severity)}" id="{anchor(g.keys[0])}">',
            f'<h3><span class="rule">{_e(g.rule)}</span><span class="sev {_e(g.severity)}">{_e(g.severity)}</span>'
            f"{count}<code>{_e(g.span)}</code></h3>",
            f'<p class="msg">{_e(g.message)}</p>',
            f'<p class="loc">{where} &middot; {example}module <code>{_e(v.module or "<root>")}</code> &middot; '
            f"node <code>{_e(v.node)}</code> &middot; op <code>{_e(v.op)}</code></p>",
            _excerpt(v),
            _units(v),
            f'<p class="fix"><b>Fix:</b> {_e(v.fix)}</p>',
            self.folded(v, g.keys[0], f"why these units ({_e(v.node)})", open_first),
        ]
        if g.count > 1:
            rows = "".join(
                f'<li id="{anchor(k)}">' + self.folded(
                    m, k, f"<code>{_e(m.module or '<root>')}</code> &middot; node <code>{_e(m.node)}</code> &middot; "
                          + "; ".join(f"{_e(r)} <code>{_e(u)}</code>" for r, u in m.units.items()))
                + "</li>"
                for m, k in zip(g.members[1:], g.keys[1:], strict=True)
            )
            others = "the other finding" if g.count == 2 else f"the other {g.count - 1} findings, each"
            parts.append(f'<details class="members"><summary>{others} with its explanation</summary>'
                         f'<ol start="2">{rows}</ol></details>')
        parts.append("</article>")
        return "".join(parts)


def _rule_table(report: Any, groups: Sequence[Group]) -> str:
    from ..codes import CODES

    per_rule: dict[str, int] = {}
    for g in groups:
        per_rule[g.rule] = per_rule.get(g.rule, 0) + 1
    rows = "".join(
        f'<tr><td class="rule">{_e(code)}</td><td><span class="sev {_e(CODES[code].severity)}">'
        f"{_e(CODES[code].severity)}</span></td><td class=\"num\">{n}</td><td class=\"num\">{per_rule.get(code, 0)}</td>"
        f"<td>{_e(CODES[code].summary)}</td></tr>"
        for code, n in report.by_rule().items()
    )
    return ("<table><thead><tr><th>rule</th><th>severity</th><th>findings</th><th>groups</th><th>what</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>")


def render(report: Any, root: str | None = None, verbose: bool = False, group: bool = True,
           fixed: Sequence[Any] | None = None, explanations: Mapping[str, str] | None = None) -> str:
    """The page as one string (``--output report.html`` writes it atomically)."""
    from .. import __version__
    from ..codes import CODES

    make = group_findings if group else singletons
    groups = make(report.violations)
    notes = make(report.notes) if verbose else []
    page = _Page([*groups, *notes], root, explanations, getattr(report, "unit_graph", None))
    n = len(report.violations)
    chips = [
        f'<span class="chip {"bad" if n else "good"}"><b>{n}</b> violation{"s" if n != 1 else ""}</span>',
        f'<span class="chip"><b>{len(groups)}</b> group{"s" if len(groups) != 1 else ""}</span>',
        f'<span class="chip"><b>{report.nodes}</b> nodes</span>',
        f'<span class="chip">coverage <b>{report.coverage:.1%}</b></span>',
    ]
    if report.suppressed:
        chips.append(f'<span class="chip"><b>{len(report.suppressed)}</b> suppressed</span>')
    unknown = report.unit_graph.unknown_ops
    if unknown:
        chips.append(f'<span class="chip">ops with no rule: {_e(", ".join(f"{k} ({c})" for k, c in unknown.items()))}</span>')
    anchors: dict[tuple[str, int | None], str] = {}
    for g in groups:
        for v, key in zip(g.members, g.keys, strict=True):
            anchors.setdefault((v.rule, layer_index(v.module)), anchor(key))
    body = [
        f'<header><h1>unitcheck <span class="model">{_e(report.model)}</span></h1>',
        f'<div class="chips">{"".join(chips)}</div></header>',
    ]
    if n:
        body += [
            '<section id="summary"><h2>Rules</h2>', _rule_table(report, groups), "</section>",
            '<section id="heatmap"><h2>Findings per layer and rule</h2>',
            '<p class="muted">A finding\'s layer is the first number in its module path; '
            "click a cell for its first finding.</p>",
            render_svg(report.violations, anchors, {c: CODES[c].summary for c in CODES}),
            "</section>",
            '<section id="findings"><h2>Findings</h2>',
            *(page.card(g, open_first=(i == 0)) for i, g in enumerate(groups)),
            "</section>",
        ]
    else:
        body.append('<p class="chip good">No violations at the selected rules.</p>')
    if fixed:
        body.append('<section id="fixed"><h2>Fixed since the baseline</h2><ul>'
                    + "".join(f"<li><code>{_e(f)}</code></li>" for f in fixed) + "</ul></section>")
    if notes:
        body += ['<section id="notes"><h2>Notes</h2>', *(page.card(g, open_first=False) for g in notes), "</section>"]
    body.append(f"<footer>unitcheck {_e(__version__)} &middot; one self-contained file: no script, "
                "no network access, no external assets.</footer>")
    return ("<!DOCTYPE html>\n"
            f'<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, '
            f'initial-scale=1"><title>unitcheck: {_e(report.model)}</title><style>{_CSS}</style></head>\n'
            f"<body><main>\n" + "\n".join(body) + "\n</main></body></html>\n")
