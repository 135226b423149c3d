"""One base class for every failure a user can cause, carrying the command line's exit code.

The CLI prints ``unitcheck: <message>`` and exits with ``exit_code`` for a :class:`UnitcheckError`
(2 unless a subclass says otherwise); anything else is a bug in unitcheck (exit 3).
"""

from __future__ import annotations

__all__ = ["UnitcheckError", "UsageError", "MissingDependency", "fails_on_example", "one_line"]


class UnitcheckError(Exception):
    """A problem with what the user gave (a model, a file, a flag): one line, no traceback."""

    exit_code: int = 2


class UsageError(UnitcheckError, ValueError):
    """A one-line problem with the command line or its inputs: exit code 2."""


class MissingDependency(UnitcheckError, ImportError):
    """An optional extra (matplotlib, transformers, safetensors) that a command needs."""


def one_line(err: BaseException) -> str:
    """``Type: first line of the message``: an exception as a one-line reason."""
    return f"{type(err).__name__}: {(str(err).splitlines() or [''])[0]}"


def fails_on_example(err: BaseException, mode: str) -> UsageError:
    """The one-line error for a model that fails on its own example inputs when run for real (a
    check a capture on meta or fake tensors deferred, or a branch it stopped at first)."""
    return UsageError(f"the model fails on its own example inputs in {mode} mode: {one_line(err)}")
