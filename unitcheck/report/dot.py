"""Graphviz DOT of a unit graph: units on the edges, violations highlighted (networkx model)."""

from __future__ import annotations

from typing import Any

import networkx as nx

__all__ = ["to_networkx", "render_dot"]


def to_networkx(ug: Any) -> nx.DiGraph:
    from ..fxutil import op_name
    from ..record import record

    g = nx.DiGraph()
    for n in ug.graph.nodes:
        if n.op == "output":
            continue
        leaf = ug.traced.leaves.get(n.name)
        label = leaf.name if leaf else op_name(n).replace("aten.", "")
        g.add_node(n.name, label=label, violation=record(n).violation or "", leaf=bool(leaf))
        for p in n.all_input_nodes:
            if p.op != "output":
                g.add_edge(p.name, n.name, unit=str(record(p).unit))
    return g


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_dot(ug: Any, name: str = "model") -> str:
    g = to_networkx(ug)
    lines = [f"digraph {_q(name)} {{", "  rankdir=TB;", '  node [shape=box, fontsize=10];', '  edge [fontsize=8];']
    for n, data in g.nodes(data=True):
        attrs = [f"label={_q(data['label'] + (chr(10) + data['violation'] if data['violation'] else ''))}"]
        if data["violation"]:
            attrs.append('color=red, style=filled, fillcolor="#ffd6d6"')
        elif data["leaf"]:
            attrs.append('shape=ellipse, color=gray40')
        lines.append(f"  {_q(n)} [{', '.join(attrs)}];")
    for a, b, data in g.edges(data=True):
        unit = data["unit"]
        label = "" if unit in ("None", "index") else unit
        lines.append(f"  {_q(a)} -> {_q(b)} [label={_q(label)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
