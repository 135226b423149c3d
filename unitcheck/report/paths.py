"""Repository-relative paths for machine reports (SARIF, GitHub annotations)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

__all__ = ["repo_root", "repo_relative"]


def repo_root(start: str | None = None) -> str:
    """The git top level above ``start`` (or the cwd); the cwd when not in a repository."""
    cwd = start or os.getcwd()
    try:
        out = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=cwd, capture_output=True,
                             text=True, timeout=5, check=False)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return cwd


def repo_relative(path: str, root: str) -> str | None:
    """POSIX path relative to ``root``, or None when ``path`` lies outside it."""
    try:
        rel = Path(os.path.realpath(path)).relative_to(os.path.realpath(root))
    except ValueError:
        return None
    return rel.as_posix()
