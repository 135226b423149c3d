"""Tensors made from Python sequences that hold tensors, while a capture runs.

``torch.tensor([0, n])`` with ``n`` a 0-d tensor (Qwen3-ASR's window offsets), and an index
such as ``mask[rows, cols]`` where ``rows`` is a tuple of 0-d tensors (UDOP's ``zip(*ind)``),
copy each element's data in C++. A capture's tensors are fake and hold no data, so export failed
("its data is not allocated yet"). Built here with ``torch.stack`` of the elements, the tensor
has the values, dtype and shape eager gives, detached as eager's copy is, and the graph computes
it from what the elements are computed from instead of failing.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.overrides import TorchFunctionMode

__all__ = ["stacked"]

_SEQUENCES = (list, tuple)
# torch reads a list index as a tuple of indices when it holds one of these (numpy's legacy rule),
# and only when it is shorter than this
_TUPLE_LIKE = (torch.Tensor, list, tuple, slice, type(None), type(Ellipsis))
_TUPLE_LIMIT = 32


def _holds_fake(data: Any) -> bool:
    return any(isinstance(t, FakeTensor) for t in _leaves(data))


def _inferred(data: Any) -> torch.dtype:
    """The dtype ``torch.tensor`` gives ``data``: its elements' dtypes promoted together, a
    Python int as int64 and a float as the default dtype."""
    if isinstance(data, torch.Tensor):
        return data.dtype
    if isinstance(data, _SEQUENCES):
        dtypes = [_inferred(e) for e in data]
        return functools.reduce(torch.promote_types, dtypes) if dtypes else torch.get_default_dtype()
    if isinstance(data, bool):
        return torch.bool
    if isinstance(data, int):
        return torch.int64
    if isinstance(data, complex):
        return torch.complex128 if torch.get_default_dtype() == torch.float64 else torch.complex64
    return torch.get_default_dtype()


def _built(data: Any, dtype: torch.dtype, device: Any) -> torch.Tensor:
    if isinstance(data, torch.Tensor):  # an element: one value, whatever its shape, as in eager
        if data.numel() != 1:
            raise ValueError("only one element tensors can be converted to Python scalars")
        return data.detach().reshape(()).to(dtype=dtype)
    if isinstance(data, _SEQUENCES):
        if not data:
            return torch.empty(0, dtype=dtype, device=device)
        return torch.stack([_built(e, dtype, device) for e in data])
    return torch.tensor(data, dtype=dtype, device=device)


def _from_data(data: Any, dtype: torch.dtype | None = None, device: Any = None, requires_grad: bool = False,
               **_: Any) -> torch.Tensor:
    device = device if device is not None else next((t.device for t in _leaves(data)), None)
    out = _built(data, dtype or _inferred(data), device)
    return out.requires_grad_() if requires_grad else out


def _leaves(data: Any) -> Iterator[torch.Tensor]:
    if isinstance(data, torch.Tensor):
        yield data
    elif isinstance(data, _SEQUENCES):
        for e in data:
            yield from _leaves(e)


def _index(index: Any) -> Any:
    """``index`` with each sequence that holds fake tensors made a tensor, as torch makes it."""
    if isinstance(index, list) and len(index) < _TUPLE_LIMIT and any(isinstance(e, _TUPLE_LIKE) for e in index):
        index = tuple(index)
    if isinstance(index, tuple):
        return tuple(_from_data(e) if isinstance(e, _SEQUENCES) and _holds_fake(e) else e for e in index)
    return _from_data(index) if isinstance(index, _SEQUENCES) and _holds_fake(index) else index


_INDEXING = (torch.Tensor.__getitem__, torch.Tensor.__setitem__)


class _Stacking(TorchFunctionMode):
    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.tensor and args and isinstance(args[0], _SEQUENCES) and _holds_fake(args[0]):
            return _from_data(args[0], **kwargs)
        if func in _INDEXING and len(args) > 1 and _holds_fake(args[1]):
            args = (args[0], _index(args[1]), *args[2:])
        return func(*args, **kwargs)


def stacked() -> contextlib.AbstractContextManager[Any]:
    """Within the block, tensors made from sequences of fake tensors are stacked from them."""
    return _Stacking()
