"""torch's fake kernels, corrected where they disagree with the CPU kernels, while a capture runs.

Export computes every op's output sizes and dtype with a fake (meta) kernel. Where that kernel
rejects what the CPU kernel accepts, or answers otherwise, a model that runs in eager cannot be
captured, or is captured on another path. Each correction below names the torch version whose
kernel it mends and keeps every check the kernel makes.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

__all__ = ["corrected", "swapped"]


@contextlib.contextmanager
def swapped(owner: Any, name: str, replacement: Callable[[Any], Any]) -> Iterator[None]:
    """``owner.name`` replaced by ``replacement(original)`` for the block; left alone where this
    torch lacks it (the correction is then not needed, or cannot be made)."""
    original = getattr(owner, name, None)
    if original is None:
        yield
        return
    own = name in getattr(owner, "__dict__", {})  # else inherited: deleting the replacement restores it
    setattr(owner, name, replacement(original))
    try:
        yield
    finally:
        if own:
            setattr(owner, name, original)
        else:
            delattr(owner, name)


def _bool_signbit() -> contextlib.AbstractContextManager[None]:
    """torch 2.13's fake kernel for ``prims.signbit`` gives the input's dtype where the kernel
    gives bool. Real-value propagation compares the two, takes the mismatch for a missing kernel,
    and makes up unbacked sizes that nothing binds, so floor division (its decomposition tests
    signs) failed inside any real-value capture (transformers' MoE experts gather with
    ``perm // top_k``)."""
    import torch._prims as prims

    return swapped(torch.ops.prims.signbit.default, "prim_meta_impl", lambda _: functools.partial(
        prims._prim_elementwise_meta, type_promotion=prims.ELEMENTWISE_PRIM_TYPE_PROMOTION_KIND.ALWAYS_BOOL))


def _float_grouped_mm() -> contextlib.AbstractContextManager[None]:
    """torch 2.13's fake kernel for ``_grouped_mm`` accepts bfloat16 only (the CUDA kernel's
    rule); the CPU kernel also takes float32 and float16, and transformers' MoE experts call it
    on CPU in eager. For those the fake kernel checks what fixes the output's sizes (the layouts
    and their offsets) and gives the output the inputs' dtype; the kernel checks the strides
    when the graph runs."""
    import torch._meta_registrations as meta

    def float_common(original: Any) -> Any:
        def common(mat_a: torch.Tensor, mat_b: torch.Tensor, **kwargs: Any) -> torch.Tensor:
            dtype, offs, out_dtype = mat_a.dtype, kwargs.get("offs"), kwargs.get("out_dtype")
            if kwargs.get("scale_a") is not None or dtype not in (torch.float32, torch.float16) \
                    or mat_b.dtype != dtype or out_dtype not in (None, dtype):
                return original(mat_a, mat_b, **kwargs)
            torch._check(mat_a.dim() in (2, 3) and mat_b.dim() in (2, 3), lambda: "multiplicands must be 2D or 3D")
            torch._check((offs is not None) == (mat_a.dim() == 2 or mat_b.dim() == 2),
                         lambda: "offsets are needed exactly for 2D multiplicands")
            if mat_a.dim() == 3 or mat_b.dim() == 3:
                torch._check(mat_a.size(-1) == mat_b.size(-2), lambda: "contraction sizes must match")
            out: torch.Tensor = meta._create_grouped_mm_output_tensor(mat_a, mat_b, offs, dtype)
            return out

        return common

    return swapped(meta, "_meta_grouped_mm_common", float_common)


def _empty_outputs_any_layout() -> contextlib.AbstractContextManager[None]:
    """Where real-value propagation finds an op's fake result unlike its real one (a size read
    from values), torch 2.13 infers the fake result from the real one and refuses a real result
    that is not dense in memory. An empty result holds nothing whatever its strides (GLM-5-Next's
    vision attention splits its heads by window lengths, one of them 0, and reshapes each chunk):
    it is inferred as a contiguous tensor of sizes read from values, as
    torch infers a dense one (whose rule fails on a dimension of size 0)."""
    import torch._subclasses.fake_tensor as fake_tensor

    def infer(original: Any) -> Any:
        def inferred(mode: Any, op: Any, real_out: torch.Tensor) -> torch.Tensor:
            if real_out.numel() != 0:
                return original(mode, op, real_out)  # type: ignore[no-any-return]
            from torch._library.fake_impl import allocate_size

            sizes = [allocate_size(mode.shape_env) for _ in range(real_out.dim())]  # as torch infers them
            with mode:
                return torch.empty(sizes, device=real_out.device, dtype=real_out.dtype, layout=real_out.layout)

        return inferred

    return swapped(fake_tensor, "_infer_fake_from_real_tensor", infer)


def _offsets_compared_without_guards() -> contextlib.AbstractContextManager[None]:
    """Real-value propagation checks each fake result against the real one, and torch 2.13
    compares their storage offsets with ``!=``: an offset of unbacked sizes (the second piece of
    a split by counts read into Python) is then guarded on, the guard decided by the example and
    asserted in the graph, as if the model had branched on it. Idefics2 splits its image features
    by the count of non-padding images; the capture refused a branch on float data, and would
    otherwise have held the example's count. The offset is compared as torch compares symbolic
    values there: evaluated with the real values known, without a guard; a mismatch is one
    that evaluates false. Every other check is the original's."""
    import sympy
    import torch._subclasses.fake_utils as fake_utils

    def compare(original: Any) -> Any:
        def checked(real_out: torch.Tensor, fake_out: torch.Tensor, context: str = "", sizes: bool = True,
                    strides: bool = False, storage_offset: bool = True, requires_grad: bool = True) -> None:
            offset = fake_out.storage_offset() if torch._C._has_storage(real_out) else None
            if not isinstance(offset, torch.SymInt):
                return original(real_out, fake_out, context, sizes, strides, storage_offset,  # type: ignore[no-any-return]
                                requires_grad)
            same = offset.node.shape_env._maybe_evaluate_static(
                sympy.Eq(offset.node.expr, real_out.storage_offset()), compute_hint=True)
            if same is sympy.false:
                raise fake_utils.MetadataMismatchError(f"{context} mismatched storage offset")
            if requires_grad and real_out.requires_grad != fake_out.requires_grad:
                raise fake_utils.MetadataMismatchError(f"{context} mismatched requires_grad-ness of outputs")
            torch._prims.utils.compare_tensor_meta(real_out, fake_out, check_sizes=sizes, check_strides=strides,
                                                   allow_rhs_unbacked=True)
            return None

        return checked

    return swapped(fake_utils, "_check_fake_real_tensors", compare)


def _true_division_in_asserts() -> contextlib.AbstractContextManager[None]:
    """torch 2.13 writes a runtime assertion that holds an integer true division (a guard that
    real values decided on ``min(width / original_width, ...)``, LLaVA-NeXT's tiling) as sympy's
    ``IntTrueDiv`` of graph nodes, whose constructor tests the divisor for zero and so fails on
    a node ("symbolically traced variables cannot be used as inputs to control flow"). The graph
    gets Python's division of the two, which is what the expression means."""
    from torch.utils._sympy.reference import PythonReferenceAnalysis

    return swapped(PythonReferenceAnalysis, "int_truediv", lambda _: staticmethod(lambda a, b: a / b))


@contextlib.contextmanager
def corrected() -> Iterator[None]:
    """Every correction, for the duration of one capture."""
    with _bool_signbit(), _float_grouped_mm(), _empty_outputs_any_layout(), _offsets_compared_without_guards(), \
            _true_division_in_asserts():
        yield
