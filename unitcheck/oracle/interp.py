"""Running a traced graph with its leaves and numerical floors rescaled.

:class:`ScaledInterpreter` is a ``torch.fx.Interpreter`` with two hooks the oracle needs: leaf
values come from a dict keyed by leaf node name (so they can be rescaled), and each node's
numerical-floor arguments (eps) are multiplied by the character of the unit they guard. Errors
name the node, as the interpreter does. :func:`run_with_grads` is the one way to get every
node's value and gradient (oracle and diagnostics share it).
"""

from __future__ import annotations

import contextlib
import inspect
import random
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

from ..fxutil import RUN_VIEW_AS
from ..record import record
from ..tracer import TracedGraph
from ..units import Unit
from ..values import Literal

__all__ = [
    "ScaledInterpreter", "GradRun", "call_node", "floor_factor_args", "run_graph", "run_with_grads",
    "leaf_values", "scale", "draw", "seeded",
]


Factor = Callable[[Unit], float]


@contextlib.contextmanager
def seeded(seed: int = 1234) -> Iterator[None]:
    """Every run sees the same random stream (dropout, random draws), and the caller's global
    RNG state is left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def draw(generators: list[str], rng: random.Random) -> dict[str, float]:
    """g_k log-uniform in [1/4, 4] per generator."""
    return {gen: 4.0 ** rng.uniform(-1.0, 1.0) for gen in generators}


def scale(value: Any, unit: Any, g: Mapping[str, float]) -> Any:
    """``value`` times the character of its unit (elementwise through tuples)."""
    if isinstance(value, (tuple, list)) and isinstance(unit, tuple):
        return type(value)(scale(v, u, g) for v, u in zip(value, unit))
    if isinstance(value, torch.Tensor) and value.is_floating_point() and isinstance(unit, Unit):
        return value * unit.character(g)
    return value


def call_node(gm: fx.GraphModule, node: fx.Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if node.op == "call_function":
        target: Any = RUN_VIEW_AS.get(node.target, node.target)  # type: ignore[call-overload]
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
    node: fx.Node, args: tuple[Any, ...], kwargs: dict[str, Any], factor: Factor
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
        else:
            value = kwargs_d.get(where)
            if value is None:
                schema = getattr(node.target, "_schema", None)
                for a in getattr(schema, "arguments", []):
                    if a.name == where:
                        value = a.default_value
            if isinstance(value, (int, float)):
                kwargs_d[where] = float(value) * f
    return tuple(args_l), kwargs_d


class ScaledInterpreter(fx.Interpreter):
    """Runs a traced graph on given leaf values, floors rescaled by ``floor_factor``.

    >>> env = ScaledInterpreter(traced, leaf_values(traced, torch.float64)).run_all()  # doctest: +SKIP
    >>> env[traced.graph.find_nodes(op="call_function")[0]].dtype                       # doctest: +SKIP
    torch.float64
    """

    def __init__(self, traced: TracedGraph, leaves: Mapping[str, Any], floor_factor: Factor | None = None) -> None:
        super().__init__(traced.gm, garbage_collect_values=False)
        self.leaves = leaves
        self.floor_factor = floor_factor

    def run_all(self) -> dict[fx.Node, Any]:
        """Every node's value (the output node's too)."""
        self.run(enable_io_processing=False)
        return self.env

    def run_node(self, n: fx.Node) -> Any:
        if n.op in ("placeholder", "get_attr"):
            if n.name in self.leaves:
                return self.leaves[n.name]
            return super().run_node(n) if n.op == "get_attr" else n.meta.get("example_value")
        if n.op == "output":
            return super().run_node(n)
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        if self.floor_factor is not None:
            args, kwargs = floor_factor_args(n, args, kwargs, self.floor_factor)
        return call_node(self.module, n, args, kwargs)  # type: ignore[arg-type]


def run_graph(traced: TracedGraph, leaves: Mapping[str, Any], floor_factor: Factor | None = None) -> dict[fx.Node, Any]:
    return ScaledInterpreter(traced, leaves, floor_factor).run_all()


def leaf_values(traced: TracedGraph, dtype: torch.dtype | None = None) -> dict[str, Any]:
    """Every leaf's value, detached; floating tensors cast to ``dtype`` when given."""
    out: dict[str, Any] = {}
    for name, leaf in traced.leaves.items():
        v = leaf.value
        if isinstance(v, torch.Tensor):
            v = v.detach()
            if dtype is not None and v.is_floating_point():
                v = v.to(dtype)
        out[name] = v
    return out


@dataclass
class GradRun:
    env: dict[fx.Node, Any]  # every node's value
    grads: dict[fx.Node, torch.Tensor]  # d objective / d value, for every float node it reaches
    objective: torch.Tensor | None


def run_with_grads(
    traced: TracedGraph,
    leaves: Mapping[str, Any],
    objective: Callable[[dict[fx.Node, Any]], torch.Tensor | None],
    floor_factor: Factor | None = None,
    wrt: Iterable[fx.Node] | None = None,
) -> GradRun:
    """Run with every float leaf requiring grad, then differentiate ``objective(env)`` (a scalar
    built from the values, e.g. the loss node's) with respect to every float node (or the nodes
    in ``wrt``)."""
    req: dict[str, Any] = {}
    for k, v in leaves.items():
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            v = v.detach().clone().requires_grad_(True)
        req[k] = v
    with torch.enable_grad(), seeded():
        env = run_graph(traced, req, floor_factor)
        obj = objective(env)
    if obj is None or not obj.requires_grad:
        return GradRun(env, {}, obj)
    wanted = set(wrt) if wrt is not None else None
    nodes = [n for n, v in env.items() if n.op != "output" and (wanted is None or n in wanted)
             and isinstance(v, torch.Tensor) and v.is_floating_point() and v.requires_grad]
    grads = torch.autograd.grad(obj, [env[n] for n in nodes], allow_unused=True)
    return GradRun(env, {n: g for n, g in zip(nodes, grads) if g is not None}, obj)
