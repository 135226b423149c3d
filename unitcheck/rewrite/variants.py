"""What one capture took from the moment it was taken: the training mode and the float dtype.

A trace records one mode and one dtype: ``dropout(x, 0.1, False)`` in eval mode, a cast to
``torch.float32`` in a float32 model, ``finfo(float32).min`` in an attention mask. Generated code
must not bake these in, so the model is captured again in training mode and in another float
dtype, the graphs are aligned node by node, and every literal argument that differs is recorded
on the first capture's node (``node.meta``). Code generation writes such an argument as an
expression of ``self.training`` or of the model's dtype. A model whose training graph differs in
structure (batch-norm statistics, a branch on ``self.training``) keeps its training capture,
and the generated module runs one graph or the other.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch import nn
from torch.utils import _pytree as pytree

from .. import eager_paths, host_draws, opaque
from ..fxutil import base_name
from ..infer import trace_for_inference
from ..tracer import (
    DRAWS_KEPT,
    FINITE_PATH,
    FUSED_KERNEL_OPS,
    HOST_GENERATORS,
    NOT_CHECKPOINTED,
    SIZES_FIXED,
    STATE_PATH,
    TracedGraph,
    TraceError,
    kept_whole,
    normalise_inputs,
    set_attributes,
    uncallable_functions,
)

__all__ = ["TRAIN_KEY", "DTYPE_KEY", "Unaligned", "Captures", "capture", "align", "named_args", "plain_cast",
           "cast_dtype"]

TRAIN_KEY = "unitcheck_train"  # node.meta: {argument name: its value in training mode}
DTYPE_KEY = "unitcheck_dtype"  # node.meta: {argument name: (the other dtype, its value there)}

# ops that return their input's values: a capture may hold one the other lacks (export drops a
# `.contiguous()` or a cast that is a no-op at the traced strides or dtype)
_SKIPPABLE = frozenset({"contiguous", "clone", "alias", "_assert_tensor_metadata", "detach",
                        "lift_fresh_copy", "_to_copy", "to", "_to_dtype", "type_as"})


class Unaligned(Exception):
    """The two captures differ in structure, not only in literal arguments."""


def named_args(node: fx.Node) -> dict[Any, Any]:
    """An op's arguments by schema name, defaults filled in (positions for other callables), so
    that ``sdpa(q, k, v, m)`` and ``sdpa(q, k, v, m, 0.1)`` compare argument by argument."""
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        out: dict[Any, Any] = {}
        for i, arg in enumerate(target._schema.arguments):
            if not arg.kwarg_only and i < len(node.args):
                out[arg.name] = node.args[i]
            elif arg.name in node.kwargs:
                out[arg.name] = node.kwargs[arg.name]
            elif arg.has_default_value():
                out[arg.name] = arg.default_value
        return out
    return {**dict(enumerate(node.args)), **node.kwargs}


def _has_node(value: Any) -> bool:
    return any(isinstance(v, fx.Node) for v in pytree.tree_leaves(value))


@dataclass
class _Alignment:
    mapping: dict[fx.Node, fx.Node] = field(default_factory=dict)  # a -> b
    back: dict[fx.Node, fx.Node] = field(default_factory=dict)  # b -> a
    alias_a: dict[fx.Node, Any] = field(default_factory=dict)  # skipped node -> what it forwards
    alias_b: dict[fx.Node, Any] = field(default_factory=dict)
    pending: list[tuple[fx.Node, list[fx.Node]]] = field(default_factory=list)
    # (user in a, input it reads, what it should read instead): where one capture reads a value
    # and the other a no-op cast of it (export aliases a cast that changes nothing), the
    # generated code reads what the capture in which the cast is real reads
    edits: list[tuple[fx.Node, fx.Node, list[fx.Node]]] = field(default_factory=list)

    def resolve(self, node: Any, alias: dict[fx.Node, Any]) -> Any:
        while isinstance(node, fx.Node) and node in alias:
            node = alias[node]
        return node

    def same(self, x: Any, y: Any) -> bool:
        """Structurally equal: literals exactly, node references through the mapping, where a
        value and a no-op cast or copy of it count as one."""
        if isinstance(x, fx.Node) or isinstance(y, fx.Node):
            if not (isinstance(x, fx.Node) and isinstance(y, fx.Node)):
                return False
            return self._same_value(x, y)
        if isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
            return len(x) == len(y) and all(self.same(a, b) for a, b in zip(x, y))
        if isinstance(x, dict) and isinstance(y, dict):
            return x.keys() == y.keys() and all(self.same(x[k], y[k]) for k in x)
        if isinstance(x, float) and isinstance(y, float) and x != x and y != y:
            return True  # nan
        return type(x) is type(y) and bool(x == y)

    def _same_value(self, x: fx.Node, y: fx.Node) -> bool:
        xs, ys = _forwarded(x), _forwarded(y)
        for k, a in enumerate(xs):
            m = self.mapping.get(a)
            if m not in ys:
                continue
            j = ys.index(m)
            prefix = xs[:k]
            if all(n in self.alias_a for n in prefix):
                start = x  # casts only a makes (real here, no-ops in b's dtype) stay
            elif all(_noop(n) for n in prefix):
                start = a  # a reads a no-op cast of the value that b reads itself
            else:
                return False
            # b's casts between the value and this use, nearest the value first: the a node
            # each was matched with, or (a cast only b makes) a cast to insert in a
            chain = []
            for n in reversed(ys[:j]):
                if n in self.back:
                    chain.append(self.back[n])
                elif n in self.alias_b and cast_dtype(n) is not None:
                    chain.append(n)
            if start is not x or chain:
                self.pending.append((x, [start, *chain]))
            return True
        return False

    def compare(self, x: fx.Node, y: fx.Node) -> list[tuple[Any, Any, Any]] | None:
        """The literal arguments in which two nodes of the same op differ, or None when they
        differ in a node reference or in the shape of an argument."""
        if x.op != y.op or x.target != y.target:
            return None
        if x.op == "placeholder":
            return [] if x.name == y.name else None
        ax, ay = named_args(x), named_args(y)
        if ax.keys() != ay.keys():
            return None
        diffs = []
        self.pending = []
        for key in ax:
            if self.same(ax[key], ay[key]) or _same_view(x, y, key) or _same_message(ax[key], ay[key]):
                continue
            if _has_node(ax[key]) or _has_node(ay[key]):
                return None
            diffs.append((key, ax[key], ay[key]))
        self.edits += [(x, old, chain) for old, chain in self.pending]
        return diffs


_VIEWS = {"view", "reshape", "_unsafe_view"}
_NODE_CITED = re.compile(r" on node '[^']*'")


def _same_message(a: Any, b: Any) -> bool:
    """Two messages that differ only in the graph node they cite: a runtime assertion names its
    comparison node (``... Eq(s47, u52) on node 'eq_539'``), numbered by its capture."""
    return isinstance(a, str) and isinstance(b, str) and _NODE_CITED.sub("", a) == _NODE_CITED.sub("", b)



def _same_view(x: fx.Node, y: fx.Node, key: Any) -> bool:
    """The size argument of two views with the same result shape: one capture may spell a size
    ``-1`` where the other wrote it out (DeepSeek-V2's rotary ``reshape(..., -1, 2)`` of a fresh
    ``.float()`` copy in float64 only); the result says what both mean."""
    if key not in ("size", "shape") or base_name(x) not in _VIEWS:
        return False
    a, b = x.meta.get("val"), y.meta.get("val")
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and str(tuple(a.shape)) == str(tuple(b.shape))


def _noop(node: fx.Node) -> bool:
    """A cast or copy that changes neither dtype nor shape in this capture."""
    src = node.args[0] if node.args else None
    a, b = getattr(src, "meta", {}).get("val"), node.meta.get("val")
    return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype
            and a.shape == b.shape)


def plain_cast(node: fx.Node) -> bool:
    """A cast that only converts (dtype, layout, device; a memory format changes strides, not
    values): ``_to_copy`` in a lowered graph, ``to`` in export's training IR."""
    if node.target is torch.ops.aten._to_copy.default:
        return set(node.kwargs) <= {"dtype", "layout", "device", "memory_format"}
    return node.target in (torch.ops.aten.to.dtype, torch.ops.aten.to.dtype_layout) and len(node.args) <= 2 \
        and set(node.kwargs) <= {"dtype", "layout", "device", "non_blocking", "copy", "memory_format"}


