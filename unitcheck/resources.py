"""Memory: a budget checked before large allocations, and out-of-memory errors recognised.

A size the machine cannot hold (``--set hidden_size=1000000000``, ``--input float32[1e11,4]``,
``--seq-len 100000000``) is a user error (exit 2), reported before anything is allocated where the
size is known, and caught where it is not: an allocation that the OS grants lazily and then cannot
back would get the process killed instead of a message.
"""

from __future__ import annotations

import os
import re
from typing import Any

from .errors import UnitcheckError

__all__ = ["ResourceError", "memory_budget", "check_fits", "is_out_of_memory", "human_bytes",
           "module_bytes", "BUDGET_ENV"]

BUDGET_ENV = "UNITCHECK_MEMORY_BUDGET"
"""Override of the memory budget in bytes (suffixes K, M, G, T), e.g. for a shared machine."""


class ResourceError(UnitcheckError, MemoryError):
    """A size that does not fit in memory: exit 2 with the input to shrink."""


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1024 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PB"  # pragma: no cover


def _parse_size(text: str) -> int | None:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", text, re.I)
    if m is None:
        return None
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m[2].upper()]
    return int(float(m[1]) * scale)


def memory_budget() -> int:
    """Bytes a command may allocate: ``$UNITCHECK_MEMORY_BUDGET``, else the memory the OS reports
    as available (Linux ``MemAvailable``), else the physical memory."""
    env = os.environ.get(BUDGET_ENV)
    if env:
        size = _parse_size(env)
        if size is None:
            raise UnitcheckError(f"{BUDGET_ENV}={env!r} is not a size: use bytes or a number with K, M, G or T")
        return size
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, AttributeError):  # pragma: no cover - not POSIX
        return 1 << 62


def check_fits(nbytes: int, what: str, fix: str) -> None:
    """Raise ResourceError when ``nbytes`` exceed the budget; ``what`` names the input, ``fix`` says
    what to change."""
    budget = memory_budget()
    if nbytes > budget:
        raise ResourceError(f"{what}: {human_bytes(nbytes)} of memory needed, {human_bytes(budget)} "
                            f"available: {fix}")


def module_bytes(module: Any) -> int:
    """Bytes of a module's parameters and buffers (each tensor once), measured on any device,
    including ``meta``, where nothing is allocated."""
    seen: set[int] = set()
    total = 0
    for t in [*module.parameters(), *module.buffers()]:
        if id(t) in seen:
            continue
        seen.add(id(t))
        total += t.numel() * t.element_size()
    return total


_OOM = re.compile(r"out of memory|can't allocate memory|not enough memory|cannot allocate memory"
                  r"|numel.*overflow|storage size calculation overflowed|bad_alloc", re.I)


def is_out_of_memory(err: BaseException) -> bool:
    """True for MemoryError, torch's OutOfMemoryError and the allocator's RuntimeErrors."""
    if isinstance(err, MemoryError):
        return True
    if type(err).__name__ == "OutOfMemoryError":
        return True
    return isinstance(err, RuntimeError) and bool(_OOM.search(str(err)))
