"""Small facts about one FX node, spelled once: its op's name, its module, its source line, what
its recorded value holds, and the tables of ops that only move or copy values.

Everything that asks "what op is this" (rules, oracle, rewriter, diagnostics, reports) asks here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.fx as fx
from torch.utils import _pytree as pytree

from .diagnostics import Location

_aten = torch.ops.aten

__all__ = [
    "ROOT", "ancestors", "generated_module_paths", "restore_module_paths", "IDENTITY_OPS", "VIEW_OPS", "MOVEMENT_OPS", "RUN_VIEW_AS", "base_name", "op_name", "module_path", "location",
    "user_frame", "frames_from_text", "float_tensors", "has_float", "is_index_value", "defines_forward",
]

# ops whose output equals their input (same values, same shape): casts, copies, asserts, and
# dropout as traced in eval mode
IDENTITY_OPS = frozenset({
    "_to_copy", "to", "type_as", "_to_dtype", "clone", "alias", "contiguous", "detach",
    "lift_fresh_copy", "_assert_tensor_metadata", "dropout", "float", "double", "half", "bfloat16",
})
# ops that rearrange elements without changing them
VIEW_OPS = frozenset({
    "view", "_unsafe_view", "reshape", "permute", "transpose", "t", "expand", "slice", "select",
    "squeeze", "unsqueeze", "flatten", "unflatten", "_reshape_alias", "view_as", "reshape_as",
    "expand_as", "movedim", "swapaxes", "swapdims", "getitem",
})
MOVEMENT_OPS = IDENTITY_OPS | VIEW_OPS
LEAF_KEY = "unitcheck_leaf"  # placeholder.meta: the leaf's kind (param, buffer, constant, input)

_aten = torch.ops.aten
# Exported graphs bake in the strides a kernel produced while tracing; eager kernels (under
# autograd, in other dtypes) may lay outputs out differently, so traced views run as reshapes
RUN_VIEW_AS = {_aten.view.default: _aten.reshape.default, _aten._unsafe_view.default: _aten.reshape.default}


def base_name(node: fx.Node) -> str:
    """The op's short name: ``add`` for ``aten.add.Tensor``, ``operator.add``, ``Tensor.add``."""
    t = node.target
    if isinstance(t, torch._ops.OpOverload):
        return str(t.overloadpacket.__name__)
    if isinstance(t, str):
        return t
    return str(getattr(t, "__name__", t))


def elementwise_extreme(node: fx.Node) -> bool:
    """``maximum``/``minimum`` and the binary ``max``/``min`` (``torch.max(a, b)`` is
    ``aten.max.other``), not the reductions."""
    t = node.target
    if not isinstance(t, torch._ops.OpOverload):
        return False
    name = t.overloadpacket.__name__
    return name in ("maximum", "minimum", "fmax", "fmin") or (name in ("max", "min") and t._overloadname == "other")


def op_name(node: fx.Node) -> str:
    """A readable, stable op name: ``aten.add.Tensor``, ``torch.nn.functional.gelu``, ``Tensor.view``."""
    t = node.target
    if node.op == "call_method":
        return f"Tensor.{t}"
    if node.op == "call_module":
        return f"module:{t}"
    if isinstance(t, torch._ops.OpOverload):
        return str(t)
    mod = getattr(t, "__module__", None) or ""
    name = getattr(t, "__qualname__", None) or getattr(t, "__name__", None) or str(t)
    if mod in ("_operator", "operator"):
        return f"operator.{name}"
    return f"{mod}.{name}" if mod else str(name)


ROOT = "<root>"  # how reports and generated code spell the root module's path
_HEADER = re.compile(r"^\s*# \[(?P<path>[^\]]*)\] ?(?P<cls>[^,\n]*)")
_FILE_LINE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


def generated_module_paths(lines: list[str]) -> dict[int, tuple[str, str]]:
    """Line number (1-based) -> (module path, class) in a generated ``model.py``: each
    ``# [path] Class, file:line`` comment names the original module of the lines below it,
    up to the next one or the next ``def``."""
    out: dict[int, tuple[str, str]] = {}
    current: tuple[str, str] | None = None
    for i, line in enumerate(lines, 1):
        m = _HEADER.match(line)
        if m:
            path = m.group("path")
            current = ("" if path == ROOT else path, m.group("cls").strip())
        elif line.lstrip().startswith("def "):
            current = None
        elif current is not None:
            out[i] = current
    return out


