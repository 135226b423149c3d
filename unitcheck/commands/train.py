"""``unitcheck train``: exit 0 when the run completes (or had already finished), 1 when it stops
on a non-finite loss."""

from __future__ import annotations

import argparse
import math
import sys


def run(args: argparse.Namespace) -> int:
    from ..train.config import from_args
    from ..train.loop import NonFiniteLoss, train

    cfg = from_args(args)
    try:
        result = train(cfg)
    except NonFiniteLoss as err:
        print(f"unitcheck: {err}", file=sys.stderr)
        return 1
    if result.stopped == "already finished":
        losses = ", ".join(f"{name} {value:.4f}" for name, value in
                           (("final train loss", result.final_train_loss), ("final val loss", result.final_val_loss))
                           if math.isfinite(value))
        beyond = "" if cfg.steps == result.steps else f" (--steps {cfg.steps} is not beyond it)"
        print(f"{cfg.model}: the run in {result.out_dir} already finished at step {result.steps}{beyond}"
              f"{': ' + losses if losses else ''}; nothing to do: pass --steps above {result.steps} "
              "with --resume to extend it")
        return 0
    print(f"{cfg.model}: {result.steps} steps, final train loss {result.final_train_loss:.4f}, "
          f"final val loss {result.final_val_loss:.4f}, {result.step_seconds * 1e3:.0f} ms/step "
          f"({result.stopped}); run in {result.out_dir}")
    return 0
