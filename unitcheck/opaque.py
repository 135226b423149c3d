"""Submodules a capture keeps whole, so that generated code calls the original module.

A module whose forward branches on its data cannot be one static graph: an MoE layer that loops
over the experts a batch hit (DBRX, Switch) holds a different number of calls for every batch. The
rest of the model can still be regenerated around it. While :func:`kept` is active, each call of a
kept module is one op, ``unitcheck::module_call``; the sizes of its results come from an eager
run of the model on the example in each mode (each result size that equals a size of the call's
tensors follows that size; any other is a size of the module's own). Code generation writes the op back as a call of the module
(``self.blocks[0].ffn.experts(h, idx, w)``), and the generated module holds the module whole: its
class, its plain attributes and its children (:class:`Skeletons`), its weights in the state dict.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import json
import math
import random
import sys
import types
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.utils import parametrize

from .errors import UnitcheckError, fails_on_example
from .host_draws import Call, Unwritable, decode

__all__ = ["OP", "FUNCTION", "HOOKS_COLLECTED", "Unkeepable", "within", "kept_function", "kept", "owners", "function_owners", "call_parts", "output_path", "Skeletons", "SKELETON_HELPERS"]

# path key ("<capture id>:<module path>") -> the module and its forward before :func:`kept`
_MODULES: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()  # a module or a function
_FORWARDS: dict[str, Any] = {}
_RECORDS: dict[str, dict[bool, list[_Record]]] = {}  # by training mode
_counter = itertools.count()


@dataclass
class _Record:
    """One call of a kept module on the example: its tensor arguments' sizes and its result."""

    inputs: list[tuple[int, ...]]
    layout: str  # JSON: {"out": template, "shapes": [...], "dtypes": [...]}


def _encode_out(value: Any, tensors: list[torch.Tensor]) -> Any:
    """A template of a module's result: each tensor a ``{"tensor": k}`` leaf."""
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return {"tensor": len(tensors) - 1}
    if isinstance(value, dict):
        cls = type(value)
        return {"kind": "dict", "cls": None if cls is dict else f"{cls.__module__}:{cls.__qualname__}",
                "keys": list(value), "items": [_encode_out(v, tensors) for v in value.values()]}
    if isinstance(value, tuple) and hasattr(type(value), "_fields") and _ref(type(value)) is not None:
        return {"kind": "namedtuple", "cls": _ref(type(value)), "items": [_encode_out(v, tensors) for v in value]}
    if isinstance(value, (tuple, list)) and type(value) in (tuple, list):
        return {"kind": type(value).__name__, "items": [_encode_out(v, tensors) for v in value]}
    if value is None or isinstance(value, (bool, int, str)) or (isinstance(value, float) and math.isfinite(value)):
        return value
    raise Unwritable(f"a result of type {type(value).__name__}")


def _resolve(qualified: str) -> Any:
    module, _, qual = qualified.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def _decode_out(template: Any, tensors: list[Any]) -> Any:
    if isinstance(template, dict):
        if "tensor" in template:
            return tensors[template["tensor"]]
        items = [_decode_out(v, tensors) for v in template["items"]]
        if template["kind"] == "dict":
            pairs = dict(zip(template["keys"], items, strict=True))
            return pairs if template["cls"] is None else _resolve(template["cls"])(**pairs)
        if template["kind"] == "namedtuple":  # Reformer's encoder returns one
            return _resolve(template["cls"])(*items)
        return tuple(items) if template["kind"] == "tuple" else items
    return template


def output_path(template: Any, k: int) -> list[Any] | None:
    """The keys that lead from a result to its ``k``-th tensor (a getitem chain)."""
    if isinstance(template, dict):
        if template.get("tensor") == k:
            return []
        if "items" in template:
            keys = template["keys"] if template["kind"] == "dict" else range(len(template["items"]))
            for key, item in zip(keys, template["items"], strict=True):
                found = output_path(item, k)
                if found is not None:
                    return [key, *found]
    return None


_FLOAT = "float"  # a result in the dtype of the call's first float tensor: it follows that dtype


def _float_dtype(tensors: list[torch.Tensor | None]) -> torch.dtype | None:
    return next((t.dtype for t in tensors if t is not None and t.is_floating_point()), None)