def cast_dtype(node: fx.Node) -> torch.dtype | None:
    """The dtype a plain cast converts to; None for anything else (or a cast of device only)."""
    if node.op != "call_function" or not plain_cast(node):
        return None
    dtype = named_args(node).get("dtype")
    return dtype if isinstance(dtype, torch.dtype) else None


def _forwarded(node: Any) -> list[fx.Node]:
    """The node and the values it forwards unchanged through skippable ops, each of them (a cast
    only one capture makes can sit behind a copy both make: MPT's ``softmax(...).to(v.dtype)``
    before its dropout's copy)."""
    out = []
    while isinstance(node, fx.Node):
        out.append(node)
        if node.op != "call_function" or base_name(node) not in _SKIPPABLE or not node.args:
            break
        node = node.args[0]
    return out


def _skip(node: fx.Node, alias: dict[fx.Node, Any]) -> bool:
    if node.op != "call_function" or base_name(node) not in _SKIPPABLE or not node.args:
        return False
    alias[node] = node.args[0]
    return True


def align(a: fx.Graph, b: fx.Graph) -> list[tuple[fx.Node, Any, Any, Any]]:
    """Walk two captures of one model together: ``(node of a, argument, value in a, value in
    b)`` for every literal that differs. Raises :class:`Unaligned` when they differ otherwise.
    Where one reads a no-op cast of a value that the other reads directly (a function's local
    ``logits.float()`` aliases the returned logits in a float32 capture), ``a`` is made to read
    what the capture with the real cast reads: the same numbers in ``a``'s dtype, the right
    ones in ``b``'s."""
    al = _Alignment()
    xs, ys = list(a.nodes), list(b.nodes)
    i = j = 0
    out: list[tuple[fx.Node, Any, Any, Any]] = []
    while i < len(xs) or j < len(ys):
        x = xs[i] if i < len(xs) else None
        y = ys[j] if j < len(ys) else None
        diffs = al.compare(x, y) if x is not None and y is not None else None
        if diffs is not None:
            assert x is not None and y is not None
            al.mapping[x] = y
            al.back[y] = x
            out += [(x, key, vx, vy) for key, vx, vy in diffs]
            i, j = i + 1, j + 1
        elif x is not None and _skip(x, al.alias_a):
            i += 1
        elif y is not None and _skip(y, al.alias_b):
            j += 1
        else:
            raise Unaligned(f"{x.format_node() if x is not None else 'the end'} against "
                            f"{y.format_node() if y is not None else 'the end'}")
    done: set[tuple[fx.Node, fx.Node]] = set()
    for user, old, chain in al.edits:
        if (user, old) not in done:  # an input read twice (mul(x, x)) is edited once
            done.add((user, old))
            out += _edit(a, al, user, old, chain)
    return out


