"""Aligning a float32 capture with a float64 one: every cast only one capture makes ends up in
the generated code, written relative to the model's dtype."""

from __future__ import annotations

import pytest
import torch
import torch.fx as fx

from unitcheck.rewrite.variants import align

aten = torch.ops.aten


def _op(g: fx.Graph, target: object, args: tuple[object, ...], val: torch.Tensor,
        kwargs: dict[str, object] | None = None) -> fx.Node:
    """A node with the value a capture records for it."""
    n = g.call_function(target, args, kwargs or {})  # type: ignore[arg-type]
    n.meta["val"] = val
    return n


def _attention(cast_back: bool) -> fx.Graph:
    """MPT's lowered attention: ``softmax(s.float()).to(v.dtype)``, then the copy a dropout of
    p = 0 leaves, then ``@ v``. In the float32 capture the cast back is elided."""
    g = fx.Graph()
    s, v = g.placeholder("s"), g.placeholder("v")
    s.meta["val"] = torch.empty(2, 3, 3)  # already cast to float32 (``.float()``)
    v.meta["val"] = torch.empty(2, 3, 3, dtype=torch.float64 if cast_back else torch.float32)
    w = _op(g, aten._softmax.default, (s, -1, False), torch.empty(2, 3, 3))
    if cast_back:
        w = _op(g, aten._to_copy.default, (w,), torch.empty(2, 3, 3, dtype=torch.float64), {"dtype": torch.float64})
    c = _op(g, aten.clone.default, (w,), w.meta["val"])
    g.output(g.call_function(aten.matmul.default, (c, v)))
    return g


def test_a_cast_only_the_other_capture_makes_behind_a_copy_is_kept() -> None:
    a = _attention(cast_back=False)
    diffs = align(a, _attention(cast_back=True))
    casts = [n for n in a.nodes if n.target is aten.to.dtype]
    assert [(n, key, x, y) for n, key, x, y in diffs] == [(*casts, "dtype", torch.float32, torch.float64)], a
    matmul = next(n for n in a.nodes if n.target is aten.matmul.default)
    path = [matmul.args[0]]
    while path[-1].target is not aten._softmax.default:
        path.append(path[-1].args[0])
    assert casts[0] in path  # the product reads the probabilities through the cast


def _rotary_view(copy_first: bool) -> fx.Graph:
    """DeepSeek-V2's ``x.float().reshape(..., -1, 2)``: the float64 capture copies first and keeps
    the ``-1``; the float32 capture (no copy) writes the size out."""
    g = fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.empty(2, 8, dtype=torch.float64 if copy_first else torch.float32)
    if copy_first:
        x = _op(g, aten._to_copy.default, (x,), torch.empty(2, 8), {"dtype": torch.float32})
    g.output(_op(g, aten.view.default, (x, [2, -1, 2] if copy_first else [2, 4, 2]), torch.empty(2, 4, 2)))
    return g


def test_views_that_spell_a_size_differently_align() -> None:
    a = _rotary_view(copy_first=False)
    diffs = align(a, _rotary_view(copy_first=True))
    casts = [n for n in a.nodes if n.target is aten.to.dtype]
    assert [(n, key) for n, key, _, _ in diffs] == [(casts[0], "dtype")]  # the copy, kept relative


def _zeros_then_product(cast: str | None) -> fx.Graph:
    """Qwen3.5's gated delta rule: ``torch.zeros(...).to(value)`` (made in the default dtype,
    cast to the input's), then ``k @ state``. The float32 capture has no cast; the float64 one
    casts as export's training IR writes it (``to.dtype``) or as a lowered graph does, with a
    memory format or without."""
    g = fx.Graph()
    k = g.placeholder("k")
    f64 = cast is not None
    k.meta["val"] = torch.empty(2, 4, dtype=torch.float64 if f64 else torch.float32)
    z = _op(g, aten.zeros.default, ([4, 4],), torch.empty(4, 4))
    if cast == "to":
        z = _op(g, aten.to.dtype, (z, torch.float64), torch.empty(4, 4, dtype=torch.float64))
    elif cast == "_to_copy":
        z = _op(g, aten._to_copy.default, (z,), torch.empty(4, 4, dtype=torch.float64), {"dtype": torch.float64})
    elif cast == "contiguous":  # ``.to(torch.float64, memory_format=torch.contiguous_format)``
        z = _op(g, aten._to_copy.default, (z,), torch.empty(4, 4, dtype=torch.float64),
                {"dtype": torch.float64, "memory_format": torch.contiguous_format})
    g.output(_op(g, aten.matmul.default, (k, z), k.meta["val"]))
    return g


@pytest.mark.parametrize("cast", ["to", "_to_copy", "contiguous"])
def test_a_cast_of_a_made_tensor_only_the_other_capture_makes_is_kept(cast: str) -> None:
    a = _zeros_then_product(None)
    diffs = align(a, _zeros_then_product(cast))
    casts = [n for n in a.nodes if n.target is aten.to.dtype]
    assert [(n, key, x, y) for n, key, x, y in diffs] == [(*casts, "dtype", torch.float32, torch.float64)], a
    matmul = next(n for n in a.nodes if n.target is aten.matmul.default)
    assert matmul.args[1] is casts[0]  # the product reads the zeros through the cast
    assert casts[0].kwargs == ({"memory_format": torch.contiguous_format} if cast == "contiguous" else {})


def _asserted(node_name: str, bound: int) -> fx.Graph:
    """A runtime assertion as export writes it: its message cites its comparison node, which
    each capture numbers on its own (Qwen3-VL's vision grid: 'eq_539' in float32, 'eq_547' in
    float64)."""
    g = fx.Graph()
    n = g.placeholder("n")
    n.meta["val"] = 4
    eq = g.call_function(torch.ops.aten.eq.Scalar, (n, bound))
    g.call_function(aten._assert_scalar.default,
                    (eq, f"Runtime assertion failed for expression Eq(s47, {bound}) on node '{node_name}'"))
    g.output(n)
    return g


def test_assertion_messages_that_cite_other_node_names_align() -> None:
    assert align(_asserted("eq_539", 4), _asserted("eq_547", 4)) == []
    # a message that says something else is still a difference
    diffs = align(_asserted("eq_539", 4), _asserted("eq_539", 5))
    assert sorted(str(key) for _, key, _, _ in diffs) == ["assert_msg", "other"]
