"""Run a model once through its traced graph and keep what the diagnostics measure: residual
streams and branches, attention queries and keys, linear-layer operands, and gradients."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch import nn

from ..execute import run_graph
from ..fxutil import base_name
from ..graphs import residual_adds
from ..infer import infer_units
from ..unitgraph import UnitGraph

__all__ = ["Capture", "capture"]

_LINEAR = {"linear", "nvfp4_linear", "addmm"}


@dataclass
class Capture:
    ug: UnitGraph
    values: dict[fx.Node, Any]
    residuals: list[tuple[fx.Node, fx.Node, fx.Node]]  # (add, stream, branch)
    attention: list[fx.Node]
    linears: list[fx.Node]
    loss: torch.Tensor | None
    grads: dict[fx.Node, torch.Tensor] = field(default_factory=dict)

    def value(self, node: Any) -> Any:
        return self.values.get(node) if isinstance(node, fx.Node) else node


def _leaf_values(ug: UnitGraph, grad: bool) -> dict[str, Any]:
    out = {}
    for name, leaf in ug.traced.leaves.items():
        v = leaf.value
        if isinstance(v, torch.Tensor):
            v = v.detach()
            if grad and v.is_floating_point():
                v = v.clone().requires_grad_(True)
        out[name] = v
    return out


def capture(model: nn.Module, inputs: Any, grads: bool = False) -> Capture:
    ug = infer_units(model, inputs)
    residuals = residual_adds(ug.graph)
    attention = [n for n in ug.graph.nodes if base_name(n) == "scaled_dot_product_attention"]
    linears = [n for n in ug.graph.nodes if base_name(n) in _LINEAR]
    ctx = torch.enable_grad() if grads else torch.no_grad()
    with ctx:
        values = run_graph(ug.traced, _leaf_values(ug, grads))
    loss = values.get(ug.loss_node) if ug.loss_node is not None else None
    cap = Capture(ug, values, residuals, attention, linears, loss)
    if grads and loss is not None and loss.requires_grad:
        nodes = [n for n, v in values.items() if isinstance(v, torch.Tensor) and v.requires_grad and v.is_floating_point()]
        gs = torch.autograd.grad(loss, [values[n] for n in nodes], allow_unused=True)
        cap.grads = {n: g for n, g in zip(nodes, gs) if g is not None}
    return cap
