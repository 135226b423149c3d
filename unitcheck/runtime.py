"""Functions that generated ``model.py`` files call besides torch's ops (``canonical`` has the
GCT blocks). Light on imports: a rewritten model loads without the analysis stack."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

__all__ = ["update_buffer", "copy_into", "index_slice", "expect_sizes", "expect_value", "expect_structure", "grouped_mm",
           "layer_drop"]


def update_buffer(buffer: torch.Tensor, value: torch.Tensor) -> None:
    """Write a buffer update that the capture functionalised (batch-norm running statistics,
    ``num_batches_tracked``, or an input the forward updates in place) back in place, outside
    autograd, as the eager kernel does: a tracked
    ``copy_`` would bump the version of a tensor the backward pass saved."""
    with torch.no_grad():
        buffer.data.copy_(value)


def copy_into(self: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """The value of ``aten.copy(self, src)`` (src broadcast into self's shape, dtype and device),
    differentiable in src: eager autograd has no derivative for the functional copy that slice
    assignment lowers to, and the values are the same bits. The result is laid out as ``self``
    is, as the eager slice assignment's destination is: a clone of a transposed ``src`` would
    carry its strides on, and a later ``linear`` on a non-contiguous input takes another kernel
    (SuperGlue's descriptors: ``mm`` and ``add`` instead of ``addmm``, a bias gradient summed
    in another order)."""
    return torch.empty_like(self, memory_format=torch.preserve_format).copy_(src)


def index_slice(x: torch.Tensor, dim: int = 0, start: Any = None, end: Any = None, step: int = 1) -> torch.Tensor:
    """``x[..., start:end:step]`` along ``dim`` as Python indexing runs it: a slice known to
    cover the whole dimension is ``x`` itself, not a view. A view would record a backward that
    writes its gradient into a new contiguous tensor, so the layers before it would get their
    gradient in another layout and sum it in another order (NeuCodec trims two streams to the
    shorter one, ``a[..., :n]``, before concatenating them). Under tracing, where the sizes are
    symbolic, the slice is kept, as indexing keeps it."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    if step == 1 and (start is None or statically_known_true(start == 0)) and (
            end is None or statically_known_true(end >= x.shape[dim])):
        return x
    return torch.ops.aten.slice.Tensor(x, dim, start, end, step)


# an expected size: fixed (an int), free (None) or a range (lowest, highest or None: unbounded)
Size = int | tuple[int, int | None] | None


def _fits(want: Size, got: int) -> bool:
    if want is None:
        return True
    if isinstance(want, int):
        return got == want
    return got >= want[0] and (want[1] is None or got <= want[1])


def _spelled(want: Size) -> str:
    if want is None:
        return "*"
    if isinstance(want, int):
        return str(want)
    return f"{want[0] or ''}..{'' if want[1] is None else want[1]}"


def expect_sizes(x: torch.Tensor, sizes: tuple[Size, ...], name: str) -> None:
    """Refuse an input whose sizes differ where the capture fixed them (None: free), or lie
    outside the range a branch on them held for: the graph holds the example's sizes there
    (reshapes, position tables, image grids) or the branch its sizes took, and another size
    would fail deep inside it or compute something else."""
    if x.dim() != len(sizes) or not all(_fits(s, d) for s, d in zip(sizes, x.shape)):
        want = ", ".join(map(_spelled, sizes))
        raise ValueError(f"{name}: expected sizes ({want}), got ({', '.join(map(str, x.shape))}); this "
                         "module was generated for those sizes (* is free, a..b a range the model's branches on "
                         "sizes held for): regenerate it from an example of the size you need")


def expect_value(value: object, expected: object, name: str) -> None:
    """Refuse a non-tensor argument other than the example's (a temperature, a flag, an optional
    input given as None): the capture fixed it, so the graph computes with the example's value
    whatever it is given."""
    if value is expected or (type(value) is type(expected) and not isinstance(value, torch.Tensor)
                             and value == expected):
        return
    got = f"a {type(value).__name__}" if isinstance(value, torch.Tensor) else repr(value)
    raise ValueError(f"{name}: this module was generated for {name}={expected!r}, got {got}; the capture fixed "
                     "the value: regenerate it from an example with the value you need")


