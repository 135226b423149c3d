"""What the oracle reports: counts, disagreements and fingerprint rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import UnitcheckError

__all__ = ["OracleError", "Disagreement", "FingerprintRow", "OracleResult"]


class OracleError(UnitcheckError, RuntimeError):
    """The oracle needs real values (it cannot run on meta tensors) or a runnable model."""


@dataclass
class Disagreement:
    mode: str  # "local", "global", "grad", "violation"
    node: str
    op: str
    unit: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.mode}] {self.node} ({self.op}) unit {self.unit}: {self.detail}"


@dataclass
class FingerprintRow:
    generator: str
    leaves: list[str]
    predicted_gauge: bool
    measured: float  # |D_g L| / sum_W |u_g(W)| ||W|| ||grad_W L||, floors carried
    weights_only: float  # the same with sum_W u_g(W) <W, grad_W L> (no floors), as in the paper
    threshold: float  # 1e-11 plus the measurement's own rounding, in the same ratio
    rate: float = 0.0  # D_g L itself
    methods: dict[str, float] = field(default_factory=dict)  # backprop, floors, jvp, finite_difference
    methods_agree: bool = True

    @property
    def measured_gauge(self) -> bool:
        return self.measured < self.threshold

    @property
    def match(self) -> bool:
        return self.predicted_gauge == self.measured_gauge

    def to_json(self) -> dict[str, Any]:
        return {
            "generator": self.generator,
            "leaves": self.leaves,
            "predicted_gauge": self.predicted_gauge,
            "measured": self.measured,
            "weights_only": self.weights_only,
            "threshold": self.threshold,
            "measured_gauge": self.measured_gauge,
            "match": self.match,
            "rate": self.rate,
            "methods": self.methods,
            "methods_agree": self.methods_agree,
        }


@dataclass
class OracleResult:
    checked: int = 0
    agreed: int = 0
    violations: int = 0
    confirmed: int = 0
    global_checked: int = 0
    global_agreed: int = 0
    grad_checked: int = 0
    grad_agreed: int = 0
    float_nodes: int = 0
    unchecked: list[str] = field(default_factory=list)
    unexercised: list[str] = field(default_factory=list)  # violations on tensors the example leaves empty
    notes: list[str] = field(default_factory=list)  # checks a mode could not run, and why
    raised_casts: list[str] = field(default_factory=list)  # casts to a lower precision kept at float64
    disagreements: list[Disagreement] = field(default_factory=list)
    fingerprint: list[FingerprintRow] | None = None

    @property
    def ok(self) -> bool:
        fp_ok = self.fingerprint is None or all(r.match for r in self.fingerprint)
        return (
            not self.disagreements
            and self.checked == self.agreed
            and self.violations == self.confirmed
            and self.global_checked == self.global_agreed
            and self.grad_checked == self.grad_agreed
            and fp_ok
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "checked": self.checked,
            "agreed": self.agreed,
            "disagreements": [str(d) for d in self.disagreements],
            "violations": self.violations,
            "confirmed": self.confirmed,
            "float_nodes": self.float_nodes,
            "unchecked": self.unchecked,
            "unexercised": self.unexercised,
            "notes": self.notes,
            "raised_casts": self.raised_casts,
            "global": {"checked": self.global_checked, "agreed": self.global_agreed},
            "gradients": {"checked": self.grad_checked, "agreed": self.grad_agreed},
        }
        if self.fingerprint is not None:
            out["fingerprint"] = {
                "generators": len(self.fingerprint),
                "matches": sum(r.match for r in self.fingerprint),
                "rows": [r.to_json() for r in self.fingerprint],
            }
        return out
