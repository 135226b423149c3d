"""Running a traced graph node by node: leaf values are supplied, floors can be rescaled.

The oracle needs what ``torch.fx.Interpreter`` gives plus two hooks: leaves come from a dict (so
they can be rescaled), and a node's numerical-floor arguments (eps) can be multiplied by a factor.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.fx as fx
from torch.fx.node import map_arg

from .record import record
from .tracer import TracedGraph
from .units import Unit
from .values import Literal

__all__ = ["call_node", "run_graph", "floor_factor_args"]


_aten = torch.ops.aten
# Exported graphs bake in the strides a kernel produced while tracing; eager kernels chosen under
# autograd may lay outputs out differently, so views run as reshapes (same values, maybe a copy).
_RUN_AS = {_aten.view.default: _aten.reshape.default, _aten._unsafe_view.default: _aten.reshape.default}


def call_node(gm: fx.GraphModule, node: fx.Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if node.op == "call_function":
        target: Any = _RUN_AS.get(node.target, node.target)  # type: ignore[call-overload]
        return target(*args, **kwargs)
    if node.op == "call_method":
        obj, *rest = args
        return getattr(obj, str(node.target))(*rest, **kwargs)
    if node.op == "call_module":
        return gm.get_submodule(str(node.target))(*args, **kwargs)
    raise ValueError(f"cannot call node {node.format_node()}")


def _default_for(node: fx.Node, position: int) -> tuple[str, Any] | None:
    """Name and default value of argument ``position`` of the node's target (schema or signature)."""
    schema = getattr(node.target, "_schema", None)
    if schema is not None:
        if position < len(schema.arguments):
            a = schema.arguments[position]
            return a.name, a.default_value
        return None
    try:
        params = list(inspect.signature(node.target).parameters.values())  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    if position < len(params) and params[position].default is not inspect.Parameter.empty:
        return params[position].name, params[position].default
    return None


def floor_factor_args(
    node: fx.Node, args: tuple[Any, ...], kwargs: dict[str, Any], factor: Callable[[Unit], float]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Multiply each floor argument of ``node`` by ``factor(unit of the floor)``."""
    floors = record(node).floors
    if not floors:
        return args, kwargs
    args_l, kwargs_d = list(args), dict(kwargs)
    for floor in floors:
        where, unit = floor.where, floor.unit()
        if unit is None or unit.is_dimensionless:
            continue
        f = factor(unit)
        if isinstance(where, Literal):
            for i, a in enumerate(args_l):
                if isinstance(a, float) and a == where.value:
                    args_l[i] = a * f
            for k, a in kwargs_d.items():
                if isinstance(a, float) and a == where.value:
                    kwargs_d[k] = a * f
        elif isinstance(where, int):
            if where < len(args_l) and isinstance(args_l[where], (int, float)):
                args_l[where] = float(args_l[where]) * f
            else:
                d = _default_for(node, where)
                if d is not None:
                    name, default = d
                    value = kwargs_d.get(name, default)
                    if isinstance(value, (int, float)):
                        kwargs_d[name] = float(value) * f
        elif isinstance(where, str):
            value = kwargs_d.get(where)
            if value is None:
                schema = getattr(node.target, "_schema", None)
                for a in getattr(schema, "arguments", []):
                    if a.name == where:
                        value = a.default_value
            if isinstance(value, (int, float)):
                kwargs_d[where] = float(value) * f
    return tuple(args_l), kwargs_d


def run_graph(
    traced: TracedGraph,
    leaf_values: Mapping[str, Any],
    floor_factor: Callable[[Unit], float] | None = None,
    record: Callable[[fx.Node, Any], None] | None = None,
) -> dict[fx.Node, Any]:
    """Run every node; returns node -> value. ``record`` sees each value as it is produced."""
    gm = traced.gm
    env: dict[fx.Node, Any] = {}
    for node in traced.graph.nodes:
        if node.op in ("placeholder", "get_attr"):
            if node.name in leaf_values:
                value = leaf_values[node.name]
            elif node.op == "get_attr":
                value = _fetch(gm, str(node.target))
            else:
                value = node.meta.get("example_value")
        elif node.op == "output":
            continue
        else:
            args = map_arg(node.args, lambda n: env[n])
            kwargs = map_arg(node.kwargs, lambda n: env[n])
            if floor_factor is not None:
                args, kwargs = floor_factor_args(node, args, kwargs, floor_factor)  # type: ignore[arg-type]
            value = call_node(gm, node, args, kwargs)  # type: ignore[arg-type]
        env[node] = value
        if record is not None:
            record(node, value)
    return env


def _fetch(gm: fx.GraphModule, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj

