"""``unitcheck rewrite MODEL --to gct [--nvfp4 te|ngpt] --out DIR``.

Exit 0 when every residual branch and interface was rewritten; 1 when something was left
untouched (the directory is written only with ``--partial``) or the model has no residual
structure; 2 when the model cannot be loaded or traced.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

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


def run(args: argparse.Namespace) -> int:
    from ..linter import lint
    from ..rewrite.api import RewriteError, rewrite, write_rewrite

    _check_out_dir(args.out)
    loaded = load(args, real=True)  # the rewrite keeps the model's weights
    try:
        result = rewrite(loaded.model, loaded.inputs, nvfp4=args.nvfp4, source_name=args.model)
    except RewriteError as err:
        print(f"unitcheck: nothing to rewrite: {err}", file=sys.stderr)
        return 1
    g = result.gct
    after = lint(result.module, loaded.inputs, name=f"{args.model} (gct)")
    complete = g.complete and not g.unhandled
    written: list[str] = []
    if complete or args.partial:
        written = write_rewrite(result, args.out, args.model, loaded.inputs)
    if args.format == "json":
        data = {"model": args.model, "complete": complete, "out": args.out if written else None,
                "violations_after": len(after.violations), "seconds": round(result.seconds, 3),
                **result.report()}
        write_output(json.dumps(data, indent=2) + "\n", args.output)
    else:
        lines = [f"{args.model} -> GCT{' + NVFP4 (' + args.nvfp4 + ')' if args.nvfp4 else ''}: "
                 f"{g.residuals_rewritten}/{g.residuals} residual adds rewritten in {result.seconds:.2f} s"]
        lines += [f"  {entry}" for entry in g.log]
        if result.nvfp4 is not None:
            lines.append(f"  NVFP4: {len(result.nvfp4.replaced)} GEMMs replaced; kept: "
                         + (", ".join(f"{k['name']} ({k['reason']})" for k in result.nvfp4.kept) or "none"))
        if g.dropped:
            lines.append(f"  dropped (normaliser gains and unused buffers): {', '.join(g.dropped)}")
        for u in g.unhandled:
            lines.append(f"  NOT REWRITTEN {u['module']}: {u['reason']}")
        lines.append(f"  lint of the result: {len(after.violations)} violation(s)")
        if written:
            lines.append(f"wrote {', '.join(written)} to {args.out}")
        else:
            lines.append("nothing written: pass --partial to keep an incomplete rewrite")
        write_output("\n".join(lines) + "\n", args.output)
    return 0 if complete else 1