@torch.library.custom_op("unitcheck::module_call", mutates_args=())
def module_call(path: str, template: str, ints: list[int], tensors: list[torch.Tensor | None],
                sizes: list[int], layout: str) -> list[torch.Tensor]:
    """The kept module ``path`` called with the arguments ``template`` writes down; its result's
    tensors, flat (copies: an op's results may not alias its inputs)."""
    module = _MODULES.get(path)
    if module is None:
        raise UnitcheckError(f"the kept module {path.partition(':')[2]} is no longer held: "
                             "a captured graph that calls it runs only while its model lives")
    forward = _FORWARDS.get(path, module)  # the forward :func:`kept` replaced, while it is replaced
    args, kwargs = decode(json.loads(template), [int(i) for i in ints], list(tensors))
    out: list[torch.Tensor] = []
    _encode_out(forward(*args, **kwargs), out)
    return [t.clone() for t in out]


@module_call.register_fake
def _module_call_fake(path: str, template: str, ints: list[int], tensors: list[torch.Tensor | None],
                      sizes: list[int], layout: str) -> list[torch.Tensor]:
    spec = json.loads(layout)
    device = next((t.device for t in tensors if t is not None), torch.device("cpu"))
    floats = _float_dtype(tensors)
    free: dict[int, Any] = {}  # the sizes the module decides (see _sizes), one symbol each
    ctx = torch.library.get_ctx()
    for s in sizes:
        if isinstance(s, int) and s < 0 and s not in free:
            free[s] = ctx.new_dynamic_size()
    sizes = [free[s] if isinstance(s, int) and s < 0 else s for s in sizes]
    out, at = [], 0
    for rank, dtype in zip(spec["ranks"], spec["dtypes"], strict=True):
        out.append(torch.empty(sizes[at:at + rank], dtype=floats if dtype == _FLOAT else getattr(torch, dtype),
                               device=device))
        at += rank
    return out


OP = torch.ops.unitcheck.module_call.default


def call_parts(node: Any) -> tuple[str, tuple[Any, ...], dict[str, Any], Any]:
    """A ``module_call`` node's module path, arguments (graph nodes in the tensors' places) and
    result template."""
    path, template, ints, tensors, _, layout = node.args
    args, kwargs = decode(json.loads(template), list(ints), list(tensors))
    return path.partition(":")[2], tuple(args), kwargs, json.loads(layout)["out"]


def kept_module(node: Any) -> nn.Module:
    module = _MODULES.get(node.args[0])
    if module is None:
        raise UnitcheckError(f"the kept module {node.args[0].partition(':')[2]} is no longer held")
    return module


# -- which modules ------------------------------------------------------------------------------


def owners(model: nn.Module, err: BaseException, already: set[str]) -> list[str]:
    """The submodules to keep whole after ``err``: every module of the class whose method raised
    it (the innermost frame whose ``self`` is a submodule of ``model``, not yet kept)."""
    by_id = {id(m): name for name, m in model.named_modules() if name}
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        tb = cause.__traceback__
        frames = []
        while tb is not None:
            frames.append(tb.tb_frame)
            tb = tb.tb_next
        for frame in reversed(frames):
            owner = frame.f_locals.get("self")
            if isinstance(owner, nn.Module) and id(owner) in by_id and by_id[id(owner)] not in already:
                return _of_classes(model, {type(owner)}, already)
        cause = cause.__cause__ or cause.__context__
    return _owning_function(model, err, already)


def _of_classes(model: nn.Module, classes: set[type], already: set[str]) -> list[str]:
    """Every submodule of one of ``classes`` not yet kept: a class's modules are kept together."""
    return [name for name, m in model.named_modules() if name and type(m) in classes and name not in already]


def function_owners(model: nn.Module, found: list[nn.Module | None], already: set[str]) -> list[str]:
    """The submodules to keep whole because they applied an ``autograd.Function`` generated code
    cannot call (``found``: :func:`~unitcheck.tracer.uncallable_functions`), with every module of
    their classes; a function the model's own forward applies cannot be kept."""
    from .tracer import TraceError

    names = {id(m): name for name, m in model.named_modules()}
    if any(m is None or not names.get(id(m)) for m in found):
        raise TraceError(f"cannot regenerate {type(model).__name__}: its forward applies an autograd.Function to "
                         "arguments generated code cannot write (a module or a list), and only a submodule that "
                         "applies one can be kept whole")
    return _of_classes(model, {type(m) for m in found if names[id(m)] not in already}, already)


