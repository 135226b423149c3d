"""``unitcheck rewrite MODEL --to gct|identity [--nvfp4 te|ngpt] --out DIR``.

The contract (issue 15): ``--to gct`` exits 0 only when the result lints with zero violations,
and 1 otherwise, naming each interface left and why (the directory is written only with
``--partial``). ``--to identity`` regenerates the model with no rule applied and exits 0 only when
the generated module computes what the original computes, bit for bit, in eval and training
mode (forward and gradients). 1 also when the model has no residual structure to rewrite; 2 when
it cannot be loaded or traced. ``unitcheck.json`` holds the lint before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ._common import UsageError, load, write_output


def _check_out_dir(out: str) -> None:
    """Refuse a directory whose files the rewrite would replace unless an earlier rewrite wrote
    them: a user's own model.py is never overwritten."""
    from ..rewrite.save import MANIFEST, OUTPUT_FILES

    if os.path.exists(out) and not os.path.isdir(out):
        raise UsageError(f"--out {out} exists and is not a directory")
    if not os.path.isdir(out):
        return
    clash = [f for f in OUTPUT_FILES if os.path.exists(os.path.join(out, f))]
    if not clash:
        return
    try:
        with open(os.path.join(out, MANIFEST), encoding="utf-8") as fh:
            data = json.load(fh)
        ours = isinstance(data, dict) and "format" in data
    except (OSError, ValueError):
        ours = False
    if not ours:
        raise UsageError(f"--out {out} holds {', '.join(clash)} that unitcheck rewrite did not write: "
                         "choose an empty or new directory")


def _lint_summary(report: Any) -> dict[str, Any]:
    """What a lint found, for unitcheck.json: the count, per rule, and each violation."""
    by_rule: dict[str, int] = {}
    for v in report.violations:
        by_rule[v.rule] = by_rule.get(v.rule, 0) + 1
    return {"violations": len(report.violations), "by_rule": dict(sorted(by_rule.items())),
            "list": [{"rule": v.rule, "module": v.module or "<root>", "op": v.op, "message": v.message}
                     for v in report.violations]}


def _non_finite(original: Any, rewritten: Any, example_inputs: Any) -> list[str]:
    """A rewrite that lints clean but computes NaN or inf where the original computes finite
    values (the GCT rewrite of Llama 4) is not complete."""
    import torch
    from torch.utils import _pytree as pytree

    from ..tracer import normalise_inputs

    args, kwargs = normalise_inputs(example_inputs)

    def finite(model: Any) -> bool:
        was = model.training
        model.eval()
        try:
            with torch.no_grad():
                outs = pytree.tree_leaves(model(*args, **kwargs))
        finally:
            model.train(was)
        return all(bool(torch.isfinite(o).all()) for o in outs if isinstance(o, torch.Tensor) and o.is_floating_point())

    if finite(original) and not finite(rewritten):
        return ["the rewritten model computes NaN or inf on the example inputs, where the original does not"]
    return []


def _left(result: Any, after: dict[str, Any]) -> list[str]:
    """Each thing the rewrite left, with why: rules that skipped an interface, violations that
    remain in the result."""
    out = [f"{u['module']}: {u['reason']}" for u in result.gct.unhandled]
    g = result.gct
    if result.to == "gct" and g.residuals_rewritten < g.residuals:
        out.append(f"{g.residuals - g.residuals_rewritten} of {g.residuals} residual adds not rewritten")
    out += [f"{v['rule']} {v['module']} ({v['op']}): {v['message']}" for v in after["list"]]
    return out


def run(args: argparse.Namespace) -> int:
    from ..linter import lint
    from ..rewrite.api import RewriteError, rewrite, write_rewrite
    from ..rewrite.equal import compiled_note

    _check_out_dir(args.out)
    loaded = load(args, real=True)  # the rewrite keeps the model's weights
    before = _lint_summary(lint(loaded.model, loaded.inputs, name=args.model))
    try:
        result = rewrite(loaded.model, loaded.inputs, nvfp4=args.nvfp4, source_name=args.model, to=args.to)
    except RewriteError as err:
        print(f"unitcheck: nothing to rewrite: {err}", file=sys.stderr)
        return 1
    after = _lint_summary(lint(result.module, loaded.inputs, name=f"{args.model} ({args.to})"))
    if args.to == "identity":
        from ..rewrite.equal import check_fits_in_memory, differences

        check_fits_in_memory(result.gct.traced.graph)
        differs = [d for training in (False, True)
                   for d in differences(loaded.model, result.module, loaded.inputs, training)]
        left = differs
        complete = not differs
    else:
        differs = []
        left = _left(result, after) + _non_finite(loaded.model, result.module, loaded.inputs)
        complete = result.complete and not left
    extra = {"lint": {"before": before, "after": after}, "complete": complete, "left": left}
    written: list[str] = []
    if complete or args.partial:
        written = write_rewrite(result, args.out, args.model, loaded.inputs, extra)
    g = result.gct
    if args.format == "json":
        data = {"model": args.model, "to": args.to, "complete": complete, "out": args.out if written else None,
                "violations_before": before["violations"], "violations_after": after["violations"],
                "left": left, "seconds": round(result.seconds, 3), **result.report()}
        write_output(json.dumps(data, indent=2) + "\n", args.output)
    else:
        target = "identity (no rule applied)" if args.to == "identity" else "GCT"
        head = f"{args.model} -> {target}{' + NVFP4 (' + args.nvfp4 + ')' if args.nvfp4 else ''}: "
        if args.to == "gct":
            head += f"{g.residuals_rewritten}/{g.residuals} residual adds rewritten in {result.seconds:.2f} s"
        else:
            head += f"regenerated in {result.seconds:.2f} s"
        lines = [head, *[f"  {entry}" for entry in g.log]]
        lines += [f"  note: {n}" for n in result.notes]
        if result.nvfp4 is not None:
            lines.append(f"  NVFP4: {len(result.nvfp4.replaced)} GEMMs replaced; kept: "
                         + (", ".join(f"{k['name']} ({k['reason']})" for k in result.nvfp4.kept) or "none"))
        if g.dropped:
            lines.append(f"  dropped (normaliser gains and unused buffers): {', '.join(g.dropped)}")
        lines.append(f"  lint: {before['violations']} violation(s) before, {after['violations']} after")
        if args.to == "identity":
            run = " run eagerly" if compiled_note(loaded.model) else ""  # its compiled parts (the note says)
            lines.append(f"  complete: equal to the original{run} bit for bit (eval and train: outputs, gradients, "
                         "buffers)" if complete else "  INCOMPLETE: the generated module differs from the original:")
        elif complete:
            lines.append("  complete: every residual add and interface rewritten, zero violations left")
        else:
            lines.append(f"  INCOMPLETE: {len(left)} thing(s) left:")
        lines += [f"    {x}" for x in left]
        if written:
            lines.append(f"wrote {', '.join(written)} to {args.out}")
        else:
            lines.append("nothing written: pass --partial to keep an incomplete rewrite")
        write_output("\n".join(lines) + "\n", args.output)
    return 0 if complete else 1
