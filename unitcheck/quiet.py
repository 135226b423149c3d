"""Silencing libraries for the length of a block: torch, transformers and friends log warnings
and dumps about their own internals, which are noise next to unitcheck's one-line messages."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterable, Iterator

__all__ = ["quiet_loggers"]


@contextlib.contextmanager
def quiet_loggers(names: Iterable[str], level: int = logging.CRITICAL) -> Iterator[None]:
    """Raise the named loggers to ``level`` and ignore Python warnings; restore both on exit."""
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(level)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, lv in zip(loggers, levels):
            lg.setLevel(lv)