def _edit(graph: fx.Graph, al: _Alignment, user: fx.Node, old: fx.Node, chain: list[fx.Node]) -> list[Any]:
    """Make ``user`` read ``chain`` (a value, then casts): nodes of ``graph`` as they are, casts
    of the other capture as new casts that are no-ops here (their dtype recorded as a difference,
    so that code generation writes it relative to the model's dtype where it is)."""
    cur, diffs = chain[0], []
    for n in chain[1:]:
        if n.graph is graph:
            cur = n
            continue
        val = cur.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        fmt = {k: v for k, v in named_args(n).items() if k == "memory_format" and v is not None}
        with graph.inserting_before(user):
            cast = graph.call_function(torch.ops.aten.to.dtype, (cur, val.dtype), fmt)  # self where already so
        cast.meta.update({k: v for k, v in user.meta.items() if k in ("nn_module_stack", "stack_trace")})
        cast.meta["val"] = val
        diffs.append((cast, "dtype", val.dtype, cast_dtype(n)))
        cur = cast
    if cur is not old:
        user.replace_input_with(old, cur)
    return diffs


# -- captures ---------------------------------------------------------------------------------


@dataclass
class Captures:
    """The eval-mode capture (annotated), and the training one where it differs in structure."""

    eval: TracedGraph
    train: TracedGraph | None
    dtype: torch.dtype  # the float dtype the captures were taken in
    other: torch.dtype | None  # the dtype of the comparison capture (None: none aligned)
    notes: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # submodules kept whole (:mod:`unitcheck.opaque`)


