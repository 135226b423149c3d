"""``unitcheck train``: exit 0 when the run completes, 1 when it stops on a non-finite loss."""

from __future__ import annotations

import argparse
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
    print(f"{cfg.model}: {result.steps} steps, final train loss {result.final_train_loss:.4f}, "
          f"final val loss {result.final_val_loss:.4f}, {result.step_seconds * 1e3:.0f} ms/step "
          f"({result.stopped}); run in {result.out_dir}")
    return 0
