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


class _AttendsToItself(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x @ x.transpose(-1, -2), dim=-1) @ x


class _SelfAttentionBlock(torch.nn.Module):
    """``x + softmax(x x^T) x``: the branch is an average of the stream over positions."""

    def __init__(self) -> None:
        super().__init__()
        self.mix = _AttendsToItself()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mix(x)


def test_an_average_of_the_stream_added_to_it_is_the_branch() -> None:
    """Attention without projections averages the stream over positions: the stream is still
    ``x``, and the branch is no average of copies (its weights are scores of the data)."""
    from unitcheck.graphs import averaged, residual_adds
    from unitcheck.tracer import trace

    graph = trace(_SelfAttentionBlock(), (torch.randn(2, 5, 8),)).graph
    ((_, stream, branch),) = residual_adds(graph)
    assert stream.op == "placeholder", stream
    assert averaged(branch) is None  # an average over positions, by scores of the data: not of copies


class _ValueSkip(torch.nn.Module):
    """Nystromformer's attention: ``softmax(q k^T) v + conv(v)``, a skip on the values."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(8, 8) for _ in range(3))
        self.conv = torch.nn.Conv1d(8, 8, 3, padding=1, groups=8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = self.v(x)
        context = torch.softmax(self.q(x) @ self.k(x).transpose(-1, -2), dim=-1) @ v
        return context + self.conv(v.transpose(1, 2)).transpose(1, 2)


def test_an_attention_average_is_not_a_stream_of_copies() -> None:
    """Attention's weights are scores of queries and keys, an average over positions: the
    values it averages are not a stream its add carries (before, Nystromformer's ``+ conv(v)``
    was called a residual add, UC102); hyper-connections' weights are a projection of the stream
    by parameters."""
    from unitcheck.graphs import residual_adds
    from unitcheck.tracer import trace

    assert residual_adds(trace(_ValueSkip(), (torch.randn(2, 5, 8),)).graph) == []
