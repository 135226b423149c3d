"""The last capture: run the model once on real CPU tensors and record the ops it executes.

Export (even with real-tensor propagation) and symbolic tracing stop at Python control flow on a
tensor value that export cannot follow (``if length <= max_pad`` on a computed size, an entropy
threshold, ``lengths.tolist()`` fed to ``split``, an LSTM's packed lengths). Running the model
for real decides every such branch with the example's values. :func:`record` does that with
``make_fx`` in real mode, over a functional call that takes parameters and buffers as inputs, at
export's own level (pre-dispatch ATen, so ``linear``, attention and norms stay whole) and with the
``nn_module_stack`` and stack traces export gives. :func:`replayed` then makes the model's
``forward`` replay that recording, so that ``torch.export`` of the model sees straight-line code:
its graph has the same leaves (parameters and buffers by name), node meta and lowering as any
other export, and the rest of the engine needs nothing new. The graph holds the branches the
example took; the trace's notes say where they were.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
import torch.fx.traceback as fx_traceback
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from .fxutil import innermost_line, user_frame

__all__ = ["Recording", "record", "replayed"]

aten = torch.ops.aten

# ops through which a tensor's value reaches Python (a branch, a size, a list of lengths)
_READ_OUT = {"item", "_local_scalar_dense", "is_nonzero", "tolist", "equal", "allclose"}


@dataclass
class Recording:
    """What one real run executed: the graph (placeholders: state tensors by name, then the flat
    inputs), the structure of the outputs, and where a tensor value was read into Python."""

    gm: fx.GraphModule
    state: list[str]
    keywords: list[str]
    out_spec: Any
    branches: list[str] = field(default_factory=list)


@contextlib.contextmanager
def _module_stack(model: nn.Module) -> Iterator[None]:
    """Keep ``nn_module_stack`` in the current node meta while submodules run, in the form
    non-strict export writes (key -> (qualified path, class)), so the recorded nodes carry it."""
    paths = {id(m): name for name, m in model.named_modules(remove_duplicate=False) if name}
    stack: list[tuple[str, tuple[str, str]]] = []
    stack_ids: list[bool] = []

    def pre(mod: nn.Module, args: Any) -> None:
        path = paths.get(id(mod))
        stack_ids.append(path is not None)
        if path is not None:
            cls = f"{type(mod).__module__}.{type(mod).__qualname__}"
            stack.append((f"L__self__.{path}", (path, cls)))
        fx_traceback.current_meta["nn_module_stack"] = dict(stack)

    def post(mod: nn.Module, args: Any, out: Any) -> None:
        if stack_ids and stack_ids.pop() and stack:
            stack.pop()
        fx_traceback.current_meta["nn_module_stack"] = dict(stack)

    h1 = nn.modules.module.register_module_forward_pre_hook(pre)
    h2 = nn.modules.module.register_module_forward_hook(post, always_call=True)
    try:
        yield
    finally:
        h1.remove()
        h2.remove()
        fx_traceback.current_meta.pop("nn_module_stack", None)


_LOW_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_LOW_METHODS = ("float", "half", "bfloat16")


class _KeepFloat64(TorchFunctionMode):
    """A float64 model (the oracle's copy) runs in float64 end to end: a factory or cast the code
    wrote for a lower float precision (``torch.zeros(..., dtype=torch.float)``, ``.float()``,
    ``.to(torch.float32)``) makes float64 instead, as the oracle's interpreter does for graphs."""

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if kwargs.get("dtype") in _LOW_FLOATS:
            kwargs["dtype"] = torch.float64
        name = getattr(func, "__name__", "")
        if name in _LOW_METHODS and args and isinstance(args[0], torch.Tensor) and args[0].is_floating_point():
            return args[0].double()
        if name in ("to", "type") and any(a in _LOW_FLOATS for a in args[1:]):
            args = tuple(torch.float64 if a in _LOW_FLOATS else a for a in args)
        return func(*args, **kwargs)


def _all_float64(model: nn.Module) -> bool:
    floats = [t for t in (*model.parameters(), *model.buffers()) if t.is_floating_point()]
    return bool(floats) and all(t.dtype == torch.float64 for t in floats)


def _where(node: fx.Node) -> str:
    return innermost_line(str(node.meta.get("stack_trace") or ""), user_frame)


def record(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Recording:
    """Run ``model`` (on real tensors) once under ``make_fx`` and return what it executed."""
    from torch.fx.experimental.proxy_tensor import make_fx

    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    names = list(state)
    spec: list[Any] = []

    def run(state_values: list[torch.Tensor], inputs: Any) -> list[Any]:
        a, k = inputs
        out = torch.func.functional_call(model, dict(zip(names, state_values, strict=True)), a, k)
        flat, out_spec = pytree.tree_flatten(out)
        spec.append(out_spec)
        return flat

    keep = _KeepFloat64() if _all_float64(model) else contextlib.nullcontext()
    with fx_traceback.preserve_node_meta(), _module_stack(model), keep:
        gm = make_fx(run, tracing_mode="real", pre_dispatch=True, record_stack_traces=True,
                     _error_on_data_dependent_ops=False)([state[n] for n in names], (args, kwargs))
    branches = []
    for n in gm.graph.nodes:
        if n.op == "call_function" and getattr(n.target, "__name__", "").split(".")[0] in _READ_OUT:
            at = _where(n)
            if at and at not in branches:
                branches.append(at)
    gm.graph.eliminate_dead_code()  # values read only to branch on
    gm.recompile()
    return Recording(gm, names, list(kwargs), spec[-1] if spec else None, branches)


class _Replay(fx.Interpreter):
    """Runs the recording node by node with each node's meta current, so that export copies
    the module stack, stack trace and annotations onto the nodes it creates. A size only the
    values decide (``nonzero``'s count of the experts a batch hit, which a loop over them
    unbinds) is the example's: the graph holds the example's branches, and asserts this size."""

    def run_node(self, n: fx.Node) -> Any:
        with fx_traceback.set_current_meta(n):
            out = super().run_node(n)
        _sizes_as_recorded(out, n.meta.get("val"))
        return out


def _sizes_as_recorded(out: Any, recorded: Any) -> None:
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    for got, want in zip(pytree.tree_leaves(out), pytree.tree_leaves(recorded)):
        if not (isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor)) or got.dim() != want.dim():
            continue
        for size, real in zip(got.shape, want.shape):
            if isinstance(size, torch.SymInt) and free_unbacked_symbols(size) and isinstance(real, int):
                torch._check(size == real)


@contextlib.contextmanager
def replayed(model: nn.Module, rec: Recording) -> Iterator[None]:
    """``model.forward`` replays ``rec`` on whatever tensors the model holds at call time (the
    ones export swaps in) and the call's inputs; the original forward is restored afterwards."""

    def forward(*args: Any, **kwargs: Any) -> Any:
        current = {**dict(model.named_parameters()), **dict(model.named_buffers())}
        ordered = {k: kwargs[k] for k in rec.keywords}
        flat = [current[n] for n in rec.state] + pytree.tree_leaves((args, ordered))
        out = _Replay(rec.gm).run(*flat)
        return pytree.tree_unflatten(list(out), rec.out_spec)

    forward.__signature__ = inspect.signature(model.forward)  # type: ignore[attr-defined]  # input names
    had = "forward" in model.__dict__
    saved = model.__dict__.get("forward")
    model.forward = forward  # type: ignore[method-assign]
    try:
        yield
    finally:
        if had:
            model.forward = saved  # type: ignore[method-assign,assignment]
        else:
            del model.forward
