"""The code generator is faithful to the model it rewrites: the four silent changes of issue 15
(aliased example inputs, training-mode ops, literal dtypes, missing imports) as regression tests."""

from __future__ import annotations

import torch
from torch import nn
from unitcheck.models import build

from unitcheck.rewrite.api import rewrite


def test_aliased_example_inputs_keep_one_placeholder_per_argument() -> None:
    """A factory returning (x, x) as (idx, targets): the rewritten model still reads idx."""
    model, (x, _) = build("gpt", n_layer=1, n_embd=16, n_head=2)
    res = rewrite(model, (x, x))
    g = torch.Generator().manual_seed(1)
    a, b = (torch.randint(0, 65, x.shape, generator=g) for _ in range(2))
    with torch.no_grad():
        assert not torch.equal(res.module(a, b)[0], res.module(b, b)[0])