def float_dtype(model: nn.Module) -> torch.dtype:
    """The dtype a model computes in: its first float parameter's (or buffer's), else float32."""
    return next((t.dtype for t in [*model.parameters(), *model.buffers()] if t.is_floating_point()),
                torch.float32)


@contextlib.contextmanager
def _in_dtype(model: nn.Module, dtype: torch.dtype) -> Iterator[None]:
    """Float parameters and buffers in ``dtype`` for the block, each restored to its own dtype
    afterwards (float32 -> float64 -> float32 is exact)."""
    saved = {t: t.dtype for t in [*model.parameters(), *model.buffers()] if t.is_floating_point()}
    try:
        for t in saved:
            t.data = t.data.to(dtype)
        yield
    finally:
        for t, d in saved.items():
            t.data = t.data.to(d)


def _inputs_in(example_inputs: Any, dtype: torch.dtype) -> Any:
    return pytree.tree_map_only(torch.Tensor, lambda t: t.to(dtype) if t.is_floating_point() else t,
                                example_inputs)


def _annotate(node: fx.Node, key: str, name: Any, value: Any) -> None:
    node.meta.setdefault(key, {})[name] = value


def _annotate_dtype(tg: TracedGraph, model: nn.Module, example_inputs: Any, training: bool,
                    here: torch.dtype, other: torch.dtype) -> str | None:
    """Record the literals that follow the float dtype; the reason when the captures differ."""
    try:
        with _in_dtype(model, other):
            there = trace_for_inference(model, _inputs_in(example_inputs, other), dynamic=True, training=training)
    except TraceError as err:  # an inquiry: a model that runs in one dtype only still regenerates
        return f"the model does not run in {other}: {err}"
    try:
        diffs = align(tg.graph, there.graph)
    except Unaligned as err:
        return f"the {other} capture differs in structure: {err}"
    for node, name, _, value in diffs:
        _annotate(node, DTYPE_KEY, name, (other, value))
    return None


def _comparison_dtypes(here: torch.dtype) -> tuple[torch.dtype, ...]:
    """The float dtypes a second capture may be taken in, most telling first: float64 (float32
    for a float64 model), then bfloat16, where a kernel lacks the first (``_grouped_mm`` on CPU
    has no float64: a mixture of experts computing through it still has its casts compared)."""
    first = torch.float64 if here != torch.float64 else torch.float32
    return (first, torch.bfloat16) if here != torch.bfloat16 else (first,)


def _dtype_literals(graph: fx.Graph, here: torch.dtype) -> bool:
    """Does the graph hold a literal that could follow the dtype (a float dtype, a limit of
    ``finfo``)? Without one, a capture in another dtype has nothing to tell."""
    info = torch.finfo(here)
    limits = {info.min, info.max, info.eps, info.tiny}
    for node in graph.nodes:
        for v in pytree.tree_leaves((node.args, node.kwargs)):
            if (isinstance(v, torch.dtype) and v.is_floating_point) or (isinstance(v, float) and v in limits):
                return True
    return False


