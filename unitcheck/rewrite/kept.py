"""GCT's local rules inside modules the capture kept whole.

A module whose forward branches on its data (the loop over the experts a batch hit in DBRX and in
most research MoE code) is one call in the captured graph (:mod:`unitcheck.opaque`), so the graph
rules cannot reach inside it. Its children can still be swapped: the lint of the generated module
sees inside, and each finding there whose cause is a child gets that child's rule as a module
(:mod:`unitcheck.canonical`):

- an activation module of a unitful input (UC202, UC204, UC103) -> ``CanonicalInput``: act(C(x));
- a softmax of a Linear's logits (UC203, a router) -> ``DimensionlessLinear``;
- a sum whose parts come from children with different units (UC101, experts added into a zero
  fill) -> each part's child canonicalised at its output (``CanonicalLinear`` for a Linear,
  ``CanonicalOutput`` otherwise).

A child of a ``ModuleList`` or ``ModuleDict`` gets the same swap in every sibling of its class: the
example reaches some experts, the next batch others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx, nn

from .. import opaque
from ..canonical import CanonicalInput, CanonicalLinear, CanonicalOutput, DimensionlessLinear
from ..fxutil import MOVEMENT_OPS, base_name, module_path
from ..unitgraph import UnitGraph
from .gct import ACTIVATION_CODES
from .patterns import NewParam, set_attr, through_moves

__all__ = ["KeptChanges", "kept_rules"]

_WRAPPERS = (CanonicalInput, CanonicalOutput, CanonicalLinear, DimensionlessLinear)
# what a part of a sum passes through on its way from a child's output: a routing weight's
# product, the index it is read or written at; not the router's top-k or softmax
_PART_OPS = MOVEMENT_OPS | {"mul", "div", "add", "sub", "neg", "index", "index_put", "index_put_", "index_add",
                            "index_add_", "scatter_add", "index_select", "getitem", "to", "type_as"}


@dataclass
class KeptChanges:
    log: list[str] = field(default_factory=list)
    gains: list[NewParam] = field(default_factory=list)  # new dimensionless parameters


def _kept_path(module: str, kept: list[str]) -> str | None:
    return next((k for k in kept if opaque.within(module, k)), None)


def _module(root: nn.Module, path: str) -> nn.Module | None:
    """The module at ``path``; None where a finding's path names none (an op of the module's own)."""
    try:
        return root.get_submodule(path)
    except AttributeError:
        return None


def _is_leaf_activation(m: nn.Module | None) -> bool:
    return m is not None and not m._modules and not m._parameters and not m._buffers


def _siblings(root: nn.Module, path: str) -> list[str]:
    """``path`` and the same position in each sibling of its nearest ModuleList/ModuleDict
    ancestor, where a module of the same class sits."""
    parts = path.split(".")
    cls = type(root.get_submodule(path))
    for i in range(len(parts) - 1, 0, -1):
        container = root.get_submodule(".".join(parts[:i]))
        if isinstance(container, (nn.ModuleList, nn.ModuleDict)):
            out = []
            for name in container._modules:
                other = ".".join([*parts[:i], name, *parts[i + 1:]])
                try:
                    if type(root.get_submodule(other)) is cls:
                        out.append(other)
                except AttributeError:
                    continue
            return out
    return [path]


def _recast(linear: nn.Linear, cls: type[nn.Linear]) -> nn.Linear:
    new = cls.__new__(cls)
    new.__dict__.update(linear.__dict__)
    new._parameters = dict(linear._parameters)  # its own: a parameter it adds is not the old one's
    return new


def _router(linear: nn.Linear) -> nn.Linear:
    """The Linear as ``DimensionlessLinear``, its gain a new parameter (init 1)."""
    new = _recast(linear, DimensionlessLinear)
    new.register_parameter("gain", nn.Parameter(torch.ones((), dtype=linear.weight.dtype)))
    return new


def _child_outputs(node: fx.Node, kept: str) -> list[str]:
    """The innermost modules inside ``kept`` whose outputs reach ``node`` through the ops a part of
    a sum passes (_PART_OPS) in ``kept``'s own code."""
    found: dict[str, None] = {}
    seen: set[fx.Node] = set()
    todo = [a for a in node.all_input_nodes]
    while todo and len(seen) < 256:
        n = todo.pop()
        if n in seen or n.op != "call_function":
            continue
        seen.add(n)
        where = module_path(n)
        if where.startswith(f"{kept}."):
            found[where] = None
        elif where == kept and base_name(n) in _PART_OPS:
            todo.extend(n.all_input_nodes)
    return list(found)


def _swap(root: nn.Module, path: str, make: Any, what: Any, changes: KeptChanges) -> None:
    """``make(child)`` in place of the child at ``path`` and its siblings; ``what`` says what the
    new child computes (a function of the old one, or a string)."""
    for p in _siblings(root, path):
        m = root.get_submodule(p)
        if isinstance(m, _WRAPPERS):
            continue
        had = dict(m.named_parameters())
        new = make(m)
        set_attr(root, p, new)
        changes.gains += [NewParam(f"{p}.{n}", v.detach(), "1", f"{type(new).__name__}'s gain, init 1")
                          for n, v in new.named_parameters() if n not in had]
        changes.log.append(f"[kept_module] {type(m).__name__}@{p} -> {what(m) if callable(what) else what}")


def kept_rules(root: nn.Module, kept: list[str], ug: UnitGraph) -> KeptChanges:
    """Swap the children of ``root``'s kept modules that cause the findings in ``ug`` (a lint of
    the module generated from ``root``). Sums are looked at only once no activation or router is
    left to swap: a dimensionless activation often makes the parts agree (DBRX's experts slice one
    weight)."""
    changes = KeptChanges()
    sums: list[tuple[fx.Node, str]] = []
    for v in ug.violations:
        k = _kept_path(v.module, kept)
        if k is None:
            continue
        node = ug.node(v.node)
        if v.rule in ACTIVATION_CODES and v.module != k and _is_leaf_activation(_module(root, v.module)):
            _swap(root, v.module, CanonicalInput, f"{base_name(node)}(C(a))", changes)
        elif v.rule == "UC203" and node.args:
            src = through_moves(node.args[0])
            path = module_path(src) if isinstance(src, fx.Node) else ""
            if path.startswith(f"{k}.") and type(_module(root, path)) is nn.Linear:
                _swap(root, path, _router, lambda m: f"gain * C(h) . C(W)^T / sqrt({m.in_features})", changes)
        elif v.rule == "UC101":
            sums.append((node, k))
    if changes.log:
        return changes
    for node, k in sums:
        for path in _child_outputs(node, k):
            m = _module(root, path)
            if m is None:
                continue
            if type(m) is nn.Linear:
                _swap(root, path, lambda m: _recast(m, CanonicalLinear), "C(linear(x))", changes)
            else:  # a wrapper already is skipped by _swap
                _swap(root, path, CanonicalOutput, "C(output)", changes)
    return changes
