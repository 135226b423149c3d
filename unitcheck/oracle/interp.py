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
from typing import Any, TypeGuard

import torch
import torch.fx as fx

from ..fxutil import RUN_VIEW_AS
from ..record import record
from ..runtime import copy_into, grouped_mm
from ..tracer import TracedGraph
from ..units import Unit
from ..values import Literal
from .result import OracleError

__all__ = [
    "ScaledInterpreter", "RunFailed", "runs_on_its_inputs", "GradRun", "call_node", "floor_factor_args", "run_graph", "run_with_grads",
    "leaf_values", "scale", "draw", "seeded", "is_value", "high_precision_args", "default_dtype",
]


Factor = Callable[[Unit], float]
_aten = torch.ops.aten

# float8 scales and values (Kolibri 1.1's NVFP4 fake quantisation): CPU kernels do no arithmetic
# in them, and a rounding to 8 bits is the measurement lost, as float32's is
_FLOAT8 = [d for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu")
           if isinstance(d := getattr(torch, name, None), torch.dtype)]
# casts to these, recorded at trace time, stay at full precision in oracle runs
_HIGH = {torch.float16: torch.float64, torch.bfloat16: torch.float64, torch.float32: torch.float64,
         torch.complex32: torch.complex128, torch.complex64: torch.complex128,
         **dict.fromkeys(_FLOAT8, torch.float64)}
_LOW_PRECISION_METHODS = {"float": "double", "half": "double", "bfloat16": "double"}


def _eval_batch_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                     mean: torch.Tensor, var: torch.Tensor, momentum: float, eps: float
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eval-mode batch norm written out, differentiable in the running statistics too (a
    generator's direction rescales them with the activations they normalise)."""
    shape = [1, -1] + [1] * (x.dim() - 2)
    y = (x - mean.reshape(shape)) * torch.rsqrt(var.reshape(shape) + eps)
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    empty = x.new_zeros(0)
    return y, empty, empty


def _native_batch_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                       mean: torch.Tensor | None, var: torch.Tensor | None, training: bool,
                       momentum: float, eps: float) -> Any:
    if training or mean is None or var is None:
        return _aten.native_batch_norm.default(x, weight, bias, mean, var, training, momentum, eps)
    return _eval_batch_norm(x, weight, bias, mean, var, momentum, eps)


def _batch_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                mean: torch.Tensor | None, var: torch.Tensor | None, training: bool, momentum: float,
                eps: float, cudnn_enabled: bool = False) -> torch.Tensor:
    if training or mean is None or var is None:
        return _aten.batch_norm.default(x, weight, bias, mean, var, training, momentum, eps, cudnn_enabled)
    return _eval_batch_norm(x, weight, bias, mean, var, momentum, eps)[0]


def _zeroed(op: Any) -> Callable[..., Any]:
    """``op`` (an uninitialised allocation) filled with zeros: memory the model never writes would
    otherwise differ between the runs the oracle compares."""
    def run(*args: Any, **kwargs: Any) -> torch.Tensor:
        return op(*args, **kwargs).zero_()
    return run


def _embedding(weight: torch.Tensor, indices: torch.Tensor, padding_idx: int = -1,
               scale_grad_by_freq: bool = False, sparse: bool = False) -> torch.Tensor:
    """``aten.embedding`` with its true derivative: ``padding_idx`` and ``scale_grad_by_freq``
    change only the backward (the padding row gets no gradient although a tied head reads it)."""
    return _aten.embedding.default(weight, indices, -1, False, False)


def _f_embedding(indices: torch.Tensor, weight: torch.Tensor, padding_idx: int | None = None,
                 max_norm: float | None = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                 sparse: bool = False) -> torch.Tensor:
    """``F.embedding`` (symbolic traces) likewise."""
    return torch.nn.functional.embedding(indices, weight, None, max_norm, norm_type, False, sparse)


_EMPTY = (_aten.empty.memory_format, _aten.empty_like.default, _aten.new_empty.default,
          _aten.empty_strided.default, _aten.new_empty_strided.default, _aten.empty_permuted.default,
          torch.empty, torch.empty_like, torch.empty_strided)
_EMPTY_METHODS = {"new_empty", "new_empty_strided"}

def _attached(x: torch.Tensor) -> torch.Tensor:
    """``detach`` as a view that keeps the derivative: the oracle measures the loss as a function
    of the weights, whatever the model tells autograd (XGLM's sinusoidal positions are read
    through ``.detach()`` and still move the loss with their scale)."""
    return x.view_as(x)


# ops run as an equivalent with the same values: views as reshapes, copy as a differentiable copy,
# eval-mode batch norm as its formula, uninitialised memory as zeros, embedding and detach with
# their true derivatives
_RUN_AS: dict[Any, Callable[..., Any]] = {
    _aten.detach.default: _attached, torch.detach: _attached,
    **RUN_VIEW_AS, _aten.copy.default: copy_into, **{op: _zeroed(op) for op in _EMPTY},
    _aten.embedding.default: _embedding, torch.nn.functional.embedding: _f_embedding,
    _aten._native_batch_norm_legit_no_training.default: _eval_batch_norm,
    _aten.native_batch_norm.default: _native_batch_norm,
    _aten.batch_norm.default: _batch_norm,
    _aten._grouped_mm.default: grouped_mm,  # the CPU kernel has no float64
}