def _captured_again(model: nn.Module, example_inputs: Any, tg: TracedGraph, training: bool,
                    perturbed: AbstractContextManager[None]) -> tuple[str | None, TracedGraph]:
    """The capture taken again under ``perturbed``, and how it differs from ``tg`` (its ops and
    literals, or the values of its constant tensors; None when it computes the same graph)."""
    with perturbed:
        again = trace_for_inference(model, example_inputs, dynamic=True, training=training)
    try:
        align(tg.graph, again.graph)
    except Unaligned as err:
        return str(err).splitlines()[0][:160], again
    mine = {k: v.value for k, v in tg.leaves.items() if v.kind == "constant"}
    for k, v in again.leaves.items():
        if v.kind == "constant" and isinstance(v.value, torch.Tensor) and isinstance(mine.get(k), torch.Tensor) \
                and not (v.value.shape == mine[k].shape and torch.equal(v.value, mine[k])):
            return f"the constant {k} holds other values", again
    return None, again


@contextlib.contextmanager
def _host_generators_advanced() -> Iterator[None]:
    """numpy's and Python's global generators one draw further on, put back afterwards."""
    import random

    np: Any
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - then only Python's generator can have drawn
        np = None
    saved = random.getstate(), (np.random.get_state() if np is not None else None)
    random.random()
    if np is not None:
        np.random.random()
    try:
        yield
    finally:
        random.setstate(saved[0])
        if np is not None:
            np.random.set_state(saved[1])


@contextlib.contextmanager
def _state_set(model: nn.Module, values: dict[tuple[str, str], Any]) -> Iterator[None]:
    """The model's module attributes set to ``values``, put back afterwards."""
    modules = dict(model.named_modules(remove_duplicate=False))
    saved = set_attributes(modules, values)
    try:
        yield
    finally:
        set_attributes(modules, saved)


def _refuse_host_draws(model: nn.Module, example_inputs: Any, tg: TracedGraph, training: bool) -> None:
    """A draw from numpy's or Python's generator that reaches the graph is a constant there
    (wav2vec2's SpecAugment masks): generated code would apply the same mask at every step.
    Captured again one draw further on, such a graph differs; a draw the graph does not use
    (MusicGen's LayerDrop draw, with no layer drop) leaves it the same."""
    if not tg.host_draws:
        return
    why, _ = _captured_again(model, example_inputs, tg, training, _host_generators_advanced())
    if why is not None:
        drawn = " and ".join(HOST_GENERATORS[d] for d in tg.host_draws)
        raise TraceError(f"cannot regenerate {type(model).__name__}: its forward draws from {drawn} random "
                         f"generator, and the graph holds the draw ({why}); generated code would repeat it at "
                         "every call (draws from torch's generator are kept)")


def _steady(model: nn.Module, example_inputs: Any, tg: TracedGraph, training: bool, notes: list[str]) -> TracedGraph:
    """The capture of the calls after the first, for a forward that sets attributes on its
    modules: captured again with them as the first call left them. The same graph when the state
    comes from the input alone (Swin's shift size for a window that covers the image); the later
    calls' graph when the first call set the model up (BigBird switches to full attention for a
    short input and re-initialises its attention, drawing from torch's generator once). Refused
    when the first call also updated parameters or buffers in place, which the captures cannot
    replay (RWKV rescales its weights on its first eval call and records that it did), or when
    the state keeps changing."""
    if not tg.state_after:
        return tg
    why, again = _captured_again(model, example_inputs, tg, training, _state_set(model, tg.state_after))
    if why is None:
        return tg
    shown = "; ".join(tg.state_changes)
    if tg.mutations or again.state_changes:
        raise TraceError(f"cannot regenerate {type(model).__name__}: its forward sets its own state ({shown[:300]}), "
                         f"and the next call computes another graph ({why}), from weights the first call updated "
                         "in place or from state that keeps changing")
    notes.append(f"the model sets its own state on its first call ({shown[:200]}), after which its calls compute "
                 f"another graph ({why}); the generated module computes that later graph")
    return again


