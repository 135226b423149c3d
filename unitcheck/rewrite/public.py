"""Generated code calls the public function or method an ATen op has, where one computes exactly
that op (``F.linear(x, w, b)`` for ``torch.ops.aten.linear.default(x, w, b)``, ``x.view(s)`` for
``aten.view.default``): the same dispatch, so the same bits, in code a person can read and keep.

Only ops whose public call takes the same arguments in the same order and dispatches to the same
overload are listed; everything else stays an ``torch.ops.aten`` call."""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch.fx.node import _get_qualified_name

__all__ = ["with_public_calls", "functional_names"]

aten = torch.ops.aten

FUNCTIONS: dict[Any, Any] = {
    aten.linear.default: F.linear,
    aten.gelu.default: F.gelu,
    aten.silu.default: F.silu,
    aten.relu.default: torch.relu,
    aten.tanh.default: torch.tanh,
    aten.sigmoid.default: torch.sigmoid,
    aten.exp.default: torch.exp,
    aten.rsqrt.default: torch.rsqrt,
    aten.softmax.int: torch.softmax,
    aten.matmul.default: torch.matmul,
    aten.bmm.default: torch.bmm,
    aten.scaled_dot_product_attention.default: F.scaled_dot_product_attention,
    aten.rms_norm.default: F.rms_norm,
    aten.embedding.default: torch.embedding,
    aten.dropout.default: torch.dropout,
    aten.add.Tensor: torch.add,
    aten.sub.Tensor: torch.sub,
    aten.mul.Tensor: torch.mul,
    aten.div.Tensor: torch.div,
    aten.cat.default: torch.cat,
    aten.stack.default: torch.stack,
    aten.mean.dim: torch.mean,
    aten.sum.dim_IntList: torch.sum,
    aten.pow.Tensor_Scalar: torch.pow,
    aten.gather.default: torch.gather,
    aten.scatter.src: torch.scatter,
    aten.scatter_add.default: torch.scatter_add,
}

METHODS: dict[Any, str] = {
    aten.view.default: "view",
    aten.reshape.default: "reshape",
    aten.transpose.int: "transpose",
    aten.permute.default: "permute",
    aten.unsqueeze.default: "unsqueeze",
    aten.squeeze.dim: "squeeze",
    aten.expand.default: "expand",
    aten.flatten.using_ints: "flatten",
    aten.t.default: "t",
    aten.split.Tensor: "split",
    aten.chunk.default: "chunk",
}


def _layer_norm(node: fx.Node) -> bool:
    """``aten.layer_norm``: ``F.layer_norm`` passes the same arguments and the cuDNN flag of the
    session, as the model's own call did (the CPU kernel does not read it)."""
    return node.target is aten.layer_norm.default and "cudnn_enable" not in node.kwargs


def with_public_calls(graph: fx.Graph) -> fx.Graph:
    """A copy of ``graph`` whose listed ATen calls are public calls (the graph itself is left
    as it is: its nodes' targets are what the runtime and the checks read)."""
    out = copy.deepcopy(graph)  # with its code generator (the outputs' pytree)
    for node in out.nodes:
        if node.op != "call_function":
            continue
        if node.target in FUNCTIONS:
            node.target = FUNCTIONS[node.target]
        elif _layer_norm(node):
            node.target, node.args = F.layer_norm, node.args[:5]
        elif node.target in METHODS:
            node.op, node.target = "call_method", METHODS[node.target]
    return out


def functional_names(src: str, taken: set[str]) -> tuple[str, bool]:
    """``src`` with the ``torch.nn.functional`` calls this module introduced written ``F.name``
    (fx writes ``torch._C._nn.linear`` for ``F.linear``); whether ``F`` is now used. Left as
    they are where the generated code already has a name ``F``."""
    if "F" in taken:
        return src, False
    out = src
    targets: list[Any] = [*FUNCTIONS.values(), F.layer_norm]
    for target in targets:
        name, qualified = getattr(target, "__name__", ""), _get_qualified_name(target)
        if getattr(F, name, None) is target:
            out = out.replace(f"{qualified}(", f"F.{name}(")
    return out, out != src
