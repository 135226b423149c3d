"""``unitcheck lint MODEL``."""

from __future__ import annotations

import argparse
import os
import sys

from ._common import load, write_output


def run(args: argparse.Namespace) -> int:
    from ..config import load_config
    from ..infer import DEFAULT_FLOOR_EPS
    from ..linter import lint
    from ..report import render

    cfg = load_config(args.config)
    loaded = load(args)
    select = args.select.split(",") if args.select else cfg.select
    ignore = (args.ignore.split(",") if args.ignore else []) + cfg.ignore
    report = lint(
        loaded.model, loaded.inputs, name=loaded.name, select=select, ignore=ignore,
        per_module_ignores=cfg.per_module_ignores, declare=cfg.declare or None,
        floor_eps=cfg.floor_eps if cfg.floor_eps is not None else DEFAULT_FLOOR_EPS,
        method=args.tracer,
    )
    fixed: list = []
    if args.baseline:
        from ..baseline import apply_baseline

        report, fixed = apply_baseline(report, args.baseline)
    if args.write_baseline:
        from ..baseline import write_baseline

        write_baseline(report, args.write_baseline)
    text = render(report, args.format, verbose=getattr(args, "verbose", False), fixed=fixed,
                  group=getattr(args, "group", True))
    if args.format == "text" and args.output in (None, "-") and sys.stdout.isatty() and "NO_COLOR" not in os.environ:
        from ..report.text import print_colour

        print_colour(text)
    else:
        write_output(text, args.output)
    fail_on = args.fail_on or cfg.fail_on
    return 1 if report.count_at_least(fail_on) else 0
