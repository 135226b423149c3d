"""unitcheck: static unit checking for PyTorch models (neural dimensional analysis).

>>> import unitcheck                                               # doctest: +SKIP
>>> report = unitcheck.lint(model, (idx, targets))                 # doctest: +SKIP
>>> [v.rule for v in report.violations]                            # doctest: +SKIP
['UC101', 'UC201', 'UC202', 'UC102', 'UC102', 'UC301']

Heavy modules (torch) are imported on first use, so ``unitcheck --help`` starts fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "Unit",
    "declare",
    "infer_units",
    "lint",
    "rule",
    "method",
    "trace",
    "TraceError",
    "UnitGraph",
    "Report",
    "oracle",
    "load_model",
    "load",
    "rewrite_gct",
    "__version__",
]

_LAZY = {
    "Unit": ("unitcheck.units", "Unit"),
    "declare": ("unitcheck.declarations", "declare"),
    "infer_units": ("unitcheck.infer", "infer_units"),
    "UnitGraph": ("unitcheck.unitgraph", "UnitGraph"),
    "lint": ("unitcheck.linter", "lint"),
    "Report": ("unitcheck.linter", "Report"),
    "rule": ("unitcheck.registry", "rule"),
    "method": ("unitcheck.registry", "method"),
    "trace": ("unitcheck.tracer", "trace"),
    "TraceError": ("unitcheck.tracer", "TraceError"),
    "load_model": ("unitcheck.loader", "load_model"),
    "load": ("unitcheck.rewrite.save", "load"),
    "rewrite_gct": ("unitcheck.rewrite.api", "rewrite_gct"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        mod, attr = _LAZY[name]
        value = getattr(importlib.import_module(mod), attr)
        globals()[name] = value
        return value
    if name in ("oracle",):
        return importlib.import_module(f"unitcheck.{name}")
    raise AttributeError(f"module 'unitcheck' has no attribute {name!r}")


if TYPE_CHECKING:  # pragma: no cover
    from . import oracle  # noqa: F401
    from .declarations import declare  # noqa: F401
    from .infer import infer_units  # noqa: F401
    from .linter import Report, lint  # noqa: F401
    from .loader import load_model  # noqa: F401
    from .registry import method, rule  # noqa: F401
    from .rewrite.api import rewrite_gct  # noqa: F401
    from .rewrite.save import load  # noqa: F401
    from .tracer import TraceError, trace  # noqa: F401
    from .unitgraph import UnitGraph  # noqa: F401
    from .units import Unit  # noqa: F401
