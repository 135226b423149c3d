"""What every subcommand shares: resolving MODEL, writing output, the usage error."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import UsageError

__all__ = ["UsageError", "load", "write_output"]


def write_output(text: str, path: str | None) -> None:
    """Write atomically: a temporary file in the same directory, then rename."""
    if path is None or path == "-":
        sys.stdout.write(text)
        return
    from ..fsutil import atomic_write_text

    atomic_write_text(path, text)


def load(args: argparse.Namespace, real: bool = False) -> Any:
    """Resolve MODEL; static commands build on the meta device unless asked otherwise."""
    from ..loader import load_model, parse_sets

    device = args.device or ("cpu" if real else "meta")
    if real and device == "meta":
        what = "--verify" if getattr(args, "verify", False) else args.command
        raise UsageError(f"{what} runs the model on real values: drop --device meta")
    return load_model(args.model, parse_sets(args.set), args.input or None, device=device)
