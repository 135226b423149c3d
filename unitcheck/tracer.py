"""Module + example inputs -> FX graph whose leaves are named (parameters, buffers, inputs).

Non-strict ``torch.export`` captured all 17 models of the tracing survey (shared/TRACING.md), so
it comes first, lowered with the default decomposition table minus the high-level ops whose unit
rules matter (linear, attention, norms, convs, activations, losses). Where export fails, symbolic
tracing through every submodule (parameters appear as ``get_attr`` leaves, stack traces recorded)
is the fallback, noted as UC903. A model neither can capture raises one :class:`TraceError` that
names the construct and the user's source line.

>>> g = trace(model, (idx, targets))                       # doctest: +SKIP
>>> g.method, g.leaves["p_lm_head_weight"].name            # doctest: +SKIP
('export', 'transformer.wte.weight')
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import io
import logging
import operator
import pickle
import re
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.fx as fx
import torch.fx.traceback as fx_traceback
from torch import nn
from torch.utils import _pytree as pytree

from . import eager_paths, fake_kernels, flex, sequence_data
from .diagnostics import Location
from .draws import GUARDED, NO_GRAD_CUT, RANDOM, READS, kept_values, mark_layer_drops, random_ops
from .errors import UnitcheckError
from .fxutil import (
    LEAF_KEY,
    base_name,
    defines_forward,
    frames_from_text,
    innermost_line,
    restore_module_paths,
    user_frame,
)
from .quiet import quiet_loggers
from .scoped import scoped

__all__ = ["TraceError", "Leaf", "TracedGraph", "trace", "KEEP_OPS", "normalise_inputs", "to_meta"]

aten = torch.ops.aten


class TraceError(UnitcheckError):
    """The model could not be captured; the message names the construct and the source line."""

    def __init__(self, message: str, location: Location | None = None) -> None:
        super().__init__(message)
        self.location = location


# High-level ops kept out of the decomposition: their unit rules say something the decomposed
# pieces cannot (attention temperature, normaliser scale invariance, a loss on logits), or
# their backward rounds differently from the pieces'.
_KEEP_NAMES = (
    "linear.default",
    "scaled_dot_product_attention.default",
    "layer_norm.default",
    "rms_norm.default",
    "group_norm.default",
    "conv1d.default",
    "conv2d.default",
    "conv3d.default",
    "conv1d.padding",
    "conv2d.padding",
    "matmul.default",
    "silu.default",
    "gelu.default",
    "softplus.default",
    "mish.default",
    "hardswish.default",
    "hardsigmoid.default",
    "nll_loss_forward.default",
    "logsumexp.default",
    # ops whose eager backward is a kernel of its own, which the decomposed pieces' autograd
    # does not reproduce bit for bit (generated code calls what the model called)
    "_prelu_kernel.default",
    "reflection_pad1d.default",
    "reflection_pad2d.default",
    "reflection_pad3d.default",
    "replication_pad1d.default",
    "replication_pad2d.default",
    "replication_pad3d.default",
    "mse_loss.default",
    "l1_loss.default",
    "smooth_l1_loss.default",
    "huber_loss.default",
    "binary_cross_entropy_with_logits.default",
    # elementwise ops and reductions whose decompositions round differently (found by
    # tests/rewrite/test_faithful.py's scan of lowered captures)
    "glu.default",
    "log_sigmoid.default",
    "log_sigmoid_forward.default",
    "celu.default",
    "std.default",
    "std.dim",
    "std.correction",
    "std_mean.correction",
    "addcmul.default",
    "addcdiv.default",
    "lerp.Scalar",
    "lerp.Tensor",
    "kl_div.default",
    "binary_cross_entropy.default",
    "logaddexp.default",
    "xlogy.Tensor",
    "xlogy.Scalar_Self",
    "xlogy.Scalar_Other",
    "sinc.default",
    "logit.default",
    "special_entr.default",
    "renorm.default",
    "mv.default",
    "dot.default",
    "vdot.default",
    "trace.default",
    # ranges: CHMv2's depth bins (arange, scale and shift round some points otherwise)
    "linspace.default",
    "linspace.Tensor_Tensor",
    "linspace.Tensor_Scalar",
    "linspace.Scalar_Tensor",
    "logspace.default",
    "logspace.Tensor_Tensor",
    "logspace.Tensor_Scalar",
    "logspace.Scalar_Tensor",
    # resampling: interpolation and adaptive pooling (LW-DETR's bicubic position-table resize)
    "upsample_bicubic2d.vec",
    "_upsample_bicubic2d_aa.vec",
    "_upsample_bilinear2d_aa.vec",
    "upsample_linear1d.default",
    "upsample_linear1d.vec",
    "upsample_trilinear3d.vec",
    "upsample_nearest1d.default",
    "upsample_nearest1d.vec",
    "upsample_nearest2d.default",
    "upsample_nearest3d.default",
    "upsample_nearest3d.vec",
    "_upsample_nearest_exact1d.default",
    "_upsample_nearest_exact1d.vec",
    "_upsample_nearest_exact2d.default",
    "_upsample_nearest_exact2d.vec",
    "_upsample_nearest_exact3d.default",
    "_upsample_nearest_exact3d.vec",
    "adaptive_avg_pool2d.default",
    "im2col.default",
    "col2im.default",
)


def _resolve(qualified: str) -> Any:
    packet, overload = qualified.split(".")
    return getattr(getattr(aten, packet, None), overload, None)


KEEP_OPS: tuple[Any, ...] = tuple(op for op in map(_resolve, _KEEP_NAMES) if op is not None)


@dataclass
class Leaf:
    """A graph input: a learnable parameter, a buffer, a lifted constant or a user input."""

    kind: Literal["param", "buffer", "constant", "input"]
    name: str
    value: Any


@dataclass
class TracedGraph:
    """An FX graph plus the names and values of its leaves."""

    gm: fx.GraphModule
    method: Literal["export", "fx"]
    leaves: dict[str, Leaf]  # keyed by the leaf node's name
    model: nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    trace_seconds: float = 0.0
    # flat output position -> qualified name of the buffer or parameter it updates (functionalised
    # in-place updates: batch-norm running statistics in training mode, RWKV's rescaled weights);
    # other outputs are the user's
    mutations: dict[int, str] = field(default_factory=dict)
    # flat output position -> the user input (placeholder name) it updates in place (``ids.clamp_``)
    input_mutations: dict[int, str] = field(default_factory=dict)
    out_spec: Any = None  # the pytree structure of the user's outputs (export only)
    # Python attributes the model set on itself while captured ("rwkv.layers_are_rescaled: False
    # -> True"), since put back: the graph holds the path of that one call
    state_changes: list[str] = field(default_factory=list)
    state_after: dict[tuple[str, str], Any] = field(default_factory=dict)  # (module, attribute): value set
    # host random generators the forward drew from ("numpy", "random"): the graph holds one draw
    host_draws: list[str] = field(default_factory=list)
    # symbolic input size -> the range a branch on it narrowed it to (``if x.size(1) > 8``: (9,
    # None)); the graph holds that branch only, so generated code checks the range (export only)
    size_ranges: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    # the lines where a random draw decides a branch (LayerDrop) -> the value the graph holds, on
    # which every layer runs; the nodes each draw guards are marked (unitcheck.draws)
    draw_lines: dict[str, int] = field(default_factory=dict)
    lowered: bool = False  # decomposed after export (see _needs_lowering)

    def __post_init__(self) -> None:
        for n in self.gm.graph.nodes:  # graph walks tell parameters from data (graphs.stream_source)
            if n.op == "placeholder" and n.name in self.leaves:
                n.meta[LEAF_KEY] = self.leaves[n.name].kind

    @property
    def graph(self) -> fx.Graph:
        return self.gm.graph

    def leaf_nodes(self) -> Iterator[fx.Node]:
        for n in self.graph.nodes:
            if n.name in self.leaves:
                yield n

    def output_nodes(self) -> list[Any]:
        out = next(n for n in reversed(self.graph.nodes) if n.op == "output")
        return pytree.tree_leaves(out.args[0])

    def compute_nodes(self) -> list[fx.Node]:
        return [n for n in self.graph.nodes if n.op in ("call_function", "call_method", "call_module")]


# -- capture --------------------------------------------------------------------------------


# ops whose CPU kernels round otherwise than the decomposition export lowers them to, so code
# generation keeps them whole (analysis lowers them: no unit rule): recurrent layers, and weight
# normalisation (a fused kernel for the first or last dimension: wav2vec2's positional convolution)
FUSED_KERNEL_OPS: tuple[Any, ...] = tuple(op for op in map(_resolve, (
    "lstm.input", "lstm.data", "gru.input", "gru.data", "rnn_tanh.input", "rnn_tanh.data", "rnn_relu.input",
    "rnn_relu.data", "_weight_norm.default")) if op is not None)
_KEPT_WHOLE: contextvars.ContextVar[tuple[Any, ...]] = contextvars.ContextVar("kept_whole", default=())


def kept_whole(ops: tuple[Any, ...]) -> contextlib.AbstractContextManager[None]:
    """Captures inside keep ``ops`` whole when they lower a graph (code generation's: the model's
    own kernels), besides :data:`KEEP_OPS`."""
    return scoped(_KEPT_WHOLE, ops)


def _decomposition_table() -> Any:
    table = torch.export.default_decompositions()
    for op in (*KEEP_OPS, *_KEPT_WHOLE.get()):
        table.pop(op, None)
    return table


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Export logs warnings and graph dumps on failure; the TraceError says what matters."""
    names = [n for n in logging.root.manager.loggerDict if n == "torch" or n.startswith("torch.")]
    # export prints the partial graph to stderr when it fails; the TraceError says what matters
    with quiet_loggers(["torch", *names]), contextlib.redirect_stderr(io.StringIO()):
        yield


@contextlib.contextmanager
def meta_autocast() -> Iterator[list[str]]:
    """Open ``torch.autocast`` regions on the meta device as CPU regions while capturing.

    Rotary-embedding code guards a float32 computation with
    ``torch.autocast(x.device.type, enabled=False)``; autocast has no meta backend and raises
    "unsupported scalarType" before the region is entered, so a model built on meta (the default
    for static checks) could not be traced at all. On meta tensors a CPU autocast region changes
    nothing, so the captured graph is the one a CPU build gives. Yields the list of devices that
    were rewritten (empty when nothing was), for the trace's notes."""
    cls = torch.amp.autocast_mode.autocast
    original = cls.__init__
    rewritten: list[str] = []

    def init(self: Any, device_type: str, *args: Any, **kwargs: Any) -> None:
        if device_type == "meta":
            rewritten.append(device_type)
            device_type = "cpu"
        original(self, device_type, *args, **kwargs)

    cls.__init__ = init  # type: ignore[method-assign]
    try:
        yield rewritten
    finally:
        cls.__init__ = original  # type: ignore[method-assign]


