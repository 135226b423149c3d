"""Operator -> unit rule registry.

A rule is registered for explicit targets: ATen overloads (``torch.ops.aten.add.Tensor``) or
overload packets (``torch.ops.aten.add``, covering every overload) from ``torch.export``, Python
callables (``operator.add``, ``torch.add``, ``F.gelu``) or :func:`method` names from symbolic
tracing, and custom ops by their qualified name (``"unitcheck::nvfp4_linear"``), which lets a rule
exist before the library that defines the op is imported. Registering a target twice is an error
unless ``replace=True``: a user adding a rule for their own op never silently shadows a built-in
one. The built-in rules register when ``unitcheck.rules`` is imported (the inference pass does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

from .rulectx import RuleContext
from .values import UnitValue

__all__ = ["rule", "method", "lookup", "rule_for", "RuleFn", "MethodTarget"]

RuleFn = Callable[[RuleContext], UnitValue]


@dataclass(frozen=True)
class MethodTarget:
    """A ``call_method`` target from symbolic tracing, e.g. ``method("view")``."""

    name: str

    def __str__(self) -> str:
        return f"Tensor.{self.name}"


def method(*names: str) -> tuple[MethodTarget, ...]:
    return tuple(MethodTarget(n) for n in names)


_RULES: dict[Any, RuleFn] = {}


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
            if t in _RULES and not replace and _RULES[t] is not fn:
                raise ValueError(
                    f"operator {t} already has the rule {_RULES[t].__module__}.{_RULES[t].__name__}; "
                    "pass replace=True to override it"
                )
            _RULES[t] = fn
        return fn

    return deco


def lookup(target: Any) -> RuleFn | None:
    """The rule for a target: the overload, else its packet, else its qualified op name."""
    fn = _RULES.get(target)
    if fn is None and isinstance(target, torch._ops.OpOverload):
        fn = _RULES.get(target.overloadpacket) or _RULES.get(target._schema.name)
    return fn


def rule_for(node: fx.Node, root: torch.nn.Module) -> RuleFn | None:
    """The rule for a call node of a graph module ``root``: one place that turns a method call
    into its :class:`MethodTarget` and a module call into its class (inference and
    ``unitcheck units --node`` must agree on it)."""
    target: Any = node.target
    if node.op == "call_method":
        target = MethodTarget(str(node.target))
    elif node.op == "call_module":
        target = type(root.get_submodule(str(node.target)))
    return lookup(target)