def expect_structure(result: object, template: Any, name: str) -> None:
    """Refuse a kept module's result laid out otherwise than in the capture: the graph reads its
    tensors by the keys and positions the capture saw, and a result with fewer would fail deep
    inside it, one with more would be read in part (a kept HuBERT under LayerDrop returns one
    hidden state fewer for every layer it drops in training)."""
    why = _differs(result, template, "the result")
    if why is not None:
        raise ValueError(f"{name}: {why}: the graph reads its result as it was then, and the module kept whole "
                         "returns another structure on this call (a layer it skipped, an output it added)")


_THEN = "when this module was generated"


def _differs(value: object, template: Any, at: str) -> str | None:
    """Where ``value`` departs from an :mod:`unitcheck.opaque` result template (tensors, dicts,
    tuples and lists; literals are not compared)."""
    if not isinstance(template, dict):
        return None
    if "tensor" in template:
        return None if isinstance(value, torch.Tensor) else f"{at} is a {type(value).__name__} (a tensor {_THEN})"
    items = template["items"]
    if template["kind"] == "dict":
        if not isinstance(value, Mapping) or list(value) != template["keys"]:
            keys = list(value) if isinstance(value, Mapping) else type(value).__name__
            return f"{at} has the keys {keys} ({template['keys']} {_THEN})"
        pairs = [(f"{at}[{k!r}]", v) for k, v in value.items()]
    else:
        if not isinstance(value, (tuple, list)) or len(value) != len(items):
            count = len(value) if isinstance(value, (tuple, list)) else type(value).__name__
            return f"{at} has {count} items ({len(items)} {_THEN})"
        pairs = [(f"{at}[{i}]", v) for i, v in enumerate(value)]
    return next((why for (where, v), t in zip(pairs, items, strict=True)
                 if (why := _differs(v, t, where)) is not None), None)


def layer_drop(read: object, kept: int, layer: Callable[..., Any], dropped: Any, *inputs: Any) -> Any:
    """LayerDrop as the model branches on it: ``layer(*inputs)`` where the draw the model read
    (``read``) has the value that keeps the layer, else the value the model leaves when it drops
    the layer (the stream as it came in)."""
    return layer(*inputs) if int(read) == kept else dropped  # type: ignore[call-overload]


# the dtypes ``_grouped_mm``'s CPU kernel takes (torch 2.13)
_GROUPED_MM_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def grouped_mm(mat_a: torch.Tensor, mat_b: torch.Tensor, offs: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``aten._grouped_mm``, through its kernel wherever it has one (the bits the model computes).
    The CPU kernel has no float64, in which the oracle measures a model: there every group's
    matrix multiplies the tokens (rows of ``mat_a``, sorted by group up to each offset) and each
    token keeps its own group's product, with no size that depends on the offsets' values, so the
    function also exports; a batch of matrices takes one batched product. Other layouts go to the
    kernel, which says what it lacks."""
    plain = bias is None and out_dtype in (None, mat_a.dtype)
    if mat_a.dtype in _GROUPED_MM_DTYPES or mat_a.device.type != "cpu" or not plain:
        return torch.ops.aten._grouped_mm.default(mat_a, mat_b, offs, bias, out_dtype)
    if mat_a.dim() == 3 and mat_b.dim() == 3 and offs is None:
        return torch.bmm(mat_a, mat_b)
    if mat_a.dim() == 2 and mat_b.dim() == 3 and offs is not None:
        rows = torch.arange(mat_a.shape[0], device=mat_a.device)
        group = torch.searchsorted(offs.to(rows.dtype), rows, right=True)  # rows past the last offset: none
        every = torch.matmul(mat_a, mat_b)  # (groups, rows, columns)
        kept = every[group.clamp(max=mat_b.shape[0] - 1), rows]
        return kept * (group < mat_b.shape[0]).unsqueeze(-1).to(kept.dtype)
    return torch.ops.aten._grouped_mm.default(mat_a, mat_b, offs, bias, out_dtype)