def _promote(x: Any) -> tuple[Any, bool]:
    """Every lower-precision float or complex dtype in an argument tree, raised to 64 bits."""
    if isinstance(x, torch.dtype):
        return (_HIGH[x], True) if x in _HIGH else (x, False)
    if isinstance(x, (list, tuple)):
        items = [_promote(v) for v in x]
        return type(x)(v for v, _ in items), any(c for _, c in items)
    if isinstance(x, dict):
        pairs = {k: _promote(v) for k, v in x.items()}
        return {k: v for k, (v, _) in pairs.items()}, any(c for _, c in pairs.values())
    return x, False


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Factories without a dtype (``torch.randn(shape)``) make ``dtype`` inside the block."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


@contextlib.contextmanager
def seeded(seed: int = 1234) -> Iterator[None]:
    """Every run sees the same random streams (dropout, random draws; numpy's and Python's, which
    wav2vec2's masks and LayerDrop draw from), and the caller's global RNG states are left as
    they were."""
    import numpy as np  # torch's tensors convert to and from it

    state, host = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            random.seed(seed)
            np.random.seed(seed)
            yield
    finally:
        random.setstate(state)
        np.random.set_state(host)


def draw(generators: list[str], rng: random.Random) -> dict[str, float]:
    """g_k log-uniform in [1/4, 4] per generator."""
    return {gen: 4.0 ** rng.uniform(-1.0, 1.0) for gen in generators}


def scale(value: Any, unit: Any, g: Mapping[str, float]) -> Any:
    """``value`` times the character of its unit (elementwise through tuples)."""
    if isinstance(value, (tuple, list)) and isinstance(unit, tuple):
        return type(value)(scale(v, u, g) for v, u in zip(value, unit))
    if is_value(value) and isinstance(unit, Unit):
        return value * unit.character(g)
    return value


def is_value(x: Any) -> TypeGuard[torch.Tensor]:
    """A float or complex tensor: what units describe and the oracle rescales."""
    return isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex())


def high_precision_args(node: fx.Node, args: tuple[Any, ...], kwargs: dict[str, Any]
                        ) -> tuple[tuple[Any, ...], dict[str, Any], bool]:
    """The node's arguments with every recorded cast to a lower-precision float raised to 64 bits
    (``.float()``, ``.to(torch.float32)``, ``dtype=`` of factories and constants), so no step of
    an oracle run loses the float64 measurement. Returns whether anything was raised."""
    new_args, ca = _promote(args)
    new_kwargs, ck = _promote(kwargs)
    return new_args, new_kwargs, ca or ck


def call_node(gm: fx.GraphModule, node: fx.Node, args: tuple[Any, ...], kwargs: dict[str, Any],
              high: bool = False) -> Any:
    """Run one node; ``high``: an oracle run, where metadata assertions of the traced dtypes are
    skipped and lower-precision methods (``.float()``) keep float64."""
    if node.op == "call_function":
        if high and node.target is _aten._assert_tensor_metadata.default:
            return None
        target: Any = _RUN_AS.get(node.target, node.target)  # type: ignore[call-overload]
        return target(*args, **kwargs)
    if node.op == "call_method":
        obj, *rest = args
        name = str(node.target)
        if high and is_value(obj):
            name = _LOW_PRECISION_METHODS.get(name, name)
        if name == "detach":
            return _attached(obj)
        out = getattr(obj, name)(*rest, **kwargs)
        return out.zero_() if name in _EMPTY_METHODS else out
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
        else:  # by name: positional when the call passed it so, else a keyword or its default
            schema = getattr(node.target, "_schema", None)
            names = [a.name for a in getattr(schema, "arguments", [])]
            i = names.index(where) if where in names else len(args_l)
            if i < len(args_l):
                if isinstance(args_l[i], (int, float)) and not isinstance(args_l[i], bool):
                    args_l[i] = float(args_l[i]) * f
                continue
            value = kwargs_d.get(where)
            if value is None and schema is not None:
                value = schema.arguments[i].default_value if i < len(names) else None
            if isinstance(value, (int, float)):
                kwargs_d[where] = float(value) * f
    return tuple(args_l), kwargs_d


class RunFailed(RuntimeError):
    """A node raised while the graph ran (``node`` names it; the cause is chained)."""

    def __init__(self, node: fx.Node, err: BaseException) -> None:
        super().__init__(f"{type(err).__name__}: {err}")
        self.node = node


