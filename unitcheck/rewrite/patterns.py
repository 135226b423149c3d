"""Pattern/replacement machinery shared by the graph rewrites.

A rewrite is a list of rules; each rule is a named function ``rule(ctx) -> None`` that finds its
pattern in ``ctx.graph`` and replaces it, logging ``before -> after`` through ``ctx.log``. Rules
compose by running in order on one :class:`RewriteContext` (like tinygrad's matchers composed
with ``+``, with named callbacks instead of lambdas).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch import nn

from ..canonical import canonical, orthogonal
from ..fxutil import IDENTITY_OPS, MOVEMENT_OPS, base_name, elementwise_extreme, module_path
from ..unitgraph import UnitGraph
from .layout import over_features

aten = torch.ops.aten

__all__ = ["RewriteContext", "Rule", "NewParam", "through_casts", "through_moves", "set_attr", "attention_scores", "scalar"]



@dataclass
class NewParam:
    name: str  # qualified name on the rewritten module
    value: torch.Tensor
    unit: str = "1"
    why: str = ""


@dataclass
class RewriteContext:
    """The graph being rewritten, its unit graph, and what the rules did."""

    ug: UnitGraph
    new_params: dict[str, NewParam] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    unhandled: list[dict[str, str]] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    declared: dict[str, str] = field(default_factory=dict)  # existing parameters -> their unit now
    dtype: torch.dtype = torch.float32  # the model's float dtype: new parameters are made in it

    @property
    def graph(self) -> fx.Graph:
        return self.ug.graph

    def note(self, rule: str, before: str, after: str) -> None:
        self.log.append(f"[{rule}] {before} -> {after}")

    def skip(self, module: str, reason: str) -> None:
        self.unhandled.append({"module": module or "<root>", "reason": reason})

    def declare(self, name: str, unit: str = "1") -> None:
        """An existing parameter the rewrite gives a unit by construction (a gain inside a
        canonicalised activation argument); the generated ``__units__`` declares it."""
        self.declared[name] = unit

    def constant(self, name: str, value: torch.Tensor, unit: str, why: str) -> fx.Node:
        """A new buffer carrying ``unit`` (not learned), referenced by a get_attr node."""
        return self._leaf(name, value, unit, why, learned=False)

    def param(self, name: str, value: torch.Tensor, why: str, unit: str = "1") -> fx.Node:
        """A new learnable parameter (dimensionless unless ``unit`` says otherwise), referenced by
        a get_attr node, in the dtype the model's parameters have (a float32 gain would promote a
        bfloat16 model's queries, and attention refuses keys of another dtype)."""
        return self._leaf(name, value, unit, why, learned=True)

    def _leaf(self, name: str, value: torch.Tensor, unit: str, why: str, learned: bool) -> fx.Node:
        if name in self.new_params:
            raise ValueError(f"{'parameter' if learned else 'buffer'} {name} created twice")
        value = value.to(self.dtype) if value.is_floating_point() else value
        self.new_params[name] = NewParam(name, value, unit, why)
        set_attr(self.ug.traced.gm, name, nn.Parameter(value.clone()) if learned else value.clone())
        first = next(n for n in self.graph.nodes if n.op != "placeholder")
        with self.graph.inserting_before(first):
            node = self.graph.create_node("get_attr", name)  # resolved on the generated module
        node.meta["val"] = value
        return node

    def call(self, target: Callable[..., Any] | Any, args: tuple[Any, ...], after: fx.Node,
             like: fx.Node | None = None, kwargs: dict[str, Any] | None = None) -> fx.Node:
        """Insert ``target(*args)`` right after ``after``; copies module/stack metadata. C and
        P_perp act over the value's feature axis (the channels of a feature map) where it is not
        the last."""
        if target in _PROMOTING:
            args, after = self._in_operand_dtype(args, after)
        if target in (canonical, orthogonal) and "dim" not in (kwargs or {}):
            kwargs = {**(kwargs or {}), **over_features(args[-1])}
        with self.graph.inserting_after(after):
            node = self.graph.call_function(target, args, kwargs or {})
        src = like if like is not None else after
        for key in ("nn_module_stack", "stack_trace"):
            if key in src.meta:
                node.meta[key] = src.meta[key]
        if target in (canonical, orthogonal) and isinstance(args[0], fx.Node) and "val" in args[0].meta:
            node.meta["val"] = args[0].meta["val"]  # C and P_perp keep their input's shape and dtype
        return node

    def _new_parameter(self, a: Any) -> torch.Tensor | None:
        """The value of the new parameter ``a`` reads (through views), if it reads one."""
        a = through_moves(a)
        if isinstance(a, fx.Node) and a.op == "get_attr" and a.target in self.new_params:
            return self.new_params[str(a.target)].value
        return None

    def _in_operand_dtype(self, args: tuple[Any, ...], after: fx.Node) -> tuple[tuple[Any, ...], fx.Node]:
        """A new parameter cast to the float dtype of the value it combines with, where they
        differ: inside an autocast region queries are bfloat16 in a float32 model, and a float32
        gain would promote them (attention refuses keys of another dtype)."""
        dtypes = [a.meta["val"].dtype for a in args if isinstance(a, fx.Node) and self._new_parameter(a) is None
                  and isinstance(a.meta.get("val"), torch.Tensor) and a.meta["val"].is_floating_point()]
        out = []
        for a in args:
            value = self._new_parameter(a)
            if dtypes and value is not None and value.dtype != dtypes[0]:
                with self.graph.inserting_after(after):
                    a = after = self.graph.call_function(aten._to_copy.default, (a,), {"dtype": dtypes[0]})
            out.append(a)
        return tuple(out), after