def restore_module_paths(graph: fx.Graph, file: str, lines: list[str]) -> int:
    """Give nodes captured from a generated module (one flat ``forward``) the module paths its
    header comments name, as ``nn_module_stack`` entries; returns how many nodes got one."""
    paths = generated_module_paths(lines)
    done = 0
    for node in graph.nodes:
        text = node.meta.get("stack_trace") or ""
        for m in reversed(list(_FILE_LINE.finditer(text))):
            hit = paths.get(int(m.group("line"))) if m.group("file") == file else None
            if hit is None:
                continue
            path, cls = hit
            parts = path.split(".") if path else []
            stack = {f"L__self__.{'.'.join(parts[:i])}": (".".join(parts[:i]), cls if i == len(parts) else "")
                     for i in range(1, len(parts) + 1)}
            node.meta["nn_module_stack"] = stack or node.meta.get("nn_module_stack", {})
            done += 1
            break
    return done


def module_path(node: fx.Node) -> str:
    """Qualified name of the innermost module the node was recorded in ('' for the root)."""
    stack = node.meta.get("nn_module_stack")
    return _normalised(str(list(stack.values())[-1][0])) if stack else ""


def module_stack(node: fx.Node) -> list[tuple[str, str]]:
    """(qualified name, class name) of each module below the root the node was recorded in,
    outermost first."""
    out = []
    for path, cls in (node.meta.get("nn_module_stack") or {}).values():
        name = cls if isinstance(cls, str) else getattr(cls, "__qualname__", str(cls))
        if where := _normalised(str(path)):
            out.append((where, name.rsplit(".", 1)[-1]))
    return out


def _normalised(path: str) -> str:
    if path.startswith("_empty_nn_module_stack"):  # sizes export's runtime-assert pass inserted
        return ""
    # strict export / dynamo spell paths as L['self'].h[0].attn; normalise to h.0.attn
    path = re.sub(r"^L\['self'\]\.?", "", path)
    path = re.sub(r"\[(\d+)\]", r".\1", path)
    path = re.sub(r"\['([^']+)'\]", r".\1", path)
    return path.strip(".")


# -- source locations -------------------------------------------------------------------------

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_BUNDLED_MODELS = os.path.join(_OWN_DIR, "models") + os.sep  # where a non-editable install puts them
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>[^\n]+)\n(?P<code>[^\n]*)')


def user_frame(file: str) -> bool:
    """A frame in the user's code: not torch, not unitcheck (but the bundled models are user code)."""
    if file.startswith(_BUNDLED_MODELS):
        return True
    return not (file.startswith(_TORCH_DIR) or file.startswith(_OWN_DIR) or file.startswith("<"))


def frames_from_text(text: str) -> list[tuple[str, int, str]]:
    """(file, line, code) of every frame in a formatted stack trace."""
    return [(m["file"], int(m["line"]), m["code"].strip()) for m in _FRAME.finditer(text + "\n")]


def innermost_line(text: str, keep: Callable[[str], bool] | None = None) -> str:
    """``file:line`` of the innermost frame of a formatted stack trace (of those whose file
    ``keep`` accepts), or ""."""
    frames = [f for f in frames_from_text(text) if keep is None or keep(f[0])]
    return f"{frames[-1][0]}:{frames[-1][1]}" if frames else ""


def location(node: fx.Node) -> Location | None:
    """The innermost frame of the node's stack trace that lies in the user's code."""
    text = node.meta.get("stack_trace")
    if text:
        for file, line, code in reversed(frames_from_text(text)):
            if user_frame(file):
                return Location(file, line, code)
    return None


# -- recorded values --------------------------------------------------------------------------


def _valued(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())


def float_tensors(x: Any) -> list[torch.Tensor]:
    """The float and complex tensors in a (nested) value, in order: what carries a unit."""
    return [t for t in pytree.tree_leaves(x) if _valued(t)]


# ops whose result jumps as their input moves
ROUNDING_OPS = frozenset({"floor", "ceil", "round", "trunc"})


