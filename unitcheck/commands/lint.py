"""``unitcheck lint MODEL``."""

from __future__ import annotations

import argparse
import os
import sys

from ._common import UsageError, load, write_output


def _code_list(text: str | None, flag: str) -> list[str] | None:
    """``--select UC1,UC201`` -> codes; a value that names no code is refused, not read as
    "select nothing" (which would silence every finding)."""
    if text is None:
        return None
    codes = [c.strip() for c in text.split(",") if c.strip()]
    if not codes:
        raise UsageError(f"{flag} {text!r} names no rule code: give codes such as UC201,UC3 or drop the flag")
    return codes


def _baseline_target(args: argparse.Namespace) -> str | None:
    """Where to write a baseline. Replacing the file ``--baseline`` reads needs
    ``--update-baseline`` (written without it, the file would hold only the new violations);
    replacing a file that is not a baseline is refused."""
    update = getattr(args, "update_baseline", False)
    target = args.write_baseline or (args.baseline if update else None)
    if update and not args.baseline:
        raise UsageError("--update-baseline rewrites the --baseline file: pass --baseline FILE")
    if target is None:
        return None
    same = bool(args.baseline) and os.path.exists(target) and os.path.exists(args.baseline) \
        and os.path.samefile(target, args.baseline)
    if same and not update:
        raise UsageError(f"--write-baseline {target} is the --baseline file: pass --update-baseline to "
                         "replace it with the current violations, or write to another file")
    if os.path.exists(target) and not same:
        from ..baseline import BaselineError, read_baseline

        try:
            read_baseline(target)
        except BaselineError:
            raise UsageError(f"--write-baseline {target} exists and is not a unitcheck baseline: "
                             "choose another path or remove the file") from None
    return target


def run(args: argparse.Namespace) -> int:
    from ..config import load_config
    from ..infer import DEFAULT_FLOOR_EPS
    from ..linter import lint
    from ..report import render

    cfg = load_config(args.config)
    select = _code_list(args.select, "--select")
    ignore = _code_list(args.ignore, "--ignore")
    baseline_out = _baseline_target(args)
    if args.baseline:
        from ..baseline import read_baseline

        read_baseline(args.baseline)  # a bad baseline fails before the model is traced
    loaded = load(args)
    report = lint(
        loaded.model, loaded.inputs, name=loaded.name, select=select or cfg.select,
        ignore=(ignore or []) + cfg.ignore,
        per_module_ignores=cfg.per_module_ignores, declare=cfg.declare or None,
        floor_eps=cfg.floor_eps if cfg.floor_eps is not None else DEFAULT_FLOOR_EPS,
        method=args.tracer,
    )
    found = report
    fixed: list = []
    if args.baseline:
        from ..baseline import apply_baseline

        report, fixed = apply_baseline(report, args.baseline)
    if baseline_out:
        from ..baseline import write_baseline

        write_baseline(found, baseline_out)  # everything found, not only what the baseline lets through
    text = render(report, args.format, verbose=getattr(args, "verbose", False), fixed=fixed,
                  group=getattr(args, "group", True))
    if args.format == "text" and args.output in (None, "-") and sys.stdout.isatty() and "NO_COLOR" not in os.environ:
        from ..report.text import print_colour

        print_colour(text)
    else:
        write_output(text, args.output)
    fail_on = args.fail_on or cfg.fail_on
    return 1 if report.count_at_least(fail_on) else 0