FUNCTION = "fn:"  # a kept path that names a module-level function ("fn:<module>:<name>"), not a submodule


def _owning_function(model: nn.Module, err: BaseException, already: set[str]) -> list[str]:
    """The model library's module-level function whose body raised ``err`` (FastSpeech2's
    ``length_regulator``, called from the model's own forward), innermost first."""
    libraries = {type(m).__module__ for m in model.modules()}
    tb = err.__cause__.__traceback__ if err.__cause__ is not None else err.__traceback__
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        module, name = frame.f_globals.get("__name__"), frame.f_code.co_name
        fn = frame.f_globals.get(name)
        path = f"{FUNCTION}{module}:{name}"
        if module in libraries and isinstance(fn, types.FunctionType) and fn.__code__ is frame.f_code \
                and path not in already:
            return [path]
    return []


# -- the capture --------------------------------------------------------------------------------


class Unkeepable(UnitcheckError):
    """A module that cannot be kept whole: generated code could not write down its call.
    ``instead``: an ancestor that can be kept in its place, if one is known."""

    def __init__(self, message: str, path: str = "", instead: str | None = None) -> None:
        super().__init__(message)
        self.path, self.instead = path, instead


# transformers puts hooks that record hidden states on a model's layers, and marks each model it
# hooked so; the model whose forward is called collects what they record for that call: kept
# whole with that model, the hooks are harmless (its call sets the collection up)
HOOKS_COLLECTED = "_output_capturing_hooks_installed"
_COLLECTING_HOOKS = frozenset({"transformers.utils.output_capturing"})  # where such hooks are defined


def _collected(sub: nn.Module) -> bool:
    """Are all of a module's hooks transformers' recording hooks (no pre-hook, no hook of the
    user's or of another library, which a module rebuilt without hooks would lose)?"""
    return not sub._forward_pre_hooks and all(getattr(h, "__module__", None) in _COLLECTING_HOOKS
                                              for h in sub._forward_hooks.values())


def _collector(modules: dict[str, nn.Module], path: str) -> str | None:
    """The innermost module at or above ``path`` (not the root) that transformers marked hooked."""
    while path:
        if getattr(modules[path], HOOKS_COLLECTED, False):
            return path
        path = path.rpartition(".")[0]
    return None


def within(path: str, outer: str) -> bool:
    """``path`` is ``outer`` or inside it (everything is inside the root, ``""``)."""
    return outer == "" or path == outer or path.startswith(outer + ".")