def integer_cast(node: fx.Node) -> bool:
    """A cast of a float tensor to an integer dtype (not bool): it truncates, as ``trunc`` does."""
    src = node.args[0] if node.args and isinstance(node.args[0], fx.Node) else None
    val, src_val = node.meta.get("val"), src.meta.get("val") if src is not None else None
    return (isinstance(val, torch.Tensor) and isinstance(src_val, torch.Tensor) and src_val.is_floating_point()
            and not (val.is_floating_point() or val.is_complex()) and val.dtype != torch.bool)


def has_float(x: Any) -> bool:
    return any(_valued(t) for t in pytree.tree_leaves(x))


def is_index_value(x: Any) -> bool:
    """Integer or boolean data (tensors or Python/symbolic numbers): index-kind, never rescaled."""
    if isinstance(x, torch.Tensor):
        return not (x.is_floating_point() or x.is_complex())
    return isinstance(x, (int, bool, torch.SymInt, torch.SymBool))


def ancestors(nodes: Iterable[fx.Node], inputs: Callable[[fx.Node], Iterable[fx.Node]] | None = None) -> set[fx.Node]:
    """``nodes`` and every node they are computed from (``inputs(n)``: the inputs to follow,
    all of them by default)."""
    follow = inputs or (lambda n: n.all_input_nodes)
    seen = set(nodes)
    stack = list(seen)
    while stack:
        for p in follow(stack.pop()):
            if p not in seen:
                seen.add(p)
                stack.append(p)
    return seen


def row_of_index_write(node: fx.Node) -> fx.Node | None:
    """``select(where(arange == k, x, y), dim, j)`` is how ``y[k] = x`` lowers, read back at row j:
    the row comes whole from ``x`` (j == k) or from ``y`` (j != k), so it has that operand's unit,
    not the mix of both (a row of the zero buffer SuperPoint pads its scores into, beside a row
    written with another unit). None where the select is not of that pattern. The unit rule and
    the local oracle read the pattern alike: the oracle rescales the where's operands, not the mix."""
    if node.target is not _aten.select.int:
        return None
    src, dim, j = (tuple(node.args) + (None, None, None))[:3]
    if not (isinstance(src, fx.Node) and src.target is _aten.where.self and isinstance(dim, int)
            and isinstance(j, int) and j >= 0):
        return None
    cond, x, y = src.args[:3]
    if not (isinstance(cond, fx.Node) and cond.target is _aten.eq.Scalar and isinstance(cond.args[1], int)):
        return None
    rows = cond.args[0]
    if not (isinstance(rows, fx.Node) and rows.target in (_aten.view.default, _aten.reshape.default)):
        return None
    steps, shape = rows.args[0], rows.args[1]
    if not isinstance(shape, (list, tuple)):
        return None
    rank = len(shape)
    out = src.meta.get("val")
    if not (isinstance(steps, fx.Node) and isinstance(out, torch.Tensor) and out.dim() >= rank
            and steps.target in (_aten.arange.default, _aten.arange.start_step, _aten.arange.start)):
        return None
    start = steps.args[0] if steps.target is not _aten.arange.default and len(steps.args) > 1 else 0
    step = steps.args[2] if steps.target is _aten.arange.start_step and len(steps.args) > 2 else 1
    axis = dim - (out.dim() - rank)  # the view is aligned with the where's last dims
    if start != 0 or step != 1 or not 0 <= axis < rank or any(s != 1 for i, s in enumerate(shape) if i != axis):
        return None
    branch = x if j == cond.args[1] else y
    return branch if isinstance(branch, fx.Node) else None


def called_name(node: fx.Node) -> str:
    """The name of the torch function or method the model called for ``node`` (``add_``,
    ``__getitem__``), as the capture recorded it in ``torch_fn``; "" where it recorded none."""
    fn = node.meta.get("torch_fn")
    return str(fn[1]).rpartition(".")[2] if isinstance(fn, tuple) and len(fn) > 1 and fn[1] else ""


def defines_forward(cls: type) -> bool:
    """Does a module class define ``forward``? ``nn.Module``'s own raises NotImplementedError: a
    class without one (a model that only generates) has no call to capture."""
    return getattr(getattr(cls, "forward", None), "__name__", "") != "_forward_unimplemented"