def _kept_notes(tg: TracedGraph) -> list[str]:
    """The capture's notes that concern the generated module: sizes it fixes, branches it asserts
    or keeps."""
    return [n for n in tg.notes
            if any(kept in n for kept in (SIZES_FIXED, FINITE_PATH, DRAWS_KEPT, STATE_PATH, NOT_CHECKPOINTED))]


def capture(model: nn.Module, example_inputs: Any) -> Captures:
    """Capture in eval mode (dynamic sizes), and again in training mode and in another float
    dtype to learn which literals follow them. Recurrent layers and weight normalisation stay
    whole: generated code calls their kernels. Libraries take their eager paths
    (:mod:`unitcheck.eager_paths`) where that captures with export; otherwise (a decision on the
    user's input, a capture that fails) the export path is captured. Draws from numpy's
    generator are captured as ops that draw (:mod:`unitcheck.host_draws`). A submodule whose
    forward branches on its data is kept whole (:mod:`unitcheck.opaque`): the generated module
    calls it."""
    first: TraceError | None = None
    for fixed in (False, True):  # sizes kept modules decide: their own, else the example's
        try:
            res, kept = _capture_keeping(model, example_inputs, fixed)
        except TraceError as err:
            if fixed or not getattr(err, "kept", None):
                raise
            first = err
            continue
        res.kept = kept
        if kept:
            classes = sorted({type(m).__name__ for name, m in model.named_modules() if name in kept}
                             | {k.rpartition(":")[2] + "()" for k in kept if k.startswith(opaque.FUNCTION)})
            res.notes.append(f"{len(kept)} module(s) of class {', '.join(classes)} branch on their data (or hold one "
                             "that does) and are kept whole: the generated module calls them "
                             f"({', '.join(kept[:3])}{'...' if len(kept) > 3 else ''})")
        if fixed:
            res.notes.append(f"{SIZES_FIXED}: the sizes of the kept modules' results that none of their arguments' "
                             "sizes gives (with sizes of their own, the capture failed: "
                             f"{str(first).splitlines()[0][:160]}): other inputs may need other sizes there")
        return res
    raise AssertionError("unreachable")


def _capture_keeping(model: nn.Module, example_inputs: Any, fixed: bool) -> tuple[Captures, list[str]]:
    """Capture, keeping whole each submodule whose class's method raised a data-dependent
    branch, until the capture succeeds; a failure carries the modules kept (``err.kept``)."""
    kept: list[str] = []
    failed: TraceError | None = None  # the failure that made the last modules kept
    collecting: list[tuple[str, str]] = []  # (ancestor kept for what its layers record, the note)
    while True:
        try:
            with opaque.kept(model, kept, normalise_inputs(example_inputs), fixed), uncallable_functions() as found:
                res = _capture_paths(model, example_inputs)
            more = _outside(opaque.function_owners(model, found, set(kept)), kept)
            if not more:
                res.notes += [note for instead, note in collecting if instead in kept]
                return res, kept
            kept, failed = kept + more, TraceError(
                f"cannot regenerate {type(model).__name__}: {more[0]} applies an autograd.Function to arguments "
                "generated code cannot write (a module or a list), and its forward alone would lose the "
                "function's hand-written backward")
        except TraceError as err:
            more = _outside(opaque.owners(model, err, set(kept)), kept) if "data-dependent" in str(err) else []
            if not more or len(kept) >= _MAX_KEPT:
                err.kept = kept  # type: ignore[attr-defined]
                raise
            kept, failed = kept + more, err
        except opaque.Unkeepable as why:
            assert failed is not None
            if why.instead is None or why.instead in kept or len(kept) >= _MAX_KEPT:
                raise TraceError(f"{failed}; {why}", failed.location) from failed
            # the ancestor that collects what the module's layers record is kept in its place
            collecting.append((why.instead, f"{why.instead} is kept whole in place of {why.path}: hooks on "
                                             f"{why.path}'s layers record outputs that {why.instead}'s own call collects"))
            kept = [p for p in kept if not opaque.within(p, why.instead)] + [why.instead]


