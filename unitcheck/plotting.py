"""The one place that imports matplotlib (lazily, headless) and writes figures atomically."""

from __future__ import annotations

from typing import Any

from .errors import MissingDependency
from .fsutil import atomic_path

__all__ = ["pyplot", "save_figure"]


def pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise MissingDependency("plots need matplotlib: pip install 'unitcheck[plot]'") from err
    return plt


def save_figure(fig: Any, path: str, dpi: int = 120) -> str:
    """Lay out, write as PNG through a temporary file, and free the figure."""
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format="png")
    pyplot().close(fig)
    return path