_PROMOTING = {aten.mul.Tensor, aten.div.Tensor, aten.add.Tensor, aten.sub.Tensor}

Rule = Callable[[RewriteContext], None]


def set_attr(root: nn.Module, qualified: str, value: torch.Tensor | nn.Module) -> None:
    """Register a parameter, buffer or module under a dotted name, creating empty containers on
    the way."""
    *path, leaf = qualified.split(".")
    mod = root
    for part in path:
        child = getattr(mod, part, None)
        if not isinstance(child, nn.Module):
            child = nn.Module()
            mod.add_module(part, child)
        mod = child
    if isinstance(value, nn.Module):
        mod.add_module(leaf, value)
    elif isinstance(value, nn.Parameter):
        mod.register_parameter(leaf, value)
    else:
        mod.register_buffer(leaf, value)


def through_casts(node: fx.Node) -> fx.Node:
    """The value a chain of casts/copies/asserts forwards (first argument)."""
    while base_name(node) in IDENTITY_OPS and node.args and isinstance(node.args[0], fx.Node):
        node = node.args[0]
    return node


def through_moves(node: Any, but: Iterable[str] = ()) -> Any:
    """The value a chain of moves (views, transposes, casts, ``getitem``...) reads, stopping at
    the ops named in ``but``; a non-node is returned as it is."""
    stop = set(but)
    while isinstance(node, fx.Node) and base_name(node) in MOVEMENT_OPS and base_name(node) not in stop:
        node = node.args[0]
    return node


def users_through_casts(node: fx.Node) -> Iterable[fx.Node]:
    for u in list(node.users):
        if base_name(u) in IDENTITY_OPS and u.args and u.args[0] is node:
            yield from users_through_casts(u)
        else:
            yield u


def describe(node: fx.Node) -> str:
    return f"{base_name(node)}@{module_path(node) or '<root>'}"


