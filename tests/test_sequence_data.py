"""Tensors made from sequences of tensors in a capture are the ones eager makes."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from unitcheck.sequence_data import _from_data, _index

CASES: list[Any] = [
    [0, torch.tensor(3)],
    [0.5, torch.tensor(3)],
    [1, torch.tensor(3, dtype=torch.int32)],
    [True, torch.tensor(2)],
    [1, torch.tensor(2.0, dtype=torch.float64)],
    [[1, 2], [torch.tensor(3), 4]],
    [torch.tensor([3]), 4],
    [[torch.tensor([[1.0]])], [2]],
    [[], []],
]


@pytest.mark.parametrize("data", CASES, ids=str)
def test_a_sequence_of_tensors_is_made_as_torch_tensor_makes_it(data: Any) -> None:
    want, got = torch.tensor(data), _from_data(data)
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    assert torch.equal(got, want)


def test_an_element_of_more_than_one_value_fails_as_in_eager() -> None:
    data = [torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])]
    with pytest.raises(ValueError, match="only one element tensors"):
        torch.tensor(data)
    with pytest.raises(ValueError, match="only one element tensors"):
        _from_data(data)


def test_the_copy_is_detached_from_its_elements() -> None:
    x = torch.tensor(2.0, requires_grad=True)
    assert not _from_data([x * 3, 1.0]).requires_grad
    assert _from_data([x * 3, 1.0], requires_grad=True).requires_grad


def test_an_index_of_tuples_selects_what_eager_selects() -> None:
    x = torch.arange(12).reshape(3, 4)
    rows, cols = zip(*torch.tensor([[0, 1], [2, 3]]))
    assert torch.equal(x[_index((rows, cols))], x[rows, cols])
    assert torch.equal(x[_index([list(rows), list(cols)])], x[[list(rows), list(cols)]])
