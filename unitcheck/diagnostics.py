"""Violation and note records (SPEC 4): what every report format is rendered from."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from .codes import CODES
from .units import Unit

__all__ = ["Location", "Violation"]


@dataclass(frozen=True)
class Location:
    file: str
    line: int
    code: str = ""  # the source line's text, as the tracer recorded it

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line}


@dataclass
class Violation:
    """One scale-inconsistent interface (or a note), with both operands' units and the fix."""

    rule: str
    message: str
    node: str
    op: str
    module: str
    units: dict[str, Unit]
    fix: str
    location: Location | None = None
    suppressed: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def severity(self) -> str:
        return CODES[self.rule].severity

    @property
    def fingerprint(self) -> str:
        """Stable across traces: rule, module path and op; not node numbers."""
        key = f"{self.rule}|{self.module}|{self.op}|{self.extra.get('role', '')}"
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rule": self.rule,
            "severity": self.severity,
            "message": self.message,
            "node": self.node,
            "op": self.op,
            "module": self.module,
            "units": {k: str(u) for k, u in self.units.items()},
            "fix": self.fix,
            "fingerprint": self.fingerprint,
        }
        if self.location is not None:
            out["location"] = self.location.to_json()
        if self.suppressed:
            out["suppressed"] = True
        return out
