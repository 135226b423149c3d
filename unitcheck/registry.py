"""Operator -> unit rule registry.

A rule is registered for explicit targets: ATen overloads (``torch.ops.aten.add.Tensor``) or
overload packets (``torch.ops.aten.add``, covering every overload) from ``torch.export``, and
Python callables (``operator.add``, ``torch.add``, ``F.gelu``) or :func:`method` names from
symbolic tracing. Registering a target twice is an error unless ``replace=True``: a user adding a
rule for their own op never silently shadows a built-in one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .infer import RuleContext
    from .values import UnitValue

__all__ = ["rule", "method", "lookup", "RuleFn", "registered_targets", "MethodTarget"]

RuleFn = Callable[["RuleContext"], "UnitValue"]


@dataclass(frozen=True)
class MethodTarget:
    """A ``call_method`` target from symbolic tracing, e.g. ``method("view")``."""

    name: str

    def __str__(self) -> str:
        return f"Tensor.{self.name}"


def method(*names: str) -> tuple[MethodTarget, ...]:
    return tuple(MethodTarget(n) for n in names)


_RULES: dict[Any, RuleFn] = {}
_loaded = False


def _key(target: Any) -> Any:
    return target


def rule(*targets: Any, replace: bool = False) -> Callable[[RuleFn], RuleFn]:
    """Register ``fn`` as the unit rule for each of ``targets``."""
    flat: list[Any] = []
    for t in targets:
        if isinstance(t, tuple):
            flat.extend(t)
        else:
            flat.append(t)
    if not flat:
        raise ValueError("a rule needs at least one explicit operator target")

    def deco(fn: RuleFn) -> RuleFn:
        for t in flat:
            if t is None:
                continue
            k = _key(t)
            if k in _RULES and not replace and _RULES[k] is not fn:
                raise ValueError(
                    f"operator {t} already has the rule {_RULES[k].__module__}.{_RULES[k].__name__}; "
                    "pass replace=True to override it"
                )
            _RULES[k] = fn
        return fn

    return deco


def _ensure_loaded() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        from . import rules  # noqa: F401  (registers the built-in rule modules)


def lookup(target: Any) -> RuleFn | None:
    _ensure_loaded()
    fn = _RULES.get(target)
    if fn is None:
        packet = getattr(target, "overloadpacket", None)
        if packet is not None:
            fn = _RULES.get(packet)
    return fn


def registered_targets() -> list[Any]:
    _ensure_loaded()
    return list(_RULES)