@contextlib.contextmanager
def _module_casts_kept() -> Iterator[None]:
    """``module.to(dtype)`` inside ``forward`` (Switch Transformers casts its router to its own
    dtype on every call) swaps each parameter for a converted one, which a capture's fake
    parameters refuse ("Couldn't swap Linear.weight"). A cast to the dtype and device every
    tensor of the module already has changes nothing in eager, so in a capture it returns the
    module as it is; any other cast runs as before."""
    original = nn.Module.to

    def to(self: nn.Module, *args: Any, **kwargs: Any) -> nn.Module:
        try:
            device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        except Exception:  # let the real method say what is wrong with the arguments
            return original(self, *args, **kwargs)
        tensors = [*self.parameters(), *self.buffers()]
        if all((dtype is None or not (t.is_floating_point() or t.is_complex()) or t.dtype == dtype)
               and (device is None or t.device == device) for t in tensors):
            return self
        return original(self, *args, **kwargs)

    nn.Module.to = to  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        nn.Module.to = original  # type: ignore[method-assign]


@contextlib.contextmanager
def _key_value_caches_off(model: nn.Module) -> Iterator[None]:
    """A transformers model whose config says ``use_cache`` (Llama's default, and every
    checkpoint's) returns a ``DynamicCache`` beside its outputs, which export cannot flatten, and
    a graph has no use for: the cache holds the keys and values the graph computes. While
    captured, each config the model's modules hold says ``use_cache = False``; after, what it said."""
    configs = {id(c): c for m in model.modules() if (c := getattr(m, "config", None)) is not None
               and getattr(c, "use_cache", None) is True}
    for c in configs.values():
        c.use_cache = False
    try:
        yield
    finally:
        for c in configs.values():
            c.use_cache = True


@contextlib.contextmanager
def _distribution_checks_off() -> Iterator[None]:
    """``torch.distributions`` checks a distribution's parameters when it is built (BLT's patcher
    builds a ``Categorical`` from its logits on every call): ``constraint.check(v).all()``, a
    branch on values that export cannot follow, which only raises for invalid parameters. While
    captured the checks are off, as ``Distribution.set_default_validate_args(False)`` turns them
    off; the graph computes what the model computes for valid parameters."""
    from torch.distributions import Distribution

    saved = Distribution._validate_args
    Distribution.set_default_validate_args(False)
    try:
        yield
    finally:
        Distribution.set_default_validate_args(saved)


# leaves export can return: anything else in a model's output (an HF encoder's DynamicCache, a
# distribution object) is no tensor export knows how to flatten
_OUTPUT_LEAVES = (torch.Tensor, int, float, bool, complex, str, type(None), torch.SymInt, torch.SymFloat,
                  torch.SymBool, torch.dtype, torch.device, torch.Size)


@contextlib.contextmanager
def _unflattenable_outputs_dropped(model: nn.Module, dropped: list[str]) -> Iterator[None]:
    """The model's forward, for the span of a capture, returns None in place of each output
    export cannot flatten (DiffusionGemma's encoder returns the DynamicCache it fills): state
    the model hands back, not a value the analysis follows. Their types go to ``dropped``."""
    had = "forward" in model.__dict__
    forward = model.forward

    def keep(x: Any) -> Any:
        if isinstance(x, _OUTPUT_LEAVES):
            return x
        dropped.append(type(x).__name__)
        return None

    @functools.wraps(forward)  # export binds inputs by the forward's signature
    def returning_known(*args: Any, **kwargs: Any) -> Any:
        return pytree.tree_map(keep, forward(*args, **kwargs))

    model.forward = returning_known  # type: ignore[method-assign]
    try:
        yield
    finally:
        if had:
            model.forward = forward  # type: ignore[method-assign]
        else:
            del model.forward


@contextlib.contextmanager
def _data_as_detach() -> Iterator[None]:
    """``weight.data.clamp_(...)`` in ``forward`` (Gemma 3n clips its AltUp coefficients in
    training mode): ``.data`` makes an alias autograd does not see, which export lifts as a fake
    constant ("We found a fake tensor in the exported program constant's list"). In a capture it
    is ``detach()``, the same alias made by an op, so the in-place update reaches the parameter:
    lowering makes it a parameter mutation, which generated code writes back."""
    original: Any = torch.Tensor.data  # the C descriptor torch.Tensor inherits (mypy sees a tensor)
    torch.Tensor.data = property(lambda self: self.detach(), original.__set__)  # type: ignore[assignment,method-assign]
    try:
        yield
    finally:
        del torch.Tensor.data  # inherited again, as before


@contextlib.contextmanager
def _mode(model: nn.Module, training: bool) -> Iterator[None]:
    """Every submodule in one mode for the capture (eval unless asked), restored afterwards."""
    flags = {m: m.training for m in model.modules()}
    model.train(training)
    try:
        yield
    finally:
        for m, t in flags.items():
            m.training = t


_SCALARS = (bool, int, float, str, type(None))


def _scalar_state(modules: dict[str, nn.Module]) -> dict[tuple[str, str], Any]:
    return {(name, k): v for name, m in modules.items() for k, v in vars(m).items()
            if k != "training" and isinstance(v, _SCALARS)}


UNSET = object()  # an attribute a module does not hold itself


def set_attributes(modules: dict[str, nn.Module], values: dict[tuple[str, str], Any]) -> dict[tuple[str, str], Any]:
    """Set each (module, attribute) to its value (``UNSET``: remove it from the module), and
    return what each held before, so that calling this again with the result puts them back."""
    saved = {}
    for (name, attr), value in values.items():
        module = modules[name]
        saved[(name, attr)] = vars(module).get(attr, UNSET)
        if value is UNSET:
            if attr in vars(module):
                delattr(module, attr)
        else:
            setattr(module, attr, value)
    return saved


@contextlib.contextmanager
def _python_state_kept(model: nn.Module, changes: list[str], after: dict[tuple[str, str], Any]) -> Iterator[None]:
    """List in ``changes`` the plain Python attributes (flags, counters, cached lengths) that the
    model's forward sets on its modules, as they stand when a captured forward returns, and put
    back any a capture left changed. RWKV's first eval call rescales its weights in place and sets
    ``layers_are_rescaled``: the graph holds the rescaling, which the model itself does once."""
    modules = dict(model.named_modules(remove_duplicate=False))
    before = _scalar_state(modules)
    hooks = {id(m): {d: set(getattr(m, d)) for d in _HOOK_DICTS} for m in modules.values()}

    def changed() -> dict[tuple[str, str], Any]:
        return {key: v for key, v in _scalar_state(modules).items() if key not in before or before[key] != v}

    def record(*_: Any) -> None:
        for (name, k), v in changed().items():
            after[(name, k)] = v
            was = f"{before[(name, k)]!r} -> " if (name, k) in before else "set to "
            line = f"{name + '.' if name else ''}{k}: {was}{v!r}"
            if line not in changes:
                changes.append(line)

    handle = model.register_forward_hook(record)
    try:
        yield
    finally:
        handle.remove()  # and put back what a capture left changed
        left = changed()
        if any(set(getattr(m, d)) - keys for m in modules.values() for d, keys in hooks[id(m)].items()):
            # but for a setup that registered hooks: transformers marks a model hooked once it
            # installed the hooks that record hidden states, and with the mark taken away but not
            # the hooks, the next call installed a second set (LLaVA-NeXT's vision tower then
            # returned its hidden states twice over); the hooks and the attributes the setup
            # made stay together
            left = {key: v for key, v in left.items() if key in before}
        set_attributes(modules, {key: before.get(key, UNSET) for key in left})


# the hook tables of an nn.Module, keyed by handle id
_HOOK_DICTS = ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks",
               "_forward_pre_hooks_with_kwargs", "_backward_hooks", "_backward_pre_hooks")


HOST_GENERATORS = {"numpy": "numpy's", "random": "Python's"}  # host_draws entries, as messages name them


def _host_rng_states() -> dict[str, Any]:
    """Python's and (where installed) numpy's global generators, to tell whether a forward drew
    from them: such a draw (wav2vec2's SpecAugment masks come from ``np.random``) reaches the
    graph as a constant."""
    import random

    states: dict[str, Any] = {"random": random.getstate()}
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy comes with torch's usual installs
        return states
    states["numpy"] = pickle.dumps(np.random.get_state())  # holds an array: compare the bytes
    return states


def _canonical_names(model: nn.Module) -> dict[int, str]:
    """First qualified name of every parameter and buffer tensor (tied weights share one)."""
    names: dict[int, str] = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), n)
    for n, b in model.named_buffers(remove_duplicate=False):
        names.setdefault(id(b), n)
    return names


def normalise_inputs(example_inputs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if isinstance(example_inputs, dict):
        return (), dict(example_inputs)
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,), {}
    if isinstance(example_inputs, list):
        example_inputs = tuple(example_inputs)
    if (
        isinstance(example_inputs, tuple)
        and len(example_inputs) == 2
        and isinstance(example_inputs[0], tuple)
        and isinstance(example_inputs[1], dict)
    ):
        return example_inputs[0], dict(example_inputs[1])
    if isinstance(example_inputs, tuple):
        return example_inputs, {}
    raise TypeError(
        "example inputs must be a tensor, a tuple of positional inputs, a dict of keyword inputs "
        f"or an (args, kwargs) pair; got {type(example_inputs).__name__}"
    )


