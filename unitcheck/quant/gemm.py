"""Linear layers whose three GEMMs run in (emulated) NVFP4, as Transformer Engine's recipe does.

- fprop  y  = Q(x) Q(W)^T        x: 1x16 blocks along K, RNE;  W: 16x16 tiles, RNE
- dgrad  dx = Q_sr(dy) Q(W)      dy: 1x16 along N, stochastic rounding; W's 16x16 tiles serve
                                  both orientations
- wgrad  dW = Q_sr(H dy)^T Q(H x) both along the token dimension, after a 16x16 random Hadamard
                                  transform H that cancels in the product (H H^T = I)

Recipes:

- ``te``: Transformer Engine's default: Hadamard on wgrad, per-tensor scaling everywhere,
  stochastic rounding on gradients;
- ``ngpt``: seed 001 as written: no Hadamard, no per-tensor scaling on forward inputs and weights
  (a fixed global amax of 1, right for unit-norm rows), stochastic rounding kept on gradients;
- ``matched``: no Hadamard; each forward operand whose norm the model declares gets a fixed scale
  matched to it (amax 1 for unit-norm rows, sqrt(K) for RMS-1 rows of length K: no element can
  exceed it, so nothing is clipped), every other operand per-tensor scaling. For nGPT, whose GEMM
  inputs and weights are all unit-norm, it is the ``ngpt`` recipe; for GCT it keeps the fixed
  scale on the canonical (RMS-1) inputs without clipping them to nGPT's bound.

The bounds travel as the op's ``x_amax``/``w_amax`` arguments (0: none declared). Emulation
quantises and dequantises, then multiplies in the input precision.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..errors import UsageError
from .nvfp4 import fake_quantize_fast

__all__ = ["Recipe", "RECIPES", "nvfp4_linear", "NVFP4Linear", "nvfp4_matmul", "norm_bound"]


@dataclass(frozen=True)
class Recipe:
    name: str
    hadamard_wgrad: bool
    per_tensor_forward: bool  # for operands without a declared bound (a fixed amax of 1 if False)
    per_tensor_grad: bool = True
    stochastic_grad: bool = True
    weight_2d: bool = True
    declared_bounds: bool = False  # a fixed scale from the operand's declared bound, where given

    def scaling(self, declared: float) -> tuple[bool, float]:
        """(per-tensor, fixed amax) for a forward operand with this declared bound (0: none)."""
        if self.declared_bounds and declared > 0:
            return False, declared
        return self.per_tensor_forward, 1.0


RECIPES = {
    "te": Recipe("te", hadamard_wgrad=True, per_tensor_forward=True),
    "ngpt": Recipe("ngpt", hadamard_wgrad=False, per_tensor_forward=False),
    "matched": Recipe("matched", hadamard_wgrad=False, per_tensor_forward=True, declared_bounds=True),
}


def _q(x: torch.Tensor, **kw: Any) -> torch.Tensor:
    return fake_quantize_fast(x, **kw).to(x.dtype)


_WEIGHTS: dict[tuple[int, str], tuple[weakref.ref[torch.Tensor], int, int, torch.Tensor]] = {}


def _weight(w: torch.Tensor, r: Recipe, declared: float = 0.0) -> torch.Tensor:
    """The quantised weight, cached per tensor and version: fprop quantises it once per optimizer
    step and dgrad reuses it (16x16 tiles are the same in both orientations). An entry is valid
    only while its tensor is alive (a weak reference): ids and storage are reused after a free."""
    per_tensor, amax = r.scaling(declared)
    if not w.is_leaf:  # a computed weight (C(W) in a GCT head) is new every step: no cache
        return _q(w, block_2d=r.weight_2d, per_tensor=per_tensor, amax=amax)
    key = (id(w), f"{r.name}/{amax:g}/{per_tensor}")
    hit = _WEIGHTS.get(key)
    if hit is not None and hit[0]() is w and hit[1] == w._version and hit[2] == w.data_ptr():
        return hit[3]
    q = _q(w, block_2d=r.weight_2d, per_tensor=per_tensor, amax=amax)
    if len(_WEIGHTS) >= 256:
        _WEIGHTS.pop(next(iter(_WEIGHTS)))
    _WEIGHTS[key] = (weakref.ref(w), w._version, w.data_ptr(), q)
    return q


@torch.library.custom_op("unitcheck::nvfp4_linear", mutates_args=())
def _nvfp4_linear_op(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, recipe: str,
                     x_amax: float = 0.0, w_amax: float = 0.0) -> torch.Tensor:
    """fprop. A custom op, so traced graphs show one ``nvfp4_linear`` node with a unit rule (the
    linear rule) instead of the quantiser's internals. ``x_amax``/``w_amax``: the operands'
    declared bounds (0: none), used by recipes with ``declared_bounds``."""
    r = RECIPES[recipe]
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    per_tensor, amax = r.scaling(x_amax)
    xq = _q(x2, per_tensor=per_tensor, amax=amax)
    wq = _weight(w, r, w_amax).t()
    y = xq @ wq if b is None else torch.addmm(b, xq, wq)  # the bias in the GEMM, as F.linear does
    return y.reshape(*shape[:-1], w.shape[0])


@_nvfp4_linear_op.register_fake
def _(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, recipe: str, x_amax: float = 0.0,
      w_amax: float = 0.0) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], w.shape[0]))


def _setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, w, b, recipe = inputs[:4]
    ctx.save_for_backward(x, w)
    ctx.recipe, ctx.has_bias = recipe, b is not None
    ctx.x_amax, ctx.w_amax = (float(v) for v in (tuple(inputs[4:]) + (0.0, 0.0))[:2])


def _backward(ctx: Any, gy: torch.Tensor) -> tuple[Any, ...]:
    x, w = ctx.saved_tensors
    r = RECIPES[ctx.recipe]
    x2 = x.reshape(-1, x.shape[-1])
    gy2 = gy.reshape(-1, gy.shape[-1])
    gx = gw = gb = None
    if ctx.needs_input_grad[0]:
        # dgrad: W's 16x16 tiles quantise both orientations alike, so fprop's copy is reused
        wq = _weight(w, r, ctx.w_amax)
        gq = _q(gy2, per_tensor=r.per_tensor_grad, stochastic=r.stochastic_grad)
        gx = (gq @ wq).reshape(x.shape)
    if ctx.needs_input_grad[1]:
        # wgrad: the reduction runs over tokens, so both operands are quantised down it
        gq = _q(gy2, per_tensor=r.per_tensor_grad, stochastic=r.stochastic_grad,
                hadamard_transform=r.hadamard_wgrad, axis=0)
        per_tensor, amax = r.scaling(ctx.x_amax)  # a row bound bounds every element, in any layout
        xq = _q(x2, per_tensor=per_tensor, amax=amax, hadamard_transform=r.hadamard_wgrad, axis=0)
        gw = gq.t() @ xq
    if ctx.has_bias and ctx.needs_input_grad[2]:
        gb = gy2.sum(0)
    return gx, gw, gb, None, None, None


_nvfp4_linear_op.register_autograd(_backward, setup_context=_setup)


def nvfp4_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, recipe: Recipe | str = "te",
                 x_amax: float = 0.0, w_amax: float = 0.0) -> torch.Tensor:
    """``F.linear`` with NVFP4 GEMMs (fprop, dgrad and wgrad quantised as the recipe says);
    ``x_amax``/``w_amax`` are bounds on the operands' elements the model guarantees (0: none)."""
    name = recipe if isinstance(recipe, str) else recipe.name
    if name not in RECIPES:
        raise UsageError(f"unknown NVFP4 recipe {name!r}; choose one of {', '.join(RECIPES)}")
    # dimensions that are not multiples of 16 are zero-padded inside the quantiser (zero blocks
    # change no dot product); Transformer Engine's kernels need multiples of 16 instead
    if x_amax < 0 or w_amax < 0:
        raise UsageError(f"NVFP4 operand bounds must not be negative, got {x_amax}, {w_amax}")
    return _nvfp4_linear_op(x, w, b, name, float(x_amax), float(w_amax))  # type: ignore[no-any-return]