def _record(model: nn.Module, paths: list[str],
            example: tuple[tuple[Any, ...], dict[str, Any]]) -> dict[str, dict[bool, list[_Record]]]:
    """Each kept module's calls in an eager run of ``model`` on the example, in eval and in
    training mode (a module may return more in training); the model's state is put back."""
    calls: dict[str, dict[bool, list[_Record]]] = {p: {False: [], True: []} for p in paths}
    problems: list[tuple[str, str]] = []  # (kept path, what generated code could not hold)
    instead: dict[str, str | None] = {}  # a module that cannot be kept -> the ancestor to keep instead

    def note(path: str, training: bool, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        try:
            call = Call(args, kwargs)
            tensors: list[torch.Tensor] = []
            template = _encode_out(out, tensors)
            floats = _float_dtype(call.tensors)
        except Unwritable as why:
            problems.append((path, str(why)))
            return
        calls[path][training].append(_Record(
            [tuple(t.shape) if t is not None else () for t in call.tensors],
            json.dumps({"out": template, "ranks": [t.dim() for t in tensors],
                        "dtypes": [_FLOAT if t.dtype == floats else str(t.dtype).removeprefix("torch.")
                                   for t in tensors],
                        "shapes": [list(t.shape) for t in tensors]})))

    def hook(path: str) -> Any:
        def record(m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
            note(path, m.training, args, kwargs, out)
        return record

    def recorded(path: str, fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            note(path, model.training, args, kwargs, out)
            return out
        return call

    def hooked(path: str) -> Any:
        def check(m: nn.Module, args: tuple[Any, ...]) -> None:
            for inner, sub in m.named_modules():  # transformers records hidden states so: kept whole,
                if sub is m or not (sub._forward_hooks or sub._forward_pre_hooks):  # they would not be,
                    continue  # unless the module that collects them is kept with them
                collector = _collector(modules, f"{path}.{inner}") if _collected(sub) else None
                if collector is not None and within(collector, path):
                    continue
                problems.append((path, f"a hook on its submodule {inner} (outputs recorded by hooks)"))
                instead.setdefault(path, collector)
                return
        return check

    modules = dict(model.named_modules())
    submodules = [p for p in paths if not p.startswith(FUNCTION)]
    handles = [modules[p].register_forward_hook(hook(p), with_kwargs=True) for p in submodules]
    handles += [modules[p].register_forward_pre_hook(hooked(p)) for p in submodules]
    functions = {p: _function(p) for p in paths if p.startswith(FUNCTION)}
    for p, (owner, name, fn) in functions.items():
        setattr(owner, name, recorded(p, fn))
    flags = {m: m.training for m in model.modules()}
    buffers = {b: b.detach().clone() for b in model.buffers()}
    host = (random.getstate(), np.random.get_state())  # a model may draw from numpy (wav2vec2's LayerDrop)
    try:
        with torch.random.fork_rng(), torch.no_grad():
            args, kwargs = example
            for training in (False, True):
                model.train(training)
                try:
                    model(*args, **kwargs)
                except Exception as err:  # noqa: BLE001 (a model that does not run in training mode on
                    if not training:  # these inputs: FastSpeech2 wants labels; its training capture says so)
                        raise fails_on_example(err, "eval") from None
    finally:
        for h in handles:
            h.remove()
        for owner, name, fn in functions.values():
            setattr(owner, name, fn)
        for m, t in flags.items():
            m.training = t
        with torch.no_grad():
            for b, v in buffers.items():
                b.copy_(v)
        random.setstate(host[0])
        np.random.set_state(host[1])
    if problems:
        path, what = problems[0]
        raise Unkeepable(f"{path} cannot be kept whole: generated code could not hold {what}", path, instead.get(path))
    return calls


def _sizes(call: Call, record: _Record, fixed: bool) -> list[Any]:
    """The result's sizes, each as the first size of the call's tensors that equals it on the
    example (so that it follows that size). A size equal to none (SuperPoint's count of
    keypoints above a score) is the module's to decide: ``-1 - k`` for the k-th such example
    value, which the op's fake makes a size of its own (one per value, shared by the results
    that have it); 0 and 1 stay literal, and so does every such size when ``fixed``."""
    spec = json.loads(record.layout)
    known = [(i, j, d) for i, shape in enumerate(record.inputs) for j, d in enumerate(shape)]
    free: dict[int, int] = {}
    out: list[Any] = []
    for shape in spec["shapes"]:
        for d in shape:
            match = next(((i, j) for i, j, e in known if e == d and call.tensors[i] is not None), None)
            if match is not None:
                out.append(call.tensors[match[0]].shape[match[1]])  # type: ignore[union-attr]
            else:
                out.append(int(d) if d <= 1 or fixed else -1 - free.setdefault(int(d), len(free)))
    return out


def _function(path: str) -> tuple[types.ModuleType, str, Any]:
    module, _, name = path.removeprefix(FUNCTION).rpartition(":")
    owner = sys.modules[module]
    return owner, name, getattr(owner, name)


def kept_function(path: str) -> Any:
    """The function a kept path names (the model's, not a capture's replacement)."""
    module, _, name = path.removeprefix(FUNCTION).rpartition(":")
    return _resolve(f"{module}:{name}")


def _kept_call(key: str, fixed: bool, training: Any) -> Any:
    """The op's call in place of the kept module's forward or the kept function (``training()``:
    the mode whose records size it)."""
    count = itertools.count()

    def call(*args: Any, **kwargs: Any) -> Any:
        mode = bool(training())
        records = _RECORDS[key][mode] or _RECORDS[key][not mode]
        record = records[next(count) % len(records)]
        call = Call(args, kwargs)
        outs = torch.ops.unitcheck.module_call(key, call.template, call.ints, call.tensors, _sizes(call, record, fixed),
                                               record.layout)
        return _decode_out(json.loads(record.layout)["out"], outs)

    return call


@contextlib.contextmanager
def kept(model: nn.Module, paths: list[str], example: tuple[tuple[Any, ...], dict[str, Any]],
         fixed: bool = False) -> Iterator[None]:
    """While active, the modules ``paths`` of ``model`` are each one ``module_call`` op (the sizes
    of their results that no argument gives are the example's when ``fixed``)."""
    if not paths:
        yield
        return
    records = _record(model, paths, example)
    capture = next(_counter)
    modules = dict(model.named_modules())
    patched = []
    functions = []
    for path in paths:
        key = f"{capture}:{path}"
        if not any(records[path].values()):
            continue  # not called on the example: nothing to keep
        if path.startswith(FUNCTION):
            owner, name, fn = _function(path)
            _MODULES[key], _FORWARDS[key], _RECORDS[key] = fn, fn, records[path]
            setattr(owner, name, _kept_call(key, fixed, lambda: model.training))
            functions.append((owner, name, fn, key))
            continue
        module = modules[path]
        _MODULES[key], _FORWARDS[key], _RECORDS[key] = module, module.forward, records[path]
        call = _kept_call(key, fixed, lambda m=module: m.training)
        module.forward = types.MethodType(lambda _, *a, _call=call, **k: _call(*a, **k), module)  # type: ignore[method-assign]
        patched.append((module, key))
    try:
        yield
    finally:
        for module, key in patched:
            del module.forward
            _FORWARDS.pop(key, None)
            _RECORDS.pop(key, None)
        for owner, name, fn, key in functions:
            setattr(owner, name, fn)
            _FORWARDS.pop(key, None)
            _RECORDS.pop(key, None)


# -- the module in generated code ---------------------------------------------------------------

_MODULE_STATE = frozenset(nn.Module().__dict__)


def _ref(obj: Any) -> str | None:
    mod, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not mod or not qual or "<" in qual:
        return None
    try:
        return f"{mod}:{qual}" if _resolve(f"{mod}:{qual}") is obj else None
    except (ImportError, AttributeError):
        return None


_WIDTH = 110  # generated lines longer than this are laid out one argument per line


def _call(name: str, args: list[str], indent: int) -> str:
    flat = f"{name}({', '.join(args)})"
    if indent + len(flat) <= _WIDTH and "\n" not in flat:
        return flat
    pad = " " * (indent + 4)
    return f"{name}(\n" + "".join(f"{pad}{a},\n" for a in args) + " " * indent + ")"


def _mapping(pairs: list[tuple[str, str]], indent: int) -> str:
    flat = "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}"
    if indent + len(flat) <= _WIDTH and "\n" not in flat:
        return flat
    pad = " " * (indent + 4)
    return "{\n" + "".join(f"{pad}{k}: {v},\n" for k, v in pairs) + " " * indent + "}"


class Skeletons:
    """Expressions that build kept modules again without weights: each module's class, plain
    attributes and children (the generated ``__init__`` then registers the weights). An object
    that is not a literal (a model config) is built once from its class and attributes, as a
    local of ``__init__`` that every module holding it shares."""

    def __init__(self) -> None:
        self.definitions: list[str] = []  # "name = expression", in dependency order
        self._names: dict[int, str] = {}

    def module(self, module: nn.Module, where: str, indent: int = 8) -> str:
        """``module`` rebuilt, as an expression laid out for a line indented by ``indent``."""
        parametrized = parametrize.is_parametrized(module)  # weight_norm: its class is made at run time
        cls = _ref(type(module).__bases__[0] if parametrized else type(module))
        if cls is None:
            raise UnitcheckError(f"generated code cannot import {type(module).__qualname__}, the class of the "
                                 f"kept module {where}")
        attrs = [(repr(k), self.value(v, f"{where}.{k}")) for k, v in vars(module).items()  # hooks are not
                 if (k not in _MODULE_STATE or k == "training") and k != HOOKS_COLLECTED]  # rebuilt: nor their mark
        children = [(repr(k), "None" if c is None else self.module(c, f"{where}.{k}", indent + 8))
                    for k, c in module._modules.items() if not (parametrized and k == "parametrizations")]
        unset = [[k for k, v in module._parameters.items() if v is None],  # an absent bias, for one
                 [k for k, v in module._buffers.items() if v is None]]
        args = [repr(cls), _mapping(attrs, indent + 4), _mapping(children, indent + 4)]
        made = _call("_instance", args + ([repr(unset)] if unset != [[], []] else []), indent)
        for name, chain in (module.parametrizations.items() if parametrized else []):  # type: ignore[union-attr,operator]
            with torch.no_grad():
                value = getattr(module, name)
            steps = ", ".join(self.module(p, f"{where}.parametrizations.{name}.{i}", indent + 4)
                              for i, p in enumerate(chain))
            made = _call("_parametrized", [made, repr(name), repr(tuple(value.shape)), str(value.dtype), f"[{steps}]"],
                         indent)
        return made

    def value(self, v: Any, where: str) -> str:
        """``v`` as a Python expression generated code can evaluate."""
        if v is None or isinstance(v, (bool, int, str)):
            return repr(v)
        if isinstance(v, float):
            return repr(v) if math.isfinite(v) else f"float({str(v)!r})"
        if isinstance(v, torch.dtype):
            return str(v)
        if isinstance(v, torch.device):
            return f"torch.device({str(v)!r})"
        if type(v) in (tuple, list):
            items = ", ".join(self.value(x, where) for x in v)
            return f"({items},)" if type(v) is tuple and len(v) == 1 else f"({items})" if type(v) is tuple else f"[{items}]"
        if type(v) in (set, frozenset):
            return f"{type(v).__name__}([{', '.join(self.value(x, where) for x in sorted(v, key=repr))}])"
        if type(v) is dict:
            return "{" + ", ".join(f"{self.value(k, where)}: {self.value(x, where)}" for k, x in v.items()) + "}"
        ref = _ref(v) if isinstance(v, (types.FunctionType, types.BuiltinFunctionType, type)) else None
        if ref is not None:
            return f"_resolve({ref!r})"
        owner = getattr(v, "__self__", None)  # a class's bound method (an autograd.Function's apply)
        if isinstance(v, types.MethodType) and isinstance(owner, type) and _ref(owner) is not None:
            return f"getattr(_resolve({_ref(owner)!r}), {v.__func__.__name__!r})"
        if id(v) in self._names:
            return self._names[id(v)]
        cls = _ref(type(v))
        if cls is not None and hasattr(v, "__dict__") and not isinstance(v, (nn.Module, torch.Tensor)):
            attrs = [(repr(k), self.value(x, f"{where}.{k}")) for k, x in vars(v).items()]
            name = f"{type(v).__name__.lower()}_{len(self.definitions)}"
            self.definitions.append(f"{name} = {_call('_object', [repr(cls), _mapping(attrs, 12)], 8)}")
            self._names[id(v)] = name
            return name
        raise UnitcheckError(f"generated code cannot hold the kept module's attribute {where} "
                             f"(a {type(v).__name__})")


SKELETON_HELPERS = '''def _resolve(qualified: str) -> object:
    import importlib

    module, _, qual = qualified.partition(":")
    obj = importlib.import_module(module)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def _object(qualified: str, attrs: dict[str, object]) -> object:
    """An object of the original's class with its attributes (a model config), built without
    its constructor."""
    cls = _resolve(qualified)
    obj = cls.__new__(cls)
    obj.__dict__.update(attrs)
    return obj


def _instance(qualified: str, attrs: dict[str, object], children: dict[str, nn.Module | None],
              unset: tuple[list[str], list[str]] = ([], [])) -> nn.Module:
    """A module of the original's class, built without its constructor (the weights follow;
    ``unset`` names the parameters and buffers it holds as None)."""
    cls = _resolve(qualified)
    module = cls.__new__(cls)
    nn.Module.__init__(module)
    module.__dict__.update(attrs)
    for name, child in children.items():
        module.add_module(name, child)
    for name in unset[0]:
        module.register_parameter(name, None)
    for name in unset[1]:
        module.register_buffer(name, None)
    return module


def _parametrized(module: nn.Module, name: str, shape: tuple[int, ...], dtype: torch.dtype,
                  steps: list[nn.Module]) -> nn.Module:
    """``module`` with the parametrizations of its tensor ``name`` (weight normalisation)."""
    from torch.nn.utils import parametrize

    module.register_parameter(name, nn.Parameter(torch.zeros(shape, dtype=dtype)))
    for step in steps:
        parametrize.register_parametrization(module, name, step, unsafe=True)
    return module


def _kept(root: nn.Module, name: str, module: nn.Module) -> None:
    *path, leaf = name.split(".")
    _module(root, path).add_module(leaf, module)
'''
