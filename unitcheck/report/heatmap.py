"""Layer x rule heatmap as inline SVG, for the HTML report: where in depth each rule fires.

A finding's layer is the first numeric component of its module path (``model.layers.3.mlp`` ->
3); findings outside the repeated blocks (embeddings, the head, the loss) share one column,
``other``. Columns run over every index from 0 to the deepest one, so a layer without findings
shows as a gap rather than disappearing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from html import escape

from ..diagnostics import Violation
from .group import layer_index

__all__ = ["layer_rule_counts", "render_svg"]

_LOW = (250, 170, 170)  # one finding: clearly apart from an empty cell
_HIGH = (153, 27, 27)  # the busiest cell
_EMPTY = "#f1f3f5"
_LABEL_W = 64
_CELL_H = 24
_TOP = 34
_MAX_W = 1180


def layer_rule_counts(violations: Sequence[Violation]) -> Counter[tuple[str, int | None]]:
    """(rule, layer or None) -> number of findings."""
    return Counter((v.rule, layer_index(v.module)) for v in violations)


def _colour(count: int, peak: int) -> str:
    if count == 0:
        return _EMPTY
    t = 1.0 if peak <= 1 else (count - 1) / (peak - 1)
    rgb = (round(lo + (hi - lo) * t) for lo, hi in zip(_LOW, _HIGH, strict=True))
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def render_svg(violations: Sequence[Violation], anchors: Mapping[tuple[str, int | None], str] | None = None,
               summaries: Mapping[str, str] | None = None) -> str:
    """The heatmap; ``anchors`` maps a cell to the in-page id of its first finding (cells become
    links), ``summaries`` a rule code to the one-line text shown in its tooltip."""
    counts = layer_rule_counts(violations)
    if not counts:
        return '<p class="muted">No findings: nothing to map.</p>'
    rules = sorted({r for r, _ in counts})
    layers = [i for _, i in counts if i is not None]
    columns: list[int | None] = list(range(max(layers) + 1)) if layers else []
    if any(i is None for _, i in counts):
        columns.append(None)
    cw = max(8, min(40, (_MAX_W - _LABEL_W - 40) // max(1, len(columns))))
    other_w = max(cw, 40)
    width = _LABEL_W + cw * len(columns) + (24 + other_w - cw if None in columns else 0) + 2
    height = _TOP + _CELL_H * len(rules) + 30
    peak = max(counts.values())
    label_every = 1 if cw >= 20 else 2 if cw >= 12 else 5
    out = [f'<svg class="heatmap" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
           f'aria-label="findings per layer and rule">']
    out.append(f'<text class="axis" x="{_LABEL_W}" y="11">layer</text>')

    def x_of(j: int, col: int | None) -> int:
        return _LABEL_W + cw * j + (24 if col is None else 0)

    for j, col in enumerate(columns):
        if col is None or col % label_every == 0:
            label = "other" if col is None else str(col)
            cx = x_of(j, col) + (cw / 2 if col is not None else 0)
            anchor = "middle" if col is not None else "start"
            out.append(f'<text class="tick" x="{cx:g}" y="{_TOP - 6}" text-anchor="{anchor}">{label}</text>')
    for i, rule in enumerate(rules):
        y = _TOP + _CELL_H * i
        out.append(f'<text class="rule" x="0" y="{y + _CELL_H / 2 + 4:g}">{rule}</text>')
        for j, col in enumerate(columns):
            n = counts.get((rule, col), 0)
            x = x_of(j, col)
            w = cw if col is not None else other_w
            where = "outside the repeated layers" if col is None else f"layer {col}"
            what = f" ({summaries[rule]})" if summaries and rule in summaries else ""
            cell = (f'<rect x="{x + 1}" y="{y + 1}" width="{w - 2}" height="{_CELL_H - 2}" rx="2" '
                    f'fill="{_colour(n, peak)}"><title>{escape(f"{rule}{what}, {where}: {n} finding" + ("s" if n != 1 else ""))}</title></rect>')
            if n and cw >= 16:
                dark = n > 1 and (n - 1) / max(1, peak - 1) > 0.45
                cell += (f'<text class="n{" on-dark" if dark else ""}" x="{x + w / 2:g}" y="{y + _CELL_H / 2 + 4:g}" '
                         f'text-anchor="middle">{n}</text>')
            href = anchors.get((rule, col)) if anchors and n else None
            out.append(f'<a href="#{escape(href)}">{cell}</a>' if href else cell)
    legend_y = _TOP + _CELL_H * len(rules) + 12
    out.append(f'<text class="axis" x="0" y="{legend_y + 10}">findings</text>')
    for k, n in enumerate(sorted({1, (peak + 1) // 2, peak})):
        lx = _LABEL_W + 70 * k
        out.append(f'<rect x="{lx}" y="{legend_y}" width="14" height="14" rx="2" fill="{_colour(n, peak)}"/>'
                   f'<text class="tick" x="{lx + 18}" y="{legend_y + 11}">{n}</text>')
    out.append("</svg>")
    return "".join(out)
