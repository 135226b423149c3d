"""``torch.nn.attention.flex_attention`` where unitcheck runs it: in captures, and in the null
rewrite's comparison, where its Python wrapper refuses what the operator itself (a higher-order op
whose eager implementation is a reference one, with a backward on CPU) runs; and its score
functions' reads of learned tensors, which lowering rewrites so that no gradient reaches them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.fx as fx

from .fake_kernels import swapped

__all__ = ["OP", "SCORE_MOD", "BLOCK_MASK", "SCALE", "SCORE_BUFFERS", "on_any_device", "buffer_index",
           "buffers_indexed_as_captured"]

OP = torch.ops.higher_order.flex_attention
# where the operator takes (q, k, v, score_mod, block_mask, scale, kernel_options, score_mod_other_buffers,
# mask_mod_other_buffers); the block mask is a tuple whose last item is its mask function
SCORE_MOD, BLOCK_MASK, SCALE, SCORE_BUFFERS = 3, 4, 5, 7


@contextlib.contextmanager
def on_any_device() -> Iterator[None]:
    """torch 2.13's wrapper refuses meta tensors (a model built on meta for static checks) and
    CPU tensors that require grad ("does not support backward on CPU", said of its compiled
    kernel). A capture computes no gradient with it and the operator's fake kernel still checks
    shapes; in eager the operator's reference implementation has a backward on CPU, through which
    a null rewrite compares both models' gradients."""
    import torch.nn.attention.flex_attention as wrapper

    with swapped(wrapper, "_validate_device", lambda _: lambda query, key, value: None):
        yield


def buffer_index(x: torch.Tensor, indices: list[torch.Tensor]) -> torch.Tensor:
    """``x[indices]`` inside a score or mask function, as flex_attention's own capture writes it
    (``ModIndex``): its backward scatters into the buffer with an accumulating ``index_put``, where
    ``aten.index``'s backward, run under the operator's ``vmap``, returns a batched gradient the
    buffer cannot take ("can not return a BatchedTensor when out_dim is None")."""
    from torch._dynamo._trace_wrapped_higher_order_op import ModIndex

    return ModIndex.apply(x, indices)  # type: ignore[no-any-return]


_SCORE_ARGS = 5  # a score function takes (score, b, h, q_idx, kv_idx, *buffers)
_MASK_ARGS = 4  # a mask function (b, h, q_idx, kv_idx, *buffers)


def buffers_indexed_as_captured(gm: fx.GraphModule) -> None:
    """Lowering (``run_decompositions``) writes the buffer reads of every flex_attention score and
    mask function as ``aten.index``; they become :func:`buffer_index` again, so that gradients
    reach a learned bias the function reads (a relative-position table)."""
    for node in gm.graph.find_nodes(op="call_function", target=OP):
        block_mask = node.args[BLOCK_MASK] if len(node.args) > BLOCK_MASK else ()
        functions = [(node.args[SCORE_MOD], _SCORE_ARGS)]
        if isinstance(block_mask, tuple) and block_mask:
            functions.append((block_mask[-1], _MASK_ARGS))
        for attr, own in functions:
            if not isinstance(attr, fx.Node) or attr.op != "get_attr":
                continue
            sub = getattr(gm, str(attr.target), None)
            if not isinstance(sub, fx.GraphModule):
                continue
            buffers = set(sub.graph.find_nodes(op="placeholder")[own:])
            for n in sub.graph.find_nodes(op="call_function", target=torch.ops.aten.index.Tensor):
                if n.args[0] in buffers:
                    n.target = buffer_index
            sub.recompile()
