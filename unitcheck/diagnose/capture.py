"""Run a model once through its traced graph and keep what the diagnostics measure: residual
streams and branches, attention queries and keys, linear-layer operands, and gradients."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch import nn

from ..fxutil import base_name
from ..graphs import residual_adds
from ..infer import infer_units
from ..oracle.interp import leaf_values, run_graph, run_with_grads
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


def capture(model: nn.Module, inputs: Any, grads: bool = False) -> Capture:
    ug = infer_units(model, inputs)
    residuals = residual_adds(ug.graph)
    attention = [n for n in ug.graph.nodes if base_name(n) == "scaled_dot_product_attention"]
    linears = [n for n in ug.graph.nodes if base_name(n) in _LINEAR]
    leaves = leaf_values(ug.traced)
    if grads and ug.loss_node is not None:
        loss_node = ug.loss_node
        run = run_with_grads(ug.traced, leaves, lambda env: env[loss_node])
        return Capture(ug, run.env, residuals, attention, linears, run.objective, run.grads)
    with torch.no_grad():
        values = run_graph(ug.traced, leaves)
    loss = values.get(ug.loss_node) if ug.loss_node is not None else None
    return Capture(ug, values, residuals, attention, linears, loss)
