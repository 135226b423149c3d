"""Atomic writes: nothing a user wrote (reports, baselines, checkpoints) is left half-written."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import IO, Any

__all__ = ["atomic_write_text", "atomic_write", "atomic_path"]


def _mode_for(path: str) -> int:
    """The replaced file's permissions, or those a plain ``open(path, "w")`` would create."""
    try:
        return os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _user_path_error(err: OSError, tmp: str | None, path: str) -> OSError:
    """The same error naming the user's ``path`` instead of the temporary file beside it."""
    if tmp is not None and err.filename not in (tmp, None):
        return err
    named = type(err)(err.errno, err.strerror or str(err), path)
    named.__traceback__ = err.__traceback__
    return named


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[str]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` (os.replace).
    A failure of the temporary file itself is reported against ``path``."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path)) or "."
    os.makedirs(directory, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    except OSError as err:
        raise _user_path_error(err, None, path) from None
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, _mode_for(path))  # mkstemp makes 0600; the user expects what open() gives
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise _user_path_error(err, tmp, path) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write(path: str | os.PathLike[str], writer: Callable[[IO[Any]], object], binary: bool = False) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb" if binary else "w") as fh:
        writer(fh)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write(path, lambda fh: fh.write(text))
