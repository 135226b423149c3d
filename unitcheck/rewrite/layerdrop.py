"""Branches on random draws in generated code (LayerDrop). The capture holds the path on which
every layer runs, asserts each draw, and marks what each draw guards (:mod:`unitcheck.draws`);
here each guarded run of nodes becomes a method of the generated module, called through
:func:`unitcheck.runtime.layer_drop` with the draw, so that training skips the layers the
model skips and draws the same random numbers as it does."""

from __future__ import annotations

import torch.fx as fx

from ..draws import GUARDED, READ, SKIP, checks, random_ops
from ..errors import UnitcheckError
from ..fxutil import base_name, module_path
from ..runtime import layer_drop, update_buffer


class LayerDropError(UnitcheckError, ValueError):
    """A draw's guarded nodes do not form one call that generated code can branch on."""


def _drop_checks(graph: fx.Graph, read: fx.Node) -> None:
    """Erase the assertions that held the draw to the capture's path, and the symbolic values
    only they used."""
    held = checks([read])
    for n in [n for n in graph.nodes if n in held and base_name(n) == "_assert_scalar"]:
        graph.erase_node(n)
    for n in reversed([n for n in graph.nodes if n in held]):
        if not n.users:
            graph.erase_node(n)


def _region(graph: fx.Graph, k: int) -> list[fx.Node]:
    """The nodes draw ``k`` guards: those the capture marked, the buffer updates of their values
    (a dropped layer updates no batch-norm statistics), and any node a rewrite added whose every
    user is one of them."""
    inside = {n for n in graph.nodes if n.meta.get(GUARDED) == k}
    for n in graph.nodes:
        if n.target is update_buffer and n.args[1] in inside:
            inside.add(n)
    for n in reversed(list(graph.nodes)):
        if n not in inside and n.users and n.op == "call_function" and GUARDED not in n.meta \
                and all(u in inside for u in n.users) and any(a in inside for a in n.all_input_nodes):
            inside.add(n)
    return [n for n in graph.nodes if n in inside]


def branch_on_draws(graph: fx.Graph, name: str) -> dict[str, fx.Graph]:
    """Turn each guarded run of ``graph`` into a call that its draw decides; returns the methods
    the runs became (method name -> graph)."""
    methods: dict[str, fx.Graph] = {}
    for read in [n for n in graph.nodes if READ in n.meta]:
        k, kept = read.meta[READ]
        _drop_checks(graph, read)
        region = _region(graph, k)
        if region:  # else the draw guards nothing the graph computes
            called = _called(read, region) or f"layer{k}"
            method = f"_{name.lstrip('_')}_{called}"
            method = method if method not in methods else f"{method}_{k}"
            methods[method] = _as_call(graph, read, kept, region, method, called)
    try:
        graph.lint()
    except RuntimeError as err:
        raise LayerDropError(f"the layers its draws skip are not calls generated code can make ({err})") from None
    return methods


def _called(read: fx.Node, region: list[fx.Node]) -> str:
    """The name of the module the draw guards, below the module that draws (``layers_0``): what
    the call's value is called in the generated code."""
    outer = module_path(read)
    for n in region:
        rest = module_path(n).removeprefix(outer + "." if outer else "").split(".") if module_path(n) != outer else []
        if rest and rest != [""]:
            return "_".join(rest[:2] if len(rest) > 1 and rest[1].isdigit() else rest[:1])
    return ""


def _as_call(graph: fx.Graph, read: fx.Node, kept: int, region: list[fx.Node], method: str,
             called: str) -> fx.Graph:
    """Replace ``region`` by ``layer_drop(read, kept, self.<method>, dropped, *inputs)``; returns
    the method's graph."""
    k = read.meta[READ][0]
    inside = set(region)
    outs = [n for n in region if any(u not in inside for u in n.users)]
    skips = [n for n in graph.nodes if k in n.meta.get(SKIP, ())]
    if len(outs) != 1 or len(skips) != 1:
        raise LayerDropError(f"the layer that a random draw skips in training (LayerDrop, read at {read.name}) gives "
                             f"{len(outs)} values after the rewrite, not one: set the model's layer drop to 0 to "
                             "rewrite it (a Hugging Face model: --set layerdrop=0, or encoder_layerdrop=0 and "
                             "decoder_layerdrop=0)")
    computed = [n for n in region if n.target is not update_buffer]  # the updates move into the call
    nodes = list(graph.nodes)
    if any(n not in inside and n.target in random_ops() for n in nodes[nodes.index(computed[0]):nodes.index(computed[-1])]):
        raise LayerDropError(f"a random draw outside the layer the draw at {read.name} skips runs inside it")
    inputs = list(dict.fromkeys(a for n in region for a in n.all_input_nodes if a not in inside))
    sub = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for a in inputs:
        env[a] = sub.get_attr(str(a.target)) if a.op == "get_attr" else sub.placeholder(a.name)
    for n in region:
        env[n] = sub.node_copy(n, env.__getitem__)
    sub.output(env[outs[0]])
    with graph.inserting_after(computed[-1]):
        layer = graph.get_attr(method)
    with graph.inserting_after(layer):
        call = graph.create_node("call_function", layer_drop,
                                 (read, kept, layer, skips[0], *[a for a in inputs if a.op != "get_attr"]),
                                 name=called)
    call.meta = {key: v for key, v in outs[0].meta.items() if key != GUARDED}
    outs[0].replace_all_uses_with(call, delete_user_cb=lambda u: u not in inside)
    for n in reversed(region):
        graph.erase_node(n)
    for a in inputs:
        if a.op == "get_attr" and not a.users:
            graph.erase_node(a)
    return sub