_MAX_KEPT = 64  # kept modules before a capture gives up


def _outside(paths: list[str], kept: list[str]) -> list[str]:
    """The paths not inside a module kept already (its whole call is one op)."""
    return [p for p in paths if not any(opaque.within(p, k) for k in kept)]


def _capture_paths(model: nn.Module, example_inputs: Any) -> Captures:
    with kept_whole(FUSED_KERNEL_OPS), host_draws.routed(model):
        if not eager_paths.loaded():  # no library loaded that computes otherwise when compiled
            return _capture(model, example_inputs)
        refused: eager_paths.EagerPathRefused | None = None
        with eager_paths.eager_paths():
            try:
                res: Captures | None = _capture(model, example_inputs)
            except eager_paths.EagerPathRefused as why:
                res, refused = None, why
            except Exception:  # the export path's capture reports the failure, if it fails too
                res = None
        if res is not None and res.eval.method == "export":
            return res
        res = _capture(model, example_inputs)
        if refused is not None:
            res.notes.append(f"{eager_paths.LIBRARY} computes otherwise in eager where an input's values decide "
                             f"({refused}; an attention mask without padding is dropped before attention, say): the "
                             "generated module holds the path a compiled model takes, equal to the model's in "
                             "value, and to rounding only, not bit for bit, on inputs that take the other path")
        return res


def _capture(model: nn.Module, example_inputs: Any) -> Captures:
    tg = trace_for_inference(model, example_inputs, dynamic=True)
    here = float_dtype(model)
    res = Captures(tg, None, here, None, _kept_notes(tg))
    if tg.method != "export":
        res.notes.append("symbolic trace: training mode and dtype are those of the capture")
        return res
    train = trace_for_inference(model, example_inputs, dynamic=True, training=True)
    res.notes += [n for n in _kept_notes(train) if n not in res.notes]
    _refuse_host_draws(model, example_inputs, tg, False)
    _refuse_host_draws(model, example_inputs, train, True)
    tg = res.eval = _steady(model, example_inputs, tg, False, res.notes)
    train = _steady(model, example_inputs, train, True, res.notes)
    try:
        for node, name, _, value in align(tg.graph, train.graph):
            _annotate(node, TRAIN_KEY, name, value)
    except Unaligned as err:
        res.train = train
        res.notes.append(f"training mode computes a different graph ({str(err).splitlines()[0][:160]}): "
                         "the generated module keeps both")
    others = _comparison_dtypes(here)
    graphs = [tg.graph] + ([res.train.graph] if res.train is not None else [])
    if not any(_dtype_literals(g, here) for g in graphs):
        res.other = others[0]  # nothing follows the dtype: nothing to compare
        return res
    whys: list[str] = []
    for other in others:
        why = _annotate_dtype(tg, model, example_inputs, False, here, other)
        if why is None and res.train is not None:
            why = _annotate_dtype(res.train, model, example_inputs, True, here, other)
        if why is None:
            res.other = other
            return res
        whys.append(why.splitlines()[0][:200])
        for g in graphs:  # what the failed comparison recorded
            for node in g.nodes:
                node.meta.pop(DTYPE_KEY, None)
    res.notes.append(f"no literal follows the dtype ({'; '.join(whys)}): casts from the capture's dtype to another "
                     "float dtype are dropped, and what is made in the capture's dtype takes the parameters' "
                     "dtype, so the model runs in its parameters' dtype")
    return res