def _unaliased(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The example inputs with every repeated tensor cloned. Export traces aliased inputs as one
    value, so a factory returning ``(x, x)`` as ``(idx, targets)`` would give a graph whose
    ``idx`` is never read (its uses go to ``targets``): each argument must be its own input."""
    seen: set[int] = set()

    def fresh(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        key = id(t) if t.device.type == "meta" else t.untyped_storage().data_ptr()
        if key in seen and (t.device.type == "meta" or t.numel() > 0):
            return t.clone()
        seen.add(key)
        return t

    return pytree.tree_map(fresh, args), pytree.tree_map(fresh, kwargs)


DETACH_KEY = "unitcheck_detach"  # node.meta["custom"]: an ``alias`` lowering made of a ``detach``


def _mark_detaches(graph: fx.Graph) -> None:
    """Lowering to the inference IR makes ``detach`` an ``alias`` (no autograd there); the mark
    survives it, so that generated code detaches again (XLNet's returned memory)."""
    for n in graph.nodes:
        if n.target is aten.detach.default:
            n.meta.setdefault("custom", {})[DETACH_KEY] = True


NO_GRAD_KEY = "unitcheck_no_grad"  # node.meta["custom"]: computed inside a ``torch.no_grad()`` region


def _region_body(node: fx.Node) -> fx.GraphModule | None:
    """The subgraph a higher-order wrapper (a grad-mode or autocast region) runs, if ``node`` is one."""
    at = {torch.ops.higher_order.wrap_with_set_grad_enabled: 1, torch.ops.higher_order.wrap_with_autocast: 4}
    i = at.get(node.target)  # type: ignore[call-overload]
    arg = node.args[i] if i is not None and len(node.args) > i else None
    body = getattr(node.graph.owning_module, str(arg.target), None) if isinstance(arg, fx.Node) else None
    return body if isinstance(body, fx.GraphModule) else None


def _regions_keep_meta(graph: fx.Graph) -> None:
    """Export wraps a ``torch.no_grad()`` or ``torch.autocast`` region in a higher-order op, and
    lowering inlines it by calling the region's graph: every op would take the region's metadata
    (the model that opened it, a line of generated code), so an autocast in ``forward`` put every
    finding at ``<root>`` and hid every residual add. Each region's graph runs node by node
    instead, and each inlined op keeps its own module path and source line (HRM's blocks inside
    a no-grad region)."""
    for n in graph.nodes:
        body = _region_body(n)
        if body is not None:
            _regions_keep_meta(body.graph)
            body.forward = functools.partial(_run_keeping_meta, body)  # type: ignore[method-assign]


def _mark_no_grad_regions(graph: fx.Graph) -> None:
    """Every node of a ``torch.no_grad()`` region is marked before lowering inlines it, so
    :func:`_cut_no_grad_regions` can detach what leaves the region (HRM's early cycles)."""
    for n in graph.nodes:
        if n.target is not torch.ops.higher_order.wrap_with_set_grad_enabled or n.args[0] is not False:
            continue
        n.meta.setdefault("custom", {})[NO_GRAD_KEY] = True
        body = _region_body(n)
        if body is None:
            continue
        for inner in body.graph.nodes:
            if inner.op == "call_function":
                inner.meta["custom"] = {**(inner.meta.get("custom") or {}), NO_GRAD_KEY: True}
        _mark_no_grad_regions(body.graph)


def _placeholders_unannotated(gm: fx.GraphModule) -> None:
    """torch's own ``torch._dynamo.disable`` marks dropped from the inputs of every graph (a
    ``flex_attention`` score function's too): export records them with the name of the call
    that made the node, and lowering, which renames placeholders, refuses a name recorded twice
    ("Mismatch in custom metadata for key _torchdynamo_disable_method"). Nothing reads them."""
    for module in gm.modules():
        if isinstance(module, fx.GraphModule):
            for n in module.graph.find_nodes(op="placeholder"):
                custom = n.meta.get("custom")
                if custom:
                    n.meta["custom"] = {k: v for k, v in custom.items() if not k.startswith("_torchdynamo_disable")}


def _run_keeping_meta(gm: fx.GraphModule, *args: Any) -> Any:
    """``gm(*args)`` through an interpreter: under ``preserve_node_meta`` each op traced from it
    takes its node's metadata."""
    return fx.Interpreter(gm).run(*args)


def _cut_no_grad_regions(graph: fx.Graph) -> None:
    """A float value computed in a no-grad region is detached where a node outside reads it:
    the gradient eager autograd never records stays cut in the inlined graph."""
    def inside(n: fx.Node) -> bool:
        return bool((n.meta.get("custom") or {}).get(NO_GRAD_KEY))

    order = {n: i for i, n in enumerate(graph.nodes)}
    for n in list(order):
        val = n.meta.get("val")
        if not inside(n) or not (isinstance(val, torch.Tensor) and val.is_floating_point()):
            continue
        outside = sorted((u for u in n.users if not inside(u)), key=lambda u: order.get(u, len(order)))
        if not outside:
            continue
        # placed where the value leaves the region (before its first reader outside), so that its
        # place does not depend on which node the region ended with (a layer LayerDrop may skip)
        with graph.inserting_before(outside[0]):
            cut = graph.call_function(aten.detach.default, (n,))
        cut.meta.update({k: v for k, v in n.meta.items() if k != "custom"})
        cut.meta[NO_GRAD_CUT] = True
        for u in outside:
            u.replace_input_with(n, cut)


def _needs_lowering(graph: fx.Graph, lower_op: Callable[[Any], bool] | None) -> bool:
    """Export's training IR already has the high-level ops the rules want (and lowering it costs
    as much as the export itself). Lower only when it holds a mutating op, which
    functionalisation removes, a higher-order wrapper (an autocast or grad-mode region), which
    lowering inlines so that every consumer sees plain ops, or an op ``lower_op`` asks for (one
    with no unit rule, which decomposition may explain)."""
    for n in graph.nodes:
        if n.op != "call_function":
            continue
        t = n.target
        if isinstance(t, torch._ops.OpOverload) and t._schema.is_mutable:
            return True
        if isinstance(t, torch._ops.HigherOrderOperator):
            return True
        if lower_op is not None and lower_op(t):
            return True
    return False


def _dynamic_spec(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """Every dimension of every tensor input left to export (``Dim.AUTO``): the graph keeps
    symbolic sizes wherever the model allows, so generated code runs at any batch and length.
    None (static sizes) where an input binds to ``**kwargs`` (SAM3-Lite's text model is given
    pixel values it does not name): export rejects any spec for those (pytorch#150022)."""
    import inspect

    sig = inspect.signature(model.forward)
    bound = sig.bind(*args, **kwargs)
    if any(sig.parameters[name].kind is inspect.Parameter.VAR_KEYWORD and value for name, value in bound.arguments.items()):
        return None
    return {name: _spec_of(value) for name, value in bound.arguments.items()}


def _spec_of(value: Any) -> Any:
    """One input's spec: a dict or list input's shaped like it (export refuses None for those, and the
    capture fell back to symbolic tracing), anything else but a tensor static. A floating input
    of four or more dimensions (an image, a video) keeps every size but the batch: the model's
    patch grid, position table and windows fix them, and symbolic image sizes cost export
    minutes of symbolic algebra (Swin's padded windows: over 300 s against 16 s)."""
    if isinstance(value, torch.Tensor):
        dims = range(1 if value.is_floating_point() and value.dim() >= 4 else value.dim())
        return {i: torch.export.Dim.AUTO for i in dims}
    if isinstance(value, dict):
        return {k: _spec_of(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
        return type(value)(_spec_of(v) for v in value)  # a pyramid's levels (SAM 3's feature maps)
    return None


class _ValueSpecialised(Exception):
    """Export with real values read a value computed from weights or float inputs (an activation):
    the graph would hold one branch of the model's control flow, not the model."""


class _DrawSpecialised(_ValueSpecialised):
    """Export with real values read a random draw (LayerDrop): symbolic tracing would decide it
    silently as well, so no later method is tried."""


# ops whose result depends on their tensor arguments' shapes, not on their values
_SHAPE_ONLY = {"sym_size", "sym_numel", "sym_stride", "sym_storage_offset", "zeros_like", "ones_like", "empty_like",
               "full_like", "new_zeros", "new_ones", "new_empty", "new_full", "size", "dim", "numel"}


# ops that test values for being finite, and the boolean ops that combine such tests into a
# branch condition (``if torch.isinf(h).any() or torch.isnan(h).any()``)
_FINITE_TESTS = {"isfinite", "isinf", "isnan", "isposinf", "isneginf"}
_KEEPS = {"any", "all", "item", "_local_scalar_dense", "to", "_to_copy", "view", "reshape", "squeeze"}  # the value
_NEGATES = {"logical_not", "bitwise_not", "__invert__"}
# counts of a test's true elements (``assert x.isnan().sum() == 0``, I-BERT): 0 where the test is
# false everywhere; where it is true everywhere the count is the size, which is not told
_COUNTS = {"sum", "count_nonzero"}
_COMBINES: dict[str, Callable[[bool, bool], bool]] = {
    **dict.fromkeys(("logical_and", "bitwise_and", "__and__"), operator.and_),
    **dict.fromkeys(("logical_or", "bitwise_or", "__or__"), operator.or_),
    **dict.fromkeys(("logical_xor", "bitwise_xor", "__xor__", "ne"), operator.ne),
    "eq": operator.eq,
}
_BOOLEAN = _KEEPS | _NEGATES | _COUNTS | set(_COMBINES)


def _finiteness(graph: fx.Graph) -> dict[fx.Node, bool | None]:
    """For each finiteness test of some values (a finite test, or boolean ops over finiteness
    tests and constants only), the value it takes when every tested value is finite; None for
    any other node, and for a test whose value cannot be told."""
    value: dict[fx.Node, bool | None] = {}
    for n in graph.nodes:
        value[n] = None
        if n.op != "call_function":
            continue
        name, inputs = base_name(n), n.all_input_nodes
        if name in _FINITE_TESTS:
            value[n] = name == "isfinite"
        elif name in _BOOLEAN and inputs and all(value.get(a) is not None for a in inputs):
            value[n] = _boolean(name, [value[a] if isinstance(a, fx.Node) else a for a in n.args])
    return value


def _boolean(name: str, args: list[Any]) -> bool | None:
    """The value of a boolean op over tensors whose elements all hold one value."""
    bits = [bool(a) if isinstance(a, (bool, int)) else None for a in args]
    if name in _KEEPS:
        return bits[0]
    if name in _NEGATES:
        return None if bits[0] is None else not bits[0]
    if name in _COUNTS:
        return False if bits[0] is False else None
    if len(bits) < 2 or bits[0] is None or bits[1] is None:
        return None
    return _COMBINES[name](bits[0], bits[1])


DRAWS_KEPT = "holds the path on which every layer runs"  # the note of a capture that did
FINITE_PATH = "holds the path of finite values"  # the note of a capture that did
STATE_PATH = "holds the path its buffers' values take"  # the note of a capture that did
NOT_CHECKPOINTED = "does not checkpoint"  # the note of a capture that inlined a checkpoint
FINITE_KEY = "unitcheck_finite_test"  # node.meta["custom"]: reads a finiteness test into Python (its line)


def _mark_finite_reads(graph: fx.Graph) -> None:
    """Mark where the graph reads a finiteness test into Python, with the line that branches on
    it; the mark survives lowering, which decomposes the tests themselves."""
    finite = _finiteness(graph)
    for n in graph.nodes:
        if finite[n] is not None and base_name(n) in READS:
            at = innermost_line(str(n.meta.get("stack_trace") or "")) or "an unknown line"
            n.meta.setdefault("custom", {})[FINITE_KEY] = at


def _explain_finite_asserts(graph: fx.Graph) -> None:
    """The runtime assertion of a finiteness branch says what failed (export's says ``Ne(u0, 1)``)."""
    for n in graph.nodes:
        if n.target is not aten._assert_scalar.default:
            continue
        seen: set[fx.Node] = set()
        todo = list(n.all_input_nodes)
        while todo:
            a = todo.pop()
            at = (a.meta.get("custom") or {}).get(FINITE_KEY)
            if at is not None:
                n.args = (n.args[0], f"values tested at {at} are not finite, and the model takes another branch "
                                     "for them there; this module was generated from finite values and holds "
                                     "their branch only")
                break
            if a not in seen and len(seen) < 64:
                seen.add(a)
                todo += a.all_input_nodes


def _explain_state_asserts(graph: fx.Graph, lines: dict[str, str]) -> None:
    """The runtime assertion of a branch on a buffer's value says which branch it held."""
    if not lines:
        return
    named = re.compile(r"\b(" + "|".join(map(re.escape, lines)) + r")\b")
    for n in graph.nodes:
        if n.target is aten._assert_scalar.default and isinstance(n.args[1], str) and \
                (found := named.search(n.args[1].partition(" on node ")[0])):
            n.args = (n.args[0], f"a buffer's value branched on at {lines[found.group(1)]} takes the model another "
                                 "way than when this module was generated (it holds that value's branch only)")


# node.meta: the symbols an op bound that real-tensor propagation then fixed to a constant
_LOST_BINDINGS = "unitcheck_lost_unbacked"
# ops that read their second argument's shape only
_SHAPE_OF_SECOND = frozenset({"expand_as", "view_as", "reshape_as"})
# ops whose symbolic sizes (the count of a mask) are read from their index or mask argument
# (args[1]), not from the values
_SIZED_BY_INDEX = frozenset({"index", "masked_select", "masked_scatter", "_unsafe_index"})
# ops whose result's size is their bounds' (a slice to an end read from an integer input binds a
# size of its own where the end may pass the data's: Pixtral cuts each image's patch grid to its
# ``image_sizes``), whatever the data they cut
_SIZED_BY_BOUNDS = frozenset({"slice", "narrow"})


def _index_nodes(n: fx.Node) -> list[fx.Node]:
    return [a for a in pytree.tree_leaves(n.args[1:2]) if isinstance(a, fx.Node)]


@dataclass
class _Specialisation:
    """What export with real values decided: the guarded expressions, and for every value read
    into Python (an unbacked symbol) whether it derives from floating-point data and where."""

    guarded: list[tuple[Any, Any]] = field(default_factory=list)  # (expression, what it was decided)
    origin: dict[Any, tuple[bool, str]] = field(default_factory=dict)
    drawn: set[Any] = field(default_factory=set)  # symbols read from a random draw (LayerDrop)
    kept: dict[Any, int] = field(default_factory=dict)  # their values on the path that keeps every layer
    keep_draws: bool = True  # False: the capture of the path that drops every layer (see _layer_drops)
    draw_lines: dict[str, int] = field(default_factory=dict)  # line of each draw branched on -> its kept value
    finite: dict[Any, int] = field(default_factory=dict)  # finiteness tests: their value for finite values
    # the integer placeholders (by position) each symbol is read from, and how many placeholders
    # the scanned graph has (its order is the signature's: parameters, buffers, constants, inputs)
    reads: dict[Any, frozenset[int]] = field(default_factory=dict)
    # the floating-point placeholders each symbol derives from (a value read only from buffers is
    # the model's state, not its data)
    float_reads: dict[Any, frozenset[int]] = field(default_factory=dict)
    state_lines: dict[str, str] = field(default_factory=dict)  # symbol -> line of a branch on a buffer's value
    placeholders: int = 0

    def scan(self, graph: fx.Graph) -> None:
        """Record the symbols a graph binds, before dead code (a value read only to branch on)
        is removed. A value derives from data when a floating-point leaf (a parameter, a float
        input or buffer) reaches it through anything but a shape query."""
        tainted: dict[fx.Node, bool] = {}
        drawn: dict[fx.Node, bool] = {}
        reads: dict[fx.Node, frozenset[int]] = {}
        floats: dict[fx.Node, frozenset[int]] = {}
        finite = _finiteness(graph)
        kept = kept_values(graph)
        position = 0
        for n in graph.nodes:
            name = getattr(n.target, "__name__", "").split(".")[0]
            drawn[n] = name in RANDOM or any(drawn.get(a, False) for a in n.all_input_nodes)
            reads[n] = frozenset().union(*(reads.get(a, frozenset()) for a in n.all_input_nodes))
            floats[n] = frozenset()
            if n.op == "placeholder":
                val = n.meta.get("val")
                tainted[n] = isinstance(val, torch.Tensor) and (val.is_floating_point() or val.is_complex())
                reads[n] = frozenset() if tainted[n] else frozenset({position})
                floats[n] = frozenset({position}) if tainted[n] else frozenset()
                position += 1
            elif n.op == "call_function" and name in _SHAPE_ONLY:
                tainted[n], reads[n] = False, frozenset()
            else:
                shape_of = n.args[1:2] if name in _SHAPE_OF_SECOND else ()  # expand_as(x, other): other's shape
                tainted[n] = drawn[n] or any(tainted.get(a, False) for a in n.all_input_nodes if a not in shape_of)
                floats[n] = frozenset().union(*(floats.get(a, frozenset()) for a in n.all_input_nodes
                                                if a not in shape_of))
            self.placeholders = position
            # the sizes it binds: a masked selection's count is the mask's, its values are the values'
            if name in _SIZED_BY_INDEX:
                sized = drawn[n] or any(tainted.get(a, False) for a in _index_nodes(n))
            elif name in _SIZED_BY_BOUNDS:
                sized = any(tainted.get(a, False) for a in pytree.tree_leaves(n.args[2:]) if isinstance(a, fx.Node))
            else:
                sized = tainted[n]
            for sym in [*(n.meta.get("unbacked_bindings") or {}), *n.meta.get(_LOST_BINDINGS, ())]:
                self.origin.setdefault(sym, (sized, str(n.meta.get("stack_trace") or "")))
                self.reads.setdefault(sym, reads[n])
                self.float_reads.setdefault(sym, floats[n])
                if drawn[n]:
                    self.drawn.add(sym)
                if n in kept:
                    self.kept.setdefault(sym, kept[n])
                if finite[n] is not None:
                    self.finite[sym] = int(bool(finite[n]))


@contextlib.contextmanager
def _draws_kept() -> Iterator[None]:
    """Lowering re-traces the graph and drops dead code; a random op whose result is unused
    (LiLT's last layout dropout) still draws in eager, so dropping it moves every later draw.
    Marked side-effectful while lowering, it stays."""
    import torch.fx.node as fx_node

    added = random_ops() - fx_node._side_effectful_functions
    fx_node._side_effectful_functions.update(added)
    try:
        yield
    finally:
        fx_node._side_effectful_functions.difference_update(added)


def _running_line(lines: dict[str, int]) -> str:
    """The innermost line of the running stack ("file:line") among ``lines``, or ""."""
    for frame in reversed(traceback.extract_stack()):
        at = f"{frame.filename}:{frame.lineno}"
        if at in lines:
            return at
    return ""


@contextlib.contextmanager
def _real_values(overrides: dict[str, int]) -> Iterator[_Specialisation]:
    """Export with real-tensor propagation: a guard on a value export cannot know (a grid size read
    with ``.tolist()``, a mask's ``.any()``) is decided by the example's real value instead of
    failing; ``overrides`` replaces the real values read at the lines it names ("file:line").
    Yields what was decided, for :func:`_check_specialised`."""
    import torch._functorch.config as functorch_config
    import torch.fx.experimental._config as fx_config
    import torch.fx.experimental.proxy_tensor as proxy_tensor
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    spec = _Specialisation()
    log_original = ShapeEnv._log_real_tensor_propagation
    bind_original = ShapeEnv.set_real_tensor_prop_unbacked_vals
    dce_original = fx.Graph.eliminate_dead_code

    def record(self: Any, orig_expr: Any, unsound_result: Any) -> None:
        spec.guarded.append((orig_expr, unsound_result))

    def bind(self: Any, k: Any, v: Any) -> None:
        # the key is a symbol or an expression of one (a bool read is bound as ``Eq(u0, 1)``)
        syms: set[Any] = getattr(k, "free_symbols", set())
        if overrides and len(syms) == 1 and (at := _running_line(overrides)):
            v = k.xreplace({next(iter(syms)): overrides[at]})
        bind_original(self, k, v)

    def dce(self: fx.Graph, *args: Any, **kwargs: Any) -> bool:
        spec.scan(self)
        return dce_original(self, *args, **kwargs)

    def bindings(out: Any, out_proxy: Any) -> None:
        # a size read from real values (a boolean mask's count, once a stride check compared it
        # with a constant) leaves the output without its symbol: the node keeps the symbol's name
        fake = torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE)
        pending = set(fake.shape_env.pending_fresh_unbacked_symbols) if fake and fake.shape_env else set()
        bindings_original(out, out_proxy)
        if pending and isinstance(out_proxy, fx.Proxy):
            lost = pending - set(out_proxy.node.meta.get("unbacked_bindings") or {})
            if lost:
                out_proxy.node.meta[_LOST_BINDINGS] = lost

    def hashed(self: torch.SymInt) -> int:
        # a value read into Python used as a dict key (GLM-4V's ``grid_iters[modality_type]``,
        # the type of each run of tokens): decided by the example's value, as a branch on it is
        return hash_original(self) if self.node.is_nested_int() else hash(int(self))

    ShapeEnv._log_real_tensor_propagation = record  # type: ignore[method-assign]
    ShapeEnv.set_real_tensor_prop_unbacked_vals = bind  # type: ignore[method-assign]
    hash_original = torch.SymInt.__hash__
    torch.SymInt.__hash__ = hashed  # type: ignore[method-assign,assignment]
    fx.Graph.eliminate_dead_code = dce  # type: ignore[method-assign]
    bindings_original = proxy_tensor._set_unbacked_bindings
    proxy_tensor._set_unbacked_bindings = bindings
    try:
        with functorch_config.patch(fake_tensor_propagate_real_tensors=True,
                                    generate_fake_kernels_from_real_mismatches=True), \
                fx_config.patch(soft_pending_unbacked_not_found_error=True):  # type: ignore[attr-defined]
            yield spec
    finally:
        torch.SymInt.__hash__ = hash_original  # type: ignore[method-assign]
        ShapeEnv._log_real_tensor_propagation = log_original  # type: ignore[method-assign]
        ShapeEnv.set_real_tensor_prop_unbacked_vals = bind_original  # type: ignore[method-assign]
        fx.Graph.eliminate_dead_code = dce_original  # type: ignore[method-assign]
        proxy_tensor._set_unbacked_bindings = bindings_original


class _Misdecided(Exception):
    """Real-tensor propagation decided a branch against the path the capture holds: a finiteness
    test given the value of values that are not finite (DETR's encoder activations hold NaN there,
    though they are finite when the model runs), or a random draw that dropped its layer. The
    capture is repeated with the held path's value at each such line (a line, not a symbol: the
    symbols are numbered in the order the path reads them)."""

    def __init__(self, values: dict[str, int]) -> None:
        super().__init__(", ".join(values))
        self.values = values


def _check_specialised(ep: Any, spec: _Specialisation) -> list[str]:
    """The notes on where the graph was specialised on a real value; raises
    :class:`_ValueSpecialised` when such a value derives from floating-point data (weights or
    activations), since the graph would then hold one path of the model. Values read from
    integer inputs and buffers are metadata (grid sizes, lengths, masks, positions):
    specialising on them is what the example asks for. A test of whether activations are finite
    (DETR's clamp of overflowed values in training) holds the finite path, which every healthy
    step takes, and the graph asserts it."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    spec.scan(ep.graph_module.graph)
    # the values read into Python; an input's size in the same guard (``n + x.shape[1] > 10``) is not one
    symbols = {s for e, _ in spec.guarded for s in free_unbacked_symbols(e)}
    held = {**spec.finite, **(spec.kept if spec.keep_draws else {})}  # each test's and draw's value on the held path
    misdecided = {innermost_line(spec.origin.get(sym, (True, ""))[1]): v for e, got in spec.guarded
                  for sym, v in held.items() if e.free_symbols == {sym} and bool(e.xreplace({sym: v})) != bool(got)}
    if misdecided:
        raise _Misdecided(misdecided)
    first, finite, drops, held_state = "", [], [], []
    users = _positions(ep, spec, "USER_INPUT")
    state = _positions(ep, spec, "BUFFER")
    for sym in sorted(symbols, key=str):
        tainted, stack = spec.origin.get(sym, (True, ""))
        at = innermost_line(stack) or "an unknown line"
        if eager_paths.active() and spec.reads.get(sym, users) & users:  # (the stack ends at the model's call)
            raise eager_paths.EagerPathRefused(f"a branch on an input's values ({sym} at {at})")
        if sym in spec.finite:
            finite += [at] if at not in finite else []
        elif sym in spec.drawn:
            if sym not in spec.kept:  # not a uniform draw compared with constants: no path keeps every layer
                raise _DrawSpecialised(f"{sym} at {at} is not a uniform draw compared with constants")
            drops += [at] if at not in drops else []
            spec.draw_lines[innermost_line(stack)] = spec.kept[sym]
        elif tainted:  # allowed when read from floating-point buffers alone: the model's state
            if not spec.float_reads.get(sym) or not spec.float_reads[sym] <= state:
                raise _ValueSpecialised(f"a branch on a value computed from weights or float data ({sym} at {at})")
            held_state += [at] if at not in held_state else []
            spec.state_lines[str(sym)] = at
        else:
            first = first or f" (first at {at})"
    notes = []
    if first or not (finite or drops or held_state):
        notes.append("export could not decide a branch on a value read in Python (a size, length or mask held by "
                     f"an integer input or buffer){first}; the example's values decided it, so the graph holds "
                     "their branch")
    if held_state:
        notes.append(f"a branch on the value of a floating-point buffer (at {', '.join(held_state[:3])}) "
                     f"{STATE_PATH}; the graph asserts it, so a module whose buffer has changed fails there")
    if finite:
        notes.append(f"a branch on whether activations are finite (at {', '.join(finite[:3])}) {FINITE_PATH}; the "
                     "graph asserts it, so values that are not finite fail there with a message")
    if drops:
        notes.append(f"a branch on a random draw (LayerDrop, at {', '.join(drops[:3])}) {DRAWS_KEPT}; the graph "
                     "asserts each draw, and generated code branches on it as the model does")
    return notes


def _positions(ep: Any, spec: _Specialisation, kind: str) -> frozenset[int]:
    """The placeholder positions of the signature's inputs of ``kind`` (``USER_INPUT``,
    ``BUFFER``). When the scanned graph's placeholders are not the signature's, no position is
    known: every one counts as a user input (no decision is then known to come from constants)
    and none as a buffer."""
    specs = ep.graph_signature.input_specs
    if spec.placeholders != len(specs):
        return frozenset(range(max(spec.placeholders, len(specs)))) if kind == "USER_INPUT" else frozenset()
    return frozenset(i for i, s in enumerate(specs) if s.kind.name == kind)


def _rebuilt_spec(spec: Any) -> Any:
    """The output structure of a lowered graph. Lowering re-traces the program, which rebuilds
    the outputs from the spec: a container that orders its fields itself (transformers'
    ModelOutput puts them in declaration order, whatever order the model set them in) comes back
    reordered, and the graph returns its leaves in the new order while export's spec keeps the
    old one. Rebuilding the spec once with placeholder leaves gives the order the graph has."""
    if spec is None:
        return None
    try:
        rebuilt = pytree.tree_structure(pytree.tree_unflatten(list(range(spec.num_leaves)), spec))
    except Exception:  # a container that insists on tensors: nothing to reorder
        return spec
    return rebuilt if rebuilt.num_leaves == spec.num_leaves else spec


# the note of a capture whose sizes are the example's: generated code checks them on every call
SIZES_FIXED = "sizes fixed at the example's"


@contextlib.contextmanager
def _size_markings_undone(inputs: Any) -> Iterator[None]:
    """Export with symbolic sizes marks its input tensors (``_dynamo_weak_dynamic_indices`` and
    kin) and leaves the marks when it fails: a later export of the same tensors at fixed sizes
    then sees symbolic sizes again. The marks go when the export is done."""
    tensors = [t for t in pytree.tree_leaves(inputs) if isinstance(t, torch.Tensor)]
    before = [set(vars(t)) for t in tensors]
    try:
        yield
    finally:
        for t, had in zip(tensors, before):
            for name in [k for k in vars(t) if k not in had and k.startswith(("_dynamo_", "_has_dynamo_"))]:
                delattr(t, name)


def _export(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], dynamic: bool,
            lower_op: Callable[[Any], bool] | None, real: bool = False,
            overrides: dict[str, int] | None = None) -> TracedGraph:
    overrides = dict(overrides or {})
    try:
        g = _export_once(model, args, kwargs, dynamic, lower_op, real, overrides)
        if g.draw_lines:
            # at the same level as ``g``: the path without the layers may hold nothing that asks for lowering
            _layer_drops(g, _export_once(model, args, kwargs, dynamic, lower_op, real,
                                         {**overrides, **{at: 1 - v for at, v in g.draw_lines.items()}}, keep=False,
                                         lower=g.lowered))
        return g
    except _Misdecided as err:
        if "" in err.values or set(err.values) <= set(overrides) or len(overrides) > 64:
            raise _ValueSpecialised(f"a test of whether activations are finite, or a random draw, that the capture "
                                    f"cannot give the path it holds (at {err})") from None
        return _export(model, args, kwargs, dynamic, lower_op, real, {**overrides, **err.values})


def _layer_drops(g: TracedGraph, dropped: TracedGraph) -> None:
    """Mark in ``g`` what each draw guards, from the capture where every draw dropped its layer
    (see :func:`unitcheck.draws.mark_layer_drops`)."""
    try:
        mark_layer_drops(g.graph, dropped.graph, {*g.mutations, *g.input_mutations},
                         {*dropped.mutations, *dropped.input_mutations})
    except ValueError as err:
        raise _DrawSpecialised(str(err)) from None
    # what a branch computed outside the graph (with numpy) is a constant in it: each constant the
    # layers do not hold alone must be in the other path too (by value: its numbering may shift)
    nodes = {n.name: n for n in g.graph.nodes}
    theirs = [v.value for v in dropped.leaves.values() if v.kind == "constant" and isinstance(v.value, torch.Tensor)]
    for name, leaf in g.leaves.items():
        n = nodes.get(name)
        if leaf.kind != "constant" or not isinstance(leaf.value, torch.Tensor) or n is None \
                or (n.users and all(GUARDED in u.meta for u in n.users)):
            continue
        if not any(v.shape == leaf.value.shape and v.dtype == leaf.value.dtype and torch.equal(v, leaf.value)
                   for v in theirs):
            raise _DrawSpecialised(f"the branch decides a constant the graph holds ({leaf.name}, computed outside "
                                   "the graph), which generated code would hold as the capture's")


def _export_once(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], dynamic: bool,
                 lower_op: Callable[[Any], bool] | None, real: bool, overrides: dict[str, int],
                 keep: bool = True, lower: bool | None = None) -> TracedGraph:
    shapes = _dynamic_spec(model, args, kwargs) if dynamic else None
    decided: list[str] = []
    dropped_outputs: list[str] = []
    draw_lines: dict[str, int] = {}
    lowered = False
    # node annotations (fx.traceback.annotate, as unitcheck.canonical marks its calls) survive;
    # lowering re-runs the graph, so real values stay on for it
    with fx_traceback.preserve_node_meta(), _real_values(overrides) if real else contextlib.nullcontext() as spec, \
            _size_markings_undone((args, kwargs)), eager_paths.patched(), fake_kernels.corrected(), flex.on_any_device(), _data_as_detach(), \
            _unflattenable_outputs_dropped(model, dropped_outputs), \
            sequence_data.stacked():
        ep = torch.export.export(model, args, kwargs, dynamic_shapes=shapes, strict=False)
        if spec is not None:
            spec.keep_draws = keep
            decided = _check_specialised(ep, spec)
            draw_lines = spec.draw_lines
            _mark_finite_reads(ep.graph_module.graph)
        if _needs_lowering(ep.graph_module.graph, lower_op) if lower is None else lower:
            _mark_detaches(ep.graph_module.graph)
            _mark_no_grad_regions(ep.graph_module.graph)
            _regions_keep_meta(ep.graph_module.graph)
            _placeholders_unannotated(ep.graph_module)
            with _draws_kept():
                ep = ep.run_decompositions(_decomposition_table())
            ep = _without_effect_tokens(ep)
            flex.buffers_indexed_as_captured(ep.graph_module)
            lowered = True
            _cut_no_grad_regions(ep.graph_module.graph)
    gm = ep.graph_module
    if real:
        _explain_finite_asserts(gm.graph)
        if spec is not None:
            _explain_state_asserts(gm.graph, spec.state_lines)
    names = _canonical_names(model)
    params = dict(model.named_parameters(remove_duplicate=False))
    buffers = dict(model.named_buffers(remove_duplicate=False))
    flat_inputs = pytree.tree_leaves((args, kwargs), is_leaf=lambda x: x is None)
    leaves: dict[str, Leaf] = {}
    user_index = 0
    for spec in ep.graph_signature.input_specs:
        arg_name = str(getattr(spec.arg, "name", ""))
        target = str(spec.target)
        kind = spec.kind.name
        if kind == "PARAMETER":
            p = params[target]
            leaves[arg_name] = Leaf("param", names.get(id(p), target), p)
        elif kind == "BUFFER":
            b = buffers.get(target)
            if b is None:
                b = ep.state_dict[target] if target in ep.state_dict else ep.constants[target]
            leaves[arg_name] = Leaf("buffer", names.get(id(b), target), b)
        elif kind == "CONSTANT_TENSOR":
            leaves[arg_name] = Leaf("constant", target, ep.constants[target])
        elif kind == "USER_INPUT":
            value = flat_inputs[user_index] if user_index < len(flat_inputs) else None
            user_index += 1
            if type(spec.arg).__name__ == "TensorArgument":
                leaves[arg_name] = Leaf("input", arg_name, value)
        else:
            raise TraceError(f"unsupported graph input kind {kind} ({arg_name})")
    placeholders = {n.name for n in gm.graph.nodes if n.op == "placeholder"}
    leaves = {k: v for k, v in leaves.items() if k in placeholders}
    mutations: dict[int, str] = {}
    for i, out in enumerate(ep.graph_signature.output_specs):
        if out.kind.name in ("BUFFER_MUTATION", "PARAMETER_MUTATION"):  # RWKV rescales weights in eval
            b = buffers.get(str(out.target), params.get(str(out.target)))
            mutations[i] = names.get(id(b), str(out.target)) if b is not None else str(out.target)
    inputs_updated = {i: str(out.target) for i, out in enumerate(ep.graph_signature.output_specs)
                      if out.kind.name == "USER_INPUT_MUTATION"}
    g = TracedGraph(gm, "export", leaves, model, args, kwargs, mutations=mutations, input_mutations=inputs_updated,
                    out_spec=_rebuilt_spec(ep.call_spec.out_spec) if lowered else ep.call_spec.out_spec,
                    size_ranges=_narrowed_sizes(ep))
    g.notes += decided
    if dropped_outputs:
        g.notes.append(f"outputs left out of the graph (no tensors export can flatten): "
                       f"{', '.join(sorted(set(dropped_outputs)))}")
    g.draw_lines = draw_lines
    g.lowered = lowered
    return g


def _without_effect_tokens(ep: Any) -> Any:
    """Lowering threads an effect token through ops with side effects (``torch.linalg.inv``'s
    error check): the token input and the ``with_effects`` wrappers go, each op called
    directly, as ``ExportedProgram.module()`` does."""
    if not any(s.kind.name == "TOKEN" for s in ep.graph_signature.input_specs):
        return ep
    from torch.export._remove_effect_tokens_pass import _remove_effect_tokens

    return _remove_effect_tokens(ep)


def _narrowed_sizes(ep: Any) -> dict[str, tuple[int, int | None]]:
    """The symbolic sizes a guard narrowed: export gives a free size the range [2, oo) (0 and 1
    are specialised) and narrows it where the model branches on it. A lower bound of 2 is that
    specialisation's, not the model's, so it is not kept (the graph ran at size 1 before). A
    size can also become a constant after the input was made: real-tensor propagation gives an op
    the real tensor's sizes where its fake kernel disagrees (``nn.MultiheadAttention``'s packed
    projection), and the graph holds the example's size from there on."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
    from torch.utils._sympy.numbers import int_oo

    out: dict[str, tuple[int, int | None]] = {}
    for sym, vr in ep.range_constraints.items():
        if free_unbacked_symbols(sym):  # a value read into Python, not an input's size
            continue
        lo = 0 if vr.lower == -int_oo else int(vr.lower)
        hi = None if vr.upper == int_oo else int(vr.upper)
        if lo > 2 or hi is not None:
            out[str(sym)] = (lo if lo > 2 else 0, hi)
    for n in ep.graph.nodes:  # an input's size made a constant after the input was made
        val = n.meta.get("val") if n.op == "placeholder" else None
        for d in val.shape if isinstance(val, torch.Tensor) else ():
            if isinstance(d, torch.SymInt) and d.node._expr.is_Symbol and d.node.expr.is_Integer:
                out[str(d.node._expr)] = (int(d.node.expr), int(d.node.expr))
    return out


def _may_replay(method: str, dynamic: bool, errors: list[tuple[str, BaseException]]) -> bool:
    """A recorded real run is the last resort for a branch on a tensor value, for checking only:
    code generation (``dynamic``) must not bake one branch of the model into what it writes."""
    return method != "fx" and not dynamic and bool(errors) and _data_dependent(errors[0][1])


def _replay(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
            lower_op: Callable[[Any], bool] | None) -> TracedGraph:
    """The last capture (:mod:`unitcheck.replay`): run the model on its real example values,
    record the ops it executed and export a replay of them. The graph holds the branches the
    example took, which the notes say, with the lines that branched."""
    from .replay import record, replayed

    rec = record(model, args, kwargs)
    with replayed(model, rec):
        g = _export(model, args, kwargs, False, lower_op)
    where = f" at {', '.join(rec.branches[:3])}" if rec.branches else ""
    more = f" and {len(rec.branches) - 3} more" if len(rec.branches) > 3 else ""
    g.notes.append("export could not follow Python control flow on a tensor value; the model ran once on the "
                   f"example's real values and its operations were recorded, so the graph holds the branches the "
                   f"example took (values read in Python{where}{more})")
    return g


class _DeepTracer(fx.Tracer):
    """Symbolic tracer that enters every module, so parameters become get_attr leaves."""

    def __init__(self) -> None:
        super().__init__()
        self.record_stack_traces = True

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return False


def _symbolic(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> TracedGraph:
    import inspect

    sig = inspect.signature(model.forward)
    bound = sig.bind(*args, **kwargs)
    concrete = {k: v for k, v in bound.arguments.items() if not isinstance(v, torch.Tensor)}
    for p in sig.parameters.values():
        if p.name not in bound.arguments and p.default is not inspect.Parameter.empty:
            concrete[p.name] = p.default
    tracer = _DeepTracer()
    graph = tracer.trace(model, concrete_args=concrete or None)
    gm = fx.GraphModule(tracer.root, graph)
    names = _canonical_names(model)
    leaves: dict[str, Leaf] = {}
    tensors = {k: v for k, v in bound.arguments.items() if isinstance(v, torch.Tensor)}
    for n in gm.graph.nodes:
        if n.op == "placeholder" and n.target in tensors:
            leaves[n.name] = Leaf("input", n.target, tensors[n.target])
        elif n.op == "get_attr":
            value = _fetch_attr(model, n.target)
            if isinstance(value, nn.Parameter):
                leaves[n.name] = Leaf("param", names.get(id(value), n.target), value)
            elif isinstance(value, torch.Tensor):
                is_buffer = id(value) in names
                leaves[n.name] = Leaf("buffer" if is_buffer else "constant", names.get(id(value), n.target), value)
    # one placeholder per parameter, in order; an argument fixed by concrete_args keeps its value,
    # which the graph asserts (``torch._assert``)
    flat = [leaves[n.name].value if n.name in leaves else concrete.get(name)
            for n, name in zip([n for n in gm.graph.nodes if n.op == "placeholder"], sig.parameters)]
    _record_values(gm, flat)
    return TracedGraph(gm, "fx", leaves, model, args, kwargs)


def _fetch_attr(model: nn.Module, target: str) -> Any:
    obj: Any = model
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _record_values(gm: fx.GraphModule, flat_args: list[Any]) -> None:
    """Give symbolic-trace nodes the ``meta['val']`` export provides (dtype and shape)."""

    class _Rec(fx.Interpreter):
        def run_node(self, n: fx.Node) -> Any:
            out = super().run_node(n)
            n.meta["val"] = pytree.tree_map_only(torch.Tensor, lambda t: t.detach().to("meta"), out)
            return out

    with torch.no_grad():
        _Rec(gm).run(*flat_args)


def _describe_failure(err: BaseException) -> tuple[str, Location | None]:
    text = f"{type(err).__name__}: {err}"
    low = text.lower()
    if "data-dependent" in low or "datadependent" in low or "control flow" in low or "guardondatadependent" in low:
        construct = "data-dependent branch (Python control flow on a tensor value)"
    elif "not implemented" in low or "notimplemented" in low or "unsupported" in low or "no such operator" in low:
        construct = "unsupported operator"
    else:
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        construct = f"{type(err).__name__}: {first[:200]}"
    loc = None
    m = re.search(r"The following call raised this error:\s*\n\s*(File .*\n.*)", str(err))
    if m:
        frames = frames_from_text(m.group(1).strip())
        if frames:
            loc = Location(*frames[0])
    if loc is None:
        for fr in reversed(traceback.extract_tb(err.__traceback__)):
            if user_frame(fr.filename) and "site-packages" not in fr.filename:
                loc = Location(fr.filename, fr.lineno or 0, (fr.line or "").strip())
                break
    if loc is None:
        for fr in reversed(traceback.extract_tb(err.__traceback__)):
            if user_frame(fr.filename):
                loc = Location(fr.filename, fr.lineno or 0, (fr.line or "").strip())
                break
    return construct, loc


def _data_dependent(err: BaseException) -> bool:
    low = f"{type(err).__name__}: {err}".lower()
    # a value read into Python and used as a dict key is a decision on it as much as a branch is
    return "data-dependent" in low or "datadependent" in low or "guardondatadependent" in low \
        or "unhashable type: non-nested symint" in low


def _on_meta(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    tensors = [*model.parameters(), *model.buffers(), *pytree.tree_leaves((args, kwargs))]
    return any(isinstance(t, torch.Tensor) and t.device.type == "meta" for t in tensors)


# the values of inputs moved to the meta device by to_meta(): a CPU copy traced with real values
# (a data-dependent branch on a grid size) needs them back
_KEPT_VALUES: Any = None


def _kept() -> Any:
    global _KEPT_VALUES
    if _KEPT_VALUES is None:
        from torch.utils.weak import WeakIdKeyDictionary

        _KEPT_VALUES = WeakIdKeyDictionary()
    return _KEPT_VALUES


def to_meta(inputs: Any) -> Any:
    """``inputs`` with every tensor moved to the meta device; the values of small integer and
    bool tensors (ids, grid sizes, lengths, masks) are kept aside, so that a model whose graph
    depends on them can still be traced on a CPU copy."""
    kept = _kept()

    def move(t: Any) -> Any:
        if not isinstance(t, torch.Tensor) or t.device.type == "meta":
            return t
        m = t.to("meta")
        if not (t.is_floating_point() or t.is_complex()) and t.numel() <= 1 << 20:
            kept[m] = t.detach().clone()
        return m

    return pytree.tree_map(move, inputs)


_META_LIMITS = ("meta and cpu", "cpu and meta", "on the meta device", "meta tensor", "devicemismatch", "unallocated storage",
                "expected device meta", "same device")
_MATERIALISE_LIMIT = 2 << 30  # bytes of weights a CPU copy may allocate


def _meta_limited(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
                  errors: list[tuple[str, BaseException]]) -> bool:
    """The model is on meta and failed for a reason the meta device causes (a tensor created on
    the CPU inside forward, a value read out of a meta tensor), and a CPU copy is affordable."""
    size = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    text = " ".join(f"{type(e).__name__}: {e}" for _, e in errors).lower()
    return (_on_meta(model, args, kwargs) and size <= _MATERIALISE_LIMIT
            and (any(k in text for k in _META_LIMITS) or _data_dependent(errors[0][1])))


def _rebuilt_from_config(model: nn.Module) -> nn.Module | None:
    """A CPU twin built from the model's config (the Hugging Face convention ``_from_config``):
    its buffers hold the values the constructor computes (conv paddings, strides, rotary tables),
    which a meta model never had and a branch on them needs. None when the twin differs."""
    rebuild = getattr(type(model), "_from_config", None)
    config = getattr(model, "config", None)
    if not callable(rebuild) or config is None:
        return None
    try:
        with torch.device("cpu"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            twin = rebuild(config)
    except Exception:
        return None
    mine = {k: tuple(v.shape) for k, v in model.state_dict(keep_vars=True).items()}
    theirs = {k: tuple(v.shape) for k, v in twin.state_dict(keep_vars=True).items()}
    if mine != theirs:
        return None
    twin._unitcheck_rebuilt = True  # for the trace's note
    return twin


def _materialise_on_cpu(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[nn.Module, Any]:
    """A CPU copy of a meta model and its inputs: rebuilt from its config where it has one, else
    with weights and buffers at zero (tracing reads shapes; a branch on a weight's value is
    refused anyway); inputs get the values :func:`to_meta` kept, else zeros (valid token ids and
    positions)."""
    import copy

    cpu = _rebuilt_from_config(model)
    if cpu is None:
        cpu = copy.deepcopy(model).to_empty(device="cpu")
        with torch.no_grad():
            for t in [*cpu.parameters(), *cpu.buffers()]:
                t.zero_()
    kept = _kept()

    def move(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.device.type == "meta":
            value = kept.get(t)
            if value is not None and value.shape == t.shape and value.dtype == t.dtype:
                return value.clone()
            return torch.zeros(t.shape, dtype=t.dtype)
        return t

    return cpu, (pytree.tree_map(move, args), pytree.tree_map(move, kwargs))


_LITERALS = (int, float, bool, str, type(None))


def _importable(cls: type) -> bool:
    import importlib

    try:
        obj: Any = importlib.import_module(cls.__module__)
        for part in cls.__qualname__.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return False
    return obj is cls


def _literal(value: Any) -> bool:
    """A value generated code can write as a Python literal: a number, string, None, or a list,
    tuple or string-keyed dict of them (YOSO passes its config as a dict)."""
    if isinstance(value, _LITERALS):
        return True
    if isinstance(value, (list, tuple)):
        return type(value) in (list, tuple) and all(_literal(v) for v in value)
    return type(value) is dict and all(isinstance(k, str) and _literal(v) for k, v in value.items())


# collectors of the modules whose forward applied an autograd.Function that generated code cannot
# call again (see uncallable_functions)
_UNCALLED: list[list[nn.Module | None]] = []


def _caller(frame: Any) -> nn.Module | None:
    """The module whose method the innermost frame from ``frame`` outward belongs to."""
    while frame is not None:
        owner = frame.f_locals.get("self")
        if isinstance(owner, nn.Module):
            return owner
        frame = frame.f_back
    return None


@contextlib.contextmanager
def uncallable_functions() -> Iterator[list[nn.Module | None]]:
    """While active, collects the module that applied each ``autograd.Function`` whose call
    generated code could not write down (its arguments hold modules or lists: Reformer's
    reversible layers). The capture inlines its forward and loses its hand-written backward
    (Reformer runs its layers under ``no_grad`` and recomputes them in ``backward``), so the
    rewriter keeps that module whole instead (None: no module applied it)."""
    found: list[nn.Module | None] = []
    _UNCALLED.append(found)
    try:
        yield found
    finally:
        _UNCALLED.remove(found)


@contextlib.contextmanager
def checkpoints_inlined() -> Iterator[list[str]]:
    """Reentrant activation checkpointing (``checkpoint(fn, x, use_reentrant=True)``, the default
    of older code and of transformers' gradient checkpointing until recently) runs ``fn`` without
    grad in forward and again with grad in backward. Captured as it runs, the graph held ``fn``
    without grad: the generated module had no gradients at all, and its GCT rewrite was called
    complete. Captured, a checkpoint is the function it recomputes (the list names each); the
    generated module computes the same values and gradients, without checkpointing."""
    from torch.utils import checkpoint

    cls = checkpoint.CheckpointFunction
    own = cls.__dict__.get("apply")
    hits: list[str] = []

    def apply(klass: Any, function: Any, preserve_rng_state: bool, *args: Any) -> Any:
        hits.append(getattr(function, "__qualname__", type(function).__name__))
        return function(*args)

    cls.apply = classmethod(apply)  # type: ignore[assignment,method-assign]
    try:
        yield hits
    finally:
        if own is None:
            del cls.apply
        else:
            cls.apply = own  # type: ignore[method-assign]


@contextlib.contextmanager
def mark_autograd_functions() -> Iterator[None]:
    """Mark the nodes of each ``Function.apply`` the capture inlines (a hand-written backward,
    as BLOOM's GeLU has, that the traced forward's autograd would not reproduce): the call and
    each tensor argument (an ``alias`` node tagged with its position), so that code generation
    can call the function again. Only functions generated code can import are marked."""
    from .canonical import CALL_KEY, next_call_id

    holder = torch.autograd.Function.__dict__["apply"]
    original = holder.__func__

    def apply(cls: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs or not _importable(cls) or not all(isinstance(a, torch.Tensor) or _literal(a) for a in args):
            if _UNCALLED and cls.__module__.partition(".")[0] != "torch":  # not a custom op's autograd
                _UNCALLED[-1].append(_caller(sys._getframe(1)))
            return original(cls, *args, **kwargs)
        consts = {i: a for i, a in enumerate(args) if not isinstance(a, torch.Tensor)}
        mark = {CALL_KEY: "autograd_function", "unitcheck_call_id": next_call_id(),
                "function": f"{cls.__module__}:{cls.__qualname__}", "consts": consts, "arity": len(args)}
        with fx_traceback.annotate(mark):
            tagged = []
            for i, a in enumerate(args):
                if isinstance(a, torch.Tensor):
                    with fx_traceback.annotate({"unitcheck_arg": i}):
                        a = aten.alias.default(a)
                tagged.append(a)
            return original(cls, *tagged)

    torch.autograd.Function.apply = classmethod(apply)  # type: ignore[assignment,method-assign]
    try:
        yield
    finally:
        torch.autograd.Function.apply = holder  # type: ignore[method-assign]


def _generated_structure(g: TracedGraph) -> None:
    """A module ``unitcheck rewrite`` generated computes everything in one ``forward``; its
    ``# [module]`` comments say which original module each line comes from. The nodes get
    those module paths, so that lint of a rewritten model sees the original's structure
    (residual branches, per-module ignores, violations named by module)."""
    import linecache
    import sys

    cls = type(g.model)
    if not getattr(cls, "__unitcheck_generated__", False):
        return
    file = getattr(sys.modules.get(cls.__module__), "__file__", None)
    if file:
        restore_module_paths(g.graph, file, linecache.getlines(file))


def _note_autocast(g: TracedGraph, rewritten: list[str]) -> None:
    if rewritten:
        g.notes.append(
            f"{len(rewritten)} autocast region(s) opened on the meta device were captured as CPU "
            "autocast (autocast has no meta backend; on meta tensors the graph is the same)"
        )


def uncompiled(model: nn.Module) -> nn.Module:
    """The module ``torch.compile`` wrapped: what the user wrote, with its own class name and
    module paths (the wrapper puts ``_orig_mod.`` before every path, which baselines and
    suppressions written for the plain model would not match)."""
    while isinstance(getattr(model, "_orig_mod", None), nn.Module) and type(model).__name__ == "OptimizedModule":
        model = model._orig_mod  # type: ignore[assignment]
    return model


def trace(
    model: nn.Module,
    example_inputs: Any,
    method: Literal["auto", "export", "fx"] = "auto",
    dynamic: bool = False,
    lower_op: Callable[[Any], bool] | None = None,
    training: bool = False,
) -> TracedGraph:
    """Capture ``model`` on ``example_inputs`` (a tensor, a tuple, a kwargs dict, or both), in
    eval mode unless ``training`` (code generation compares the two captures).

    ``dynamic=True`` keeps batch and sequence sizes symbolic (export only), as code generation
    needs. ``lower_op(target)`` says whether an op should be decomposed (unit inference passes
    "has no unit rule"); mutating ops always are. The model comes back as it was: its mode and
    the Python attributes its forward set (listed in ``state_changes``)."""
    if not isinstance(model, nn.Module):
        raise TraceError(f"expected an nn.Module, got {type(model).__name__}")
    if not defines_forward(type(model)):
        raise TraceError(f"cannot trace {type(model).__name__}: it has no forward method (nothing calls it as "
                         "model(inputs); a module that only generates or encodes has no call to capture)")
    changes: list[str] = []
    after: dict[tuple[str, str], Any] = {}
    rng = _host_rng_states()
    with _key_value_caches_off(model), _python_state_kept(model, changes, after), _module_casts_kept(), \
            _distribution_checks_off():
        try:
            g = _trace(model, example_inputs, method, dynamic, lower_op, training)
        except TraceError as err:
            g = _on_eager_path(err, model, example_inputs, method, dynamic, lower_op, training)
    g.host_draws = [name for name, state in _host_rng_states().items() if state != rng[name]]
    if g.host_draws:
        owners = " and ".join(HOST_GENERATORS[d] for d in g.host_draws)
        g.notes.append(f"the model drew from {owners} random generator while captured; where the draw reaches "
                       "the graph, the graph holds it as a constant")
    if changes:
        g.state_changes, g.state_after = changes, after
        shown = "; ".join(changes[:3]) + (f"; {len(changes) - 3} more" if len(changes) > 3 else "")
        g.notes.append(f"the model set its own state while captured ({shown}); the graph holds the path "
                       "of that call, and the attributes were put back")
    return g


def _trace(model: nn.Module, example_inputs: Any, method: Literal["auto", "export", "fx"], dynamic: bool,
           lower_op: Callable[[Any], bool] | None, training: bool) -> TracedGraph:
    import time

    args, kwargs = _unaliased(*normalise_inputs(example_inputs))
    t0 = time.perf_counter()
    errors: list[tuple[str, BaseException]] = []

    def done(g: TracedGraph, fallback: str | None = None) -> TracedGraph:
        """``g`` timed and noted; ``fallback`` says what was used instead of a plain export, with
        ``{failure}`` standing for the first failure and where it happened."""
        if fallback is not None and errors:
            construct, loc = _describe_failure(errors[0][1])
            g.notes.append(fallback.format(failure=construct + (f" at {loc.file}:{loc.line}" if loc else "")))
        g.trace_seconds = time.perf_counter() - t0
        _note_autocast(g, rewritten)
        if recomputed:
            g.notes.append(f"{len(recomputed)} reentrant activation checkpoint(s) captured as the function each "
                           f"recomputes: a module generated from this graph {NOT_CHECKPOINTED}")
        return g

    with _mode(model, training), _quiet(), meta_autocast() as rewritten, mark_autograd_functions(), \
            checkpoints_inlined() as recomputed:
        if method in ("auto", "export"):
            try:
                g = _export(model, args, kwargs, dynamic, lower_op)
                _generated_structure(g)
                return done(g)
            except TraceError:
                raise
            except Exception as err:  # export raises many types; all become one TraceError
                errors.append(("torch.export", err))
            if _data_dependent(errors[-1][1]) and not _on_meta(model, args, kwargs):
                try:
                    return done(_export(model, args, kwargs, dynamic, lower_op, real=True))
                except eager_paths.EagerPathRefused:
                    raise
                except _DrawSpecialised as err:
                    _, loc = _describe_failure(errors[0][1])
                    where = f" at {loc.file}:{loc.line}: {loc.code}" if loc else ""
                    raise TraceError(f"cannot trace {type(model).__name__}: data-dependent branch on a random draw"
                                     f"{where} ({err}; training mode takes a different path each step; trace it "
                                     "with the model's layer drop set to 0)", loc) from err
                except Exception as err:
                    errors.append(("torch.export with real values", err))
        if method in ("auto", "fx"):
            try:
                return done(_symbolic(model, args, kwargs), "torch.export failed ({failure}); used symbolic tracing")
            except Exception as err:
                errors.append(("symbolic tracing", err))
        if dynamic and method != "fx" and errors and not _data_dependent(errors[0][1]):
            # symbolic sizes were the trouble (UnivNet draws noise at its input's shape through an
            # overload that takes concrete sizes only): every size fixed at the example's, which
            # the generated code checks on each call
            try:
                g = _export(model, args, kwargs, False, lower_op)
                _generated_structure(g)
                return done(g, "torch.export failed with symbolic sizes ({failure}); " + SIZES_FIXED)
            except TraceError:
                raise
            except Exception as err:
                errors.append(("torch.export at the example's sizes", err))
        if _may_replay(method, dynamic, errors) and not _on_meta(model, args, kwargs):
            try:
                return done(_replay(model, args, kwargs, lower_op))
            except Exception as err:
                errors.append(("a recorded real run", err))
    if _meta_limited(model, args, kwargs, errors):
        value_branch = _data_dependent(errors[0][1])
        try:
            cpu, (cargs, ckwargs) = _materialise_on_cpu(model, args, kwargs)
            if value_branch and method != "fx":  # straight to real values: a plain export fails again
                with _mode(cpu, training), _quiet(), meta_autocast() as rewritten, mark_autograd_functions():
                    try:
                        g = _export(cpu, cargs, ckwargs, dynamic, lower_op, real=True)
                    except Exception as err:
                        errors.append(("a CPU copy with real values", err))
                        if not _may_replay(method, dynamic, errors):
                            raise
                        try:
                            g = _replay(cpu, cargs, ckwargs, lower_op)
                        except Exception as run_err:
                            errors.append(("a recorded real run", run_err))
                            raise
                g.trace_seconds = time.perf_counter() - t0
                _note_autocast(g, rewritten)
            else:
                g = trace(cpu, (cargs, ckwargs), method=method, dynamic=dynamic, lower_op=lower_op,
                          training=training)
        except TraceError as err:  # the CPU copy's failure is the one that matters
            if not value_branch:
                raise TraceError(f"{err} (on a CPU copy: the model does not run on the meta device)", err.location) from err
            errors.append(("a CPU copy", err))
        except Exception as err:  # the copy itself failed: report the meta failure with it
            if not any(e is err for _, e in errors):
                errors.append(("a CPU copy", err))
        else:
            construct, _ = _describe_failure(errors[0][1])
            how = "rebuilt from its config" if getattr(g.model, "_unitcheck_rebuilt", False) else "with zero weights"
            g.notes.append(f"the model does not run on the meta device ({construct}); traced a copy on the "
                           f"CPU ({how}) instead")
            return g
    construct, loc = _describe_failure(errors[0][1])
    where = f" at {loc.file}:{loc.line}: {loc.code}" if loc else ""
    tried = " and ".join(name for name, _ in errors)
    real_run = [e for name, e in errors if name == "a recorded real run" and not _data_dependent(e)]
    if real_run:  # the model's own forward fails on real values: that is the reason to give first
        run_construct, run_loc = _describe_failure(real_run[0])
        run_at = f" at {run_loc.file}:{run_loc.line}: {run_loc.code}" if run_loc else ""
        raise TraceError(f"cannot trace {type(model).__name__}: run on real values, the model itself fails: "
                         f"{run_construct}{run_at} (export stopped earlier at a {construct}{where})",
                         run_loc or loc) from real_run[0]
    raise TraceError(
        f"cannot trace {type(model).__name__}: {construct}{where} ({_real_values_why(errors)}{tried} failed)", loc
    ) from errors[0][1]


def _on_eager_path(failure: TraceError, model: nn.Module, example_inputs: Any, method: str, dynamic: bool,
                   lower_op: Callable[[Any], bool] | None, training: bool) -> TracedGraph:
    """Where every capture of the path the library takes when compiled fails, the path it takes
    in eager (:mod:`.eager_paths`): Autoformer's attention adds a mask only when one exists, and
    its view of the weights with the mask holds for no shape; eager builds no mask, export
    builds one. The first failure is raised where the eager path fails too, or reads a branch
    on an input's values. A branch on values the exported path met is not this case: modules
    kept whole and real values answer it (a layer drop's draw would be held as the example's)."""
    library = any(type(m).__module__.startswith(eager_paths.LIBRARY + ".") for m in model.modules())
    if method == "fx" or not library or eager_paths.active() or _data_dependent(failure):
        raise failure
    try:
        with eager_paths.eager_paths():
            g = _trace(model, example_inputs, method, dynamic, lower_op, training)  # type: ignore[arg-type]
    except (TraceError, eager_paths.EagerPathRefused):
        raise failure from failure.__cause__  # its own cause kept
    g.notes.append(f"the path {eager_paths.LIBRARY} takes when compiled does not trace "
                   f"({str(failure).splitlines()[0][:200]}); traced the path it takes in eager")
    return g


def _real_values_why(errors: list[tuple[str, BaseException]]) -> str:
    """Why export with real values failed, where that says more than the first failure does: the
    first names the branch export could not follow, this the value that decided it (an activation,
    not an input's metadata) or what broke after it."""
    err = next((e for name, e in errors if name == "torch.export with real values"), None)
    if isinstance(err, _ValueSpecialised):
        return f"with real values, {err}; "
    if err is None or _data_dependent(err):
        return ""
    construct, loc = _describe_failure(err)
    return f"with real values, {construct}" + (f" at {loc.file}:{loc.line}" if loc else "") + "; "
