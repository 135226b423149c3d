"""``unitcheck units MODEL [--verify]``: per-node forward and gradient units."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..report.text import relpath
from ._common import UsageError, load, write_output


def _fmt(u: Any) -> str | None:
    if u is None:
        return None
    if isinstance(u, tuple):
        return "(" + ", ".join(str(_fmt(x)) for x in u) + ")"
    return str(u)


def node_rows(ug: Any) -> list[dict[str, Any]]:
    from ..fxutil import module_path, op_name
    from ..record import record

    rows = []
    for n in ug.graph.nodes:
        if n.op == "output":
            continue
        leaf = ug.traced.leaves.get(n.name)
        rows.append({
            "node": n.name,
            "op": leaf.kind if leaf else op_name(n),
            "module": (leaf.name if leaf else module_path(n)),
            "unit": _fmt(record(n).unit),
            "grad_unit": _fmt(record(n).grad_unit),
            "violation": record(n).violation,
        })
    return rows


def find_node(ug: Any, name: str, model: str) -> Any:
    """A node by its graph name or, for a parameter, buffer or input, by its qualified name."""
    import difflib

    try:
        return ug.node(name)
    except KeyError:
        pass
    for n, leaf in ug.traced.leaves.items():
        if leaf.name == name:
            return ug.node(n)
    names = [n.name for n in ug.graph.nodes if n.op != "output"] + [leaf.name for leaf in ug.traced.leaves.values()]
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise UsageError(f"no node {name!r} in {model}: {hint}`unitcheck units {model}` lists every node")


def node_text(info: dict[str, Any], model: str) -> str:
    loc = info["location"]
    where = f"{relpath(loc['file'])}:{loc['line']}" if loc else None
    if info["rule"] is None and info["op"] in ("param", "buffer", "input", "constant"):
        lines = [f"node {info['node']} ({info['op']} {info['module']})"]
    else:
        lines = [f"node {info['node']} ({info['op']}) in {info['module'] or '<root>'}"]
    if loc:
        lines.append(f"  at {where}: {loc['code']}" if loc["code"] else f"  at {where}")
    lines += [
        f"  unit:           {info['unit']}",
        f"  gradient unit:  {info['grad_unit']}   (u(L) / u(node), Prop. 1; loss unit {info['loss_unit'] or '1 (no loss)'})",
        f"  set by:         {info['set_by']}",
        f"  finding:        {info['finding'] or 'none'}"
        + (f"   (`unitcheck explain {model} {info['node']}` shows where its units come from)" if info["finding"] else ""),
    ]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    from ..config import load_config
    from ..infer import infer_units

    cfg = load_config(args.config)
    if args.node is not None and args.format == "dot":
        raise UsageError("--node shows one node as text or json: drop --format dot")
    loaded = load(args, real=args.verify)
    ug = infer_units(loaded.model, loaded.inputs, declare=cfg.declare or None, method=args.tracer)
    oracle_json = None
    result = None
    if args.verify:
        from ..oracle import verify

        result = verify(loaded.model, loaded.inputs, with_fingerprint=ug.loss_node is not None,
                        declare=cfg.declare or None, method=args.tracer)
        oracle_json = result.to_json()
    if args.node is not None:
        from ..explain import node_info

        info = node_info(ug, find_node(ug, args.node, loaded.name))
        if args.format == "json":
            text = json.dumps({"model": loaded.name, **info, **({"oracle": oracle_json} if oracle_json else {})},
                              indent=2) + "\n"
        else:
            text = node_text(info, loaded.name) + (_oracle_text(result) + "\n" if result is not None else "")
    elif args.format == "dot":
        from ..report.dot import render_dot

        text = render_dot(ug, loaded.name)
    elif args.format == "json":
        data: dict[str, Any] = {
            "model": loaded.name,
            "loss_unit": _fmt(ug.loss_unit),
            "coverage": ug.coverage,
            "generators": ug.generators(),
            "nodes": node_rows(ug),
        }
        if oracle_json is not None:
            data["oracle"] = oracle_json
        text = json.dumps(data, indent=2) + "\n"
    else:
        rows = node_rows(ug)
        w_node = max(len(r["node"]) for r in rows)
        w_op = max(len(r["op"]) for r in rows)
        lines = [f"{'node':<{w_node}}  {'op':<{w_op}}  unit  |  gradient unit"]
        for r in rows:
            mark = f"  <- {r['violation']}" if r["violation"] else ""
            lines.append(f"{r['node']:<{w_node}}  {r['op']:<{w_op}}  {r['unit']}  |  {r['grad_unit']}{mark}")
        lines.append(f"\nloss unit: {_fmt(ug.loss_unit)}; coverage {ug.coverage:.1%}; "
                     f"{len(ug.violations)} violation(s)")
        if result is not None:
            lines.append(_oracle_text(result))
        text = "\n".join(lines) + "\n"
    write_output(text, args.output)
    if result is not None and not result.ok:
        return 1
    return 0


def _oracle_text(r: Any) -> str:
    out = [
        f"oracle: local checked {r.checked}, agreed {r.agreed}; violations {r.violations}, confirmed "
        f"{r.confirmed}; global checked {r.global_checked}, agreed {r.global_agreed}; gradients "
        f"checked {r.grad_checked}, agreed {r.grad_agreed}"
    ]
    if r.unexercised:
        out.append(f"unexercised: {len(r.unexercised)} violations the example's values leave empty or "
                   f"behind a constant mask ({', '.join(r.unexercised[:5])}{', ...' if len(r.unexercised) > 5 else ''})")
    out.extend(f"note: {n}" for n in r.notes)
    if r.fingerprint is not None:
        m = sum(x.match for x in r.fingerprint)
        out.append(f"fingerprint: {m}/{len(r.fingerprint)} generators match")
    for d in r.disagreements[:20]:
        out.append(f"  disagreement: {d}")
    return "\n".join(out)
