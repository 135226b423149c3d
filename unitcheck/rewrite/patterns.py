"""Pattern/replacement machinery shared by the graph rewrites.

A rewrite is a list of rules; each rule is a named function ``rule(ctx) -> None`` that finds its
pattern in ``ctx.graph`` and replaces it, logging ``before -> after`` through ``ctx.log``. Rules
compose by running in order on one :class:`RewriteContext` (like tinygrad's matchers composed
with ``+``, with named callbacks instead of lambdas).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch import nn

from ..fxutil import IDENTITY_OPS, base_name, module_path
from ..unitgraph import UnitGraph

__all__ = ["RewriteContext", "Rule", "NewParam", "through_casts", "set_attr"]



@dataclass
class NewParam:
    name: str  # qualified name on the rewritten module
    value: torch.Tensor
    unit: str = "1"
    why: str = ""


@dataclass
class RewriteContext:
    """The graph being rewritten, its unit graph, and what the rules did."""

    ug: UnitGraph
    new_params: dict[str, NewParam] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    unhandled: list[dict[str, str]] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def graph(self) -> fx.Graph:
        return self.ug.graph

    def note(self, rule: str, before: str, after: str) -> None:
        self.log.append(f"[{rule}] {before} -> {after}")

    def skip(self, module: str, reason: str) -> None:
        self.unhandled.append({"module": module or "<root>", "reason": reason})

    def param(self, name: str, value: torch.Tensor, why: str) -> fx.Node:
        """A new dimensionless learnable parameter, referenced by a get_attr node."""
        if name in self.new_params:
            raise ValueError(f"parameter {name} created twice")
        self.new_params[name] = NewParam(name, value, "1", why)
        set_attr(self.ug.traced.gm, name, nn.Parameter(value.clone()))
        first = next(n for n in self.graph.nodes if n.op != "placeholder")
        with self.graph.inserting_before(first):
            node = self.graph.create_node("get_attr", name)  # resolved on the generated module
        node.meta["val"] = value
        return node

    def call(self, target: Callable[..., Any] | Any, args: tuple[Any, ...], after: fx.Node,
             like: fx.Node | None = None, kwargs: dict[str, Any] | None = None) -> fx.Node:
        """Insert ``target(*args)`` right after ``after``; copies module/stack metadata."""
        with self.graph.inserting_after(after):
            node = self.graph.call_function(target, args, kwargs or {})
        src = like if like is not None else after
        for key in ("nn_module_stack", "stack_trace"):
            if key in src.meta:
                node.meta[key] = src.meta[key]
        return node

Rule = Callable[[RewriteContext], None]


def set_attr(root: nn.Module, qualified: str, value: torch.Tensor) -> None:
    """Register a parameter/buffer under a dotted name, creating empty containers on the way."""
    *path, leaf = qualified.split(".")
    mod = root
    for part in path:
        child = getattr(mod, part, None)
        if not isinstance(child, nn.Module):
            child = nn.Module()
            mod.add_module(part, child)
        mod = child
    if isinstance(value, nn.Parameter):
        mod.register_parameter(leaf, value)
    else:
        mod.register_buffer(leaf, value)


def through_casts(node: fx.Node) -> fx.Node:
    """The value a chain of casts/copies/asserts forwards (first argument)."""
    while base_name(node) in IDENTITY_OPS and node.args and isinstance(node.args[0], fx.Node):
        node = node.args[0]
    return node


def users_through_casts(node: fx.Node) -> Iterable[fx.Node]:
    for u in list(node.users):
        if base_name(u) in IDENTITY_OPS and u.args and u.args[0] is node:
            yield from users_through_casts(u)
        else:
            yield u


def describe(node: fx.Node) -> str:
    return f"{base_name(node)}@{module_path(node) or '<root>'}"