# random draws autograd has no derivative for: the value drawn is taken as given, as
# ``Distribution.sample`` takes it (under no_grad; PI0's flow-matching time from a Beta, whose
# no_grad a trace does not keep), so gradients are measured through everything else
_DRAWS = frozenset({torch.ops.aten._sample_dirichlet.default, torch.ops.aten.binomial.default})


class ScaledInterpreter(fx.Interpreter):
    """Runs a traced graph on given leaf values, floors rescaled by ``floor_factor``; with
    ``high=True`` (oracle runs) every cast stays at float64 and the nodes where a recorded
    lower precision was raised are listed in ``raised``.

    >>> env = ScaledInterpreter(traced, leaf_values(traced, torch.float64), high=True).run_all()  # doctest: +SKIP
    >>> {v.dtype for v in env.values() if is_value(v)}                                          # doctest: +SKIP
    {torch.float64}
    """

    def __init__(self, traced: TracedGraph, leaves: Mapping[str, Any], floor_factor: Factor | None = None,
                 high: bool = False) -> None:
        super().__init__(traced.gm, garbage_collect_values=False)
        self.leaves = leaves
        self.floor_factor = floor_factor
        self.high = high
        self.raised: list[str] = []

    def run_all(self) -> dict[fx.Node, Any]:
        """Every node's value (the output node's too)."""
        with default_dtype(torch.float64) if self.high else contextlib.nullcontext():
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
        if self.high:
            args, kwargs, raised = high_precision_args(n, args, kwargs)  # type: ignore[arg-type]
            if raised:
                self.raised.append(n.name)
        try:
            if n.target in _DRAWS:
                with torch.no_grad():
                    return call_node(self.module, n, args, kwargs, self.high)  # type: ignore[arg-type]
            return call_node(self.module, n, args, kwargs, self.high)  # type: ignore[arg-type]
        except RunFailed:
            raise
        except Exception as err:
            raise RunFailed(n, err) from err


def run_graph(traced: TracedGraph, leaves: Mapping[str, Any], floor_factor: Factor | None = None,
              high: bool = False) -> dict[fx.Node, Any]:
    return ScaledInterpreter(traced, leaves, floor_factor, high).run_all()


def leaf_values(traced: TracedGraph, high: bool = False) -> dict[str, Any]:
    """Every leaf's value, detached; with ``high``, float and complex tensors at 64 bits."""
    out: dict[str, Any] = {}
    for name, leaf in traced.leaves.items():
        v = leaf.value
        if isinstance(v, torch.Tensor):
            v = v.detach()
            if high and v.dtype in _HIGH:
                v = v.to(_HIGH[v.dtype])
        out[name] = v
    return out


@dataclass
class GradRun:
    env: dict[fx.Node, Any]  # every node's value
    grads: dict[fx.Node, torch.Tensor]  # d objective / d value, for every float node it reaches
    objective: torch.Tensor | None
    raised: list[str]  # nodes whose recorded lower-precision cast was kept at float64


def run_with_grads(
    traced: TracedGraph,
    leaves: Mapping[str, Any],
    objective: Callable[[dict[fx.Node, Any]], torch.Tensor | None],
    floor_factor: Factor | None = None,
    wrt: Iterable[fx.Node] | None = None,
    high: bool = False,
) -> GradRun:
    """Run with every float leaf requiring grad, then differentiate ``objective(env)`` (a scalar
    built from the values, e.g. the loss node's) with respect to every float node (or the nodes
    in ``wrt``)."""
    req: dict[str, Any] = {}
    for k, v in leaves.items():
        if is_value(v):
            v = v.detach().clone().requires_grad_(True)
        req[k] = v
    interp = ScaledInterpreter(traced, req, floor_factor, high)
    with torch.enable_grad(), seeded():
        env = interp.run_all()
        obj = objective(env)
    if obj is None or not obj.requires_grad:
        return GradRun(env, {}, obj, interp.raised)
    wanted = set(wrt) if wrt is not None else None
    nodes = [n for n, v in env.items() if n.op != "output" and (wanted is None or n in wanted)
             and is_value(v) and v.requires_grad]
    try:
        grads = torch.autograd.grad(obj, [env[n] for n in nodes], allow_unused=True)
    except RuntimeError as err:
        if "derivative for" not in str(err):
            raise
        # an op autograd cannot differentiate, other than the draws taken as given (_DRAWS): no
        # gradient unit and no fingerprint can be measured through it
        raise OracleError(f"the gradients cannot be measured: {str(err).splitlines()[0]}") from None
    return GradRun(env, {n: g for n, g in zip(nodes, grads) if g is not None}, obj, interp.raised)


@contextlib.contextmanager
def runs_on_its_inputs() -> Iterator[None]:
    """The graph run on the example's own values must succeed: where the model itself rejects
    them (a check a meta-device capture deferred, such as image tokens against image features),
    there is nothing to measure, and that is the user's error, not the oracle's."""
    try:
        yield
    except RunFailed as err:
        raise OracleError(f"the model fails on its own example inputs at node {err.node.name}: "
                          f"{str(err).splitlines()[0]}") from None