def scalar(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _einsum(node: Any) -> tuple[str, str, str, fx.Node, fx.Node] | None:
    """An ``einsum`` of two tensors with an explicit output: its operands' indices, the
    output's, and the operands."""
    if not (isinstance(node, fx.Node) and base_name(node) == "einsum" and len(node.args) == 2):
        return None
    equation, operands = node.args
    if not isinstance(equation, str) or not isinstance(operands, (list, tuple)) or len(operands) != 2:
        return None
    a_node, b_node = operands
    inputs, arrow, out = equation.replace(" ", "").partition("->")
    parts = inputs.split(",")
    if not (isinstance(a_node, fx.Node) and isinstance(b_node, fx.Node)) or not arrow or "." in equation \
            or len(parts) != 2 or not all(parts):
        return None
    return parts[0], parts[1], out, a_node, b_node


def einsum_pair(node: Any) -> tuple[fx.Node, fx.Node] | None:
    """The operands of an ``einsum`` of two tensors that sums over one index, the last of each
    (attention's q . k^T written ``einsum("bqhd,bkhd->bhqk", q, k)``, a head's
    ``einsum("btd,vd->btv", h, W)``); None for any other einsum or op."""
    spec = _einsum(node)
    if spec is None:
        return None
    a, b, out, a_node, b_node = spec
    if (set(a) | set(b)) - set(out) != {a[-1]} or a[-1] != b[-1]:
        return None
    return a_node, b_node


def einsum_linear(node: Any) -> bool:
    """An einsum_pair that is ``linear(x, W)``: W a matrix, the output x's other indices then W's
    (``"btd,vd->btv"``)."""
    spec = _einsum(node)
    return spec is not None and einsum_pair(node) is not None and len(spec[1]) == 2 \
        and spec[2] == spec[0][:-1] + spec[1][0]


def is_size(node: fx.Node) -> bool:
    """A symbolic size (``x.size(1)`` under dynamic shapes): a shape, not data."""
    return isinstance(node.meta.get("val"), (torch.SymInt, int)) and not isinstance(node.meta.get("val"), bool)


def holds_input(ctx: RewriteContext, node: fx.Node, memo: dict[fx.Node, bool]) -> bool:
    """Is ``node`` computed from a model input's values? A value of parameters, buffers and
    constants alone (Dory's ``s_gate^2``, a Mamba ``dt_bias``, a causal-mask buffer sliced to the
    input's length) is a parameter term."""
    leaves = ctx.ug.traced.leaves
    stack = [node]
    while stack:
        n = stack[-1]
        if n in memo:
            stack.pop()
            continue
        if n.op == "placeholder":
            leaf = leaves.get(n.name)
            memo[n] = leaf is None or leaf.kind == "input"
            stack.pop()
            continue
        ins = [p for p in n.all_input_nodes if not is_size(p)]
        todo = [p for p in ins if p not in memo]
        if todo:
            stack.extend(todo)
            continue
        memo[n] = any(memo[p] for p in ins)
        stack.pop()
    return memo[node]


def product_operands(node: Any) -> tuple[fx.Node, ...]:
    """The two matrices a product of attention_scores multiplies."""
    pair = einsum_pair(node)
    if pair is not None:
        return pair
    args = node.args[1:3] if base_name(node) == "baddbmm" else node.args[:2]
    return tuple(a for a in args if isinstance(a, fx.Node))


def attention_scores(node: Any, constant: Callable[[fx.Node], bool] | None = None,
                     terms: list[fx.Node] | None = None, path: list[fx.Node] | None = None) -> fx.Node | None:
    """The q . k^T product explicit attention code feeds its softmax, looking through moves,
    casts, a constant scaling, a soft cap (Gemma-2's tanh), a mask or bias added or a floor
    taken (XGLM's ``max(w, finfo.min)``: the one operand that holds the product), a multiplicative mask that ``constant`` says holds no
    input (GPT's ``w * b + -1e4 * (1 - b)``) and a join with learned sink logits (``cat([w,
    sinks])``). The operands added or joined to the scores on the way are put in ``terms``, the
    values on the way from the scores (the logits at each step) in ``path``."""
    while isinstance(node, fx.Node):
        if path is not None:
            path.append(node)
        name = base_name(node)
        if name in ("matmul", "bmm", "baddbmm") or einsum_pair(node) is not None:
            return node
        if name in ("mul", "div") and len(node.args) == 2 and scalar(node.args[1]) or name in MOVEMENT_OPS or name == "tanh":
            node = node.args[0]
        elif name in ("add", "sub", "masked_fill", "where", "mul", "cat") or elementwise_extreme(node):
            operands: Any = node.args[0] if name == "cat" else node.args
            found = [a for a in operands if isinstance(a, fx.Node) and attention_scores(a, constant) is not None]
            if len(found) > 1 and constant is not None:  # q . k^T beside a product of q with a table
                found = [a for a in found if not any(map(constant, product_operands(attention_scores(a, constant))))]
            if len(found) != 1:
                return None
            if name == "mul" and not all(constant is not None and constant(a) for a in node.args
                                         if isinstance(a, fx.Node) and a is not found[0]):
                return None  # a product with another input-dependent value is not a mask
            if terms is not None and name != "mul":
                terms.extend(a for a in operands if isinstance(a, fx.Node) and a is not found[0])
            node = found[0]
        else:
            return None
    return None