def nvfp4_matmul(a: torch.Tensor, b: torch.Tensor, recipe: Recipe | str = "te") -> torch.Tensor:
    """``a @ b`` where ``b`` is a weight (K, N): the same three quantised GEMMs as a linear."""
    return nvfp4_linear(a, b.t(), None, recipe)


def norm_bound(norm: str | None, length: int) -> float:
    """The largest element a row of ``length`` elements can hold given its declared norm: 1 for a
    unit-norm row, sqrt(length) for an RMS-1 row; 0 (no bound) when nothing is declared."""
    if norm is None:
        return 0.0
    if norm == "unit":
        return 1.0
    if norm == "rms":
        return float(length) ** 0.5
    raise UsageError(f"unknown operand norm {norm!r}; declare unit, rms or None")


class NVFP4Linear(nn.Linear):
    """An ``nn.Linear`` whose GEMMs run in NVFP4; same parameters and state-dict keys."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, recipe: str = "te",
                 device: Any = None, dtype: Any = None, x_amax: float = 0.0, w_amax: float = 0.0) -> None:
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self.recipe = recipe
        self.x_amax, self.w_amax = x_amax, w_amax

    @classmethod
    def from_linear(cls, lin: nn.Linear, recipe: str, x_amax: float = 0.0, w_amax: float = 0.0) -> NVFP4Linear:
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.in_features, new.out_features = lin.in_features, lin.out_features
        new.weight = lin.weight  # shared, so tied weights stay tied
        new.bias = lin.bias
        new.recipe = recipe
        new.x_amax, new.w_amax = x_amax, w_amax
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nvfp4_linear(x, self.weight, self.bias, self.recipe, self.x_amax, self.w_amax)

    def extra_repr(self) -> str:
        bounds = f", x_amax={self.x_amax:g}, w_amax={self.w_amax:g}" if self.x_amax or self.w_amax else ""
        return super().extra_repr() + f", nvfp4={self.recipe}{bounds}"
