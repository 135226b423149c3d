"""Graph queries the rules and the rewriter share."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.fx as fx

from unitcheck.graphs import users_through_views

aten = torch.ops.aten


def _weights_then_product(training: bool, moves: int) -> tuple[fx.Node, fx.Node]:
    """softmax -> dropout -> ``moves`` views -> bmm: in training mode the dropout is
    ``native_dropout`` and the ``getitem`` of its output, in eval mode the ``clone`` export
    leaves (XLNet's einsum puts four moves between the dropout and the product)."""
    g = fx.Graph()
    s = g.call_function(aten._softmax.default, (g.placeholder("s"), -1, False))
    if training:
        drop = g.call_function(aten.native_dropout.default, (s, 0.1, True))
        x = g.call_function(operator.getitem, (drop, 0))
        g.call_function(operator.getitem, (drop, 1))  # the mask, which nothing reads
    else:
        x = g.call_function(aten.clone.default, (s,))
    for _ in range(moves):
        x = g.call_function(aten.permute.default, (x, [0, 1, 3, 2]))
    product = g.call_function(aten.bmm.default, (x, g.placeholder("v")))
    g.output(product)
    return s, product


@pytest.mark.parametrize("training", [False, True])
def test_a_dropout_is_one_step_in_either_mode(training: bool) -> None:
    s, product = _weights_then_product(training, moves=4)
    assert product in users_through_views(s)  # six steps: the clone (or the dropout), four moves, the product
    s, product = _weights_then_product(training, moves=5)
    assert product not in users_through_views(s)  # seven: past the default depth in both modes
