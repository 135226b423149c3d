"""The NVFP4 substitution as a graph rewrite: weight GEMMs become ``unitcheck::nvfp4_linear``.

linear(x, W, b) -> nvfp4_linear(x, W, b);  addmm(b, x, W) -> nvfp4_linear(x, W^T, b);
matmul(x, f(W)) with f unit-transparent and W a parameter -> nvfp4_linear(x, f(W)^T). Embedding
lookups and attention's batched GEMMs (activations times activations) stay in high precision.
"""

from __future__ import annotations

import torch
import torch.fx as fx

from ..errors import UsageError
from ..fxutil import MOVEMENT_OPS, base_name, module_path
from ..quant.gemm import RECIPES
from ..quant.substitute import SubstitutionReport
from ..tracer import TracedGraph

__all__ = ["nvfp4_graph"]

aten = torch.ops.aten
_WEIGHT_PATH = MOVEMENT_OPS | {"canonical"}  # how a weight may reach a GEMM operand


def _weight_leaf(node: object, traced: TracedGraph) -> str | None:
    while isinstance(node, fx.Node):
        leaf = traced.leaves.get(node.name)
        if leaf is not None:
            return leaf.name if leaf.kind == "param" else None
        if node.op == "get_attr":
            return str(node.target)
        if base_name(node) not in _WEIGHT_PATH or not node.args:
            return None
        node = node.args[0]
    return None


def nvfp4_graph(traced: TracedGraph, recipe: str) -> SubstitutionReport:
    if recipe not in RECIPES:
        raise UsageError(f"unknown NVFP4 recipe {recipe!r}; choose one of {', '.join(RECIPES)}")
    op = torch.ops.unitcheck.nvfp4_linear.default
    report = SubstitutionReport(recipe, "emulated", "graph rewrite to unitcheck::nvfp4_linear "
                                "(Transformer Engine is used by the module pass where available)")
    g = traced.graph
    for n in list(g.nodes):
        name = base_name(n)
        where = module_path(n) or "<root>"
        if name == "linear":
            x, w = n.args[0], n.args[1]
            b = n.args[2] if len(n.args) > 2 else None
            with g.inserting_before(n):
                new = g.call_function(op, (x, w, b, recipe))
        elif name == "addmm":
            b, x, w = n.args[0], n.args[1], n.args[2]
            with g.inserting_before(n):
                wt = g.call_function(aten.t.default, (w,))
                new = g.call_function(op, (x, wt, b, recipe))
        elif name in ("matmul", "mm") and _weight_leaf(n.args[1], traced) is not None:
            with g.inserting_before(n):
                wt = g.call_function(aten.t.default, (n.args[1],))
                new = g.call_function(op, (n.args[0], wt, None, recipe))
        else:
            if name == "embedding":
                report.kept.append({"name": where, "reason": "embedding lookup, not a GEMM: kept in high precision (seed 001)"})
            elif name in ("scaled_dot_product_attention", "bmm", "matmul", "mm", "einsum"):
                report.kept.append({"name": where, "reason": f"{name} of activations (attention's batched GEMMs stay in high precision, seed 001)"})
            continue
        new.meta.update({k: v for k, v in n.meta.items() if k in ("nn_module_stack", "stack_trace", "val")})
        n.replace_all_uses_with(new)
        g.erase_node(n)
        report.replaced.append({"name": where, "kind": name})
    g.lint()
    return report
