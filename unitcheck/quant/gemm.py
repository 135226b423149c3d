"""Linear layers whose three GEMMs run in (emulated) NVFP4, as Transformer Engine's recipe does.

- fprop  y  = Q(x) Q(W)^T        x: 1x16 blocks along K, RNE;  W: 16x16 tiles, RNE
- dgrad  dx = Q_sr(dy) Q(W)      dy: 1x16 along N, stochastic rounding; W's 16x16 tiles serve
                                  both orientations
- wgrad  dW = Q_sr(H dy)^T Q(H x) both along the token dimension, after a 16x16 random Hadamard
                                  transform H that cancels in the product (H H^T = I)

Recipes: ``te`` (Transformer Engine's default: Hadamard on wgrad, per-tensor scaling everywhere,
stochastic rounding on gradients) and ``ngpt`` (seed 001: no Hadamard, no per-tensor scaling on
forward inputs and weights, stochastic rounding kept on gradients). Emulation quantises and
dequantises, then multiplies in the input precision.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..errors import UsageError
from .nvfp4 import fake_quantize_fast

__all__ = ["Recipe", "RECIPES", "nvfp4_linear", "NVFP4Linear", "nvfp4_matmul"]


@dataclass(frozen=True)
class Recipe:
    name: str
    hadamard_wgrad: bool
    per_tensor_forward: bool
    per_tensor_grad: bool = True
    stochastic_grad: bool = True
    weight_2d: bool = True


RECIPES = {
    "te": Recipe("te", hadamard_wgrad=True, per_tensor_forward=True),
    "ngpt": Recipe("ngpt", hadamard_wgrad=False, per_tensor_forward=False),
}


def _q(x: torch.Tensor, **kw: Any) -> torch.Tensor:
    return fake_quantize_fast(x, **kw).to(x.dtype)


_WEIGHTS: dict[tuple[int, str], tuple[weakref.ref[torch.Tensor], int, int, torch.Tensor]] = {}


def _weight(w: torch.Tensor, r: Recipe) -> torch.Tensor:
    """The quantised weight, cached per tensor and version: fprop quantises it once per optimizer
    step and dgrad reuses it (16x16 tiles are the same in both orientations). An entry is valid
    only while its tensor is alive (a weak reference): ids and storage are reused after a free."""
    if not w.is_leaf:  # a computed weight (C(W) in a GCT head) is new every step: no cache
        return _q(w, block_2d=r.weight_2d, per_tensor=r.per_tensor_forward)
    key = (id(w), r.name)
    hit = _WEIGHTS.get(key)
    if hit is not None and hit[0]() is w and hit[1] == w._version and hit[2] == w.data_ptr():
        return hit[3]
    q = _q(w, block_2d=r.weight_2d, per_tensor=r.per_tensor_forward)
    if len(_WEIGHTS) >= 256:
        _WEIGHTS.pop(next(iter(_WEIGHTS)))
    _WEIGHTS[key] = (weakref.ref(w), w._version, w.data_ptr(), q)
    return q


@torch.library.custom_op("unitcheck::nvfp4_linear", mutates_args=())
def _nvfp4_linear_op(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, recipe: str) -> torch.Tensor:
    """fprop. A custom op, so traced graphs show one ``nvfp4_linear`` node with a unit rule (the
    linear rule) instead of the quantiser's internals."""
    r = RECIPES[recipe]
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    xq = _q(x2, per_tensor=r.per_tensor_forward)
    y = xq @ _weight(w, r).t()
    if b is not None:
        y = y + b
    return y.reshape(*shape[:-1], w.shape[0])


@_nvfp4_linear_op.register_fake
def _(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, recipe: str) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], w.shape[0]))


def _setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, w, b, recipe = inputs
    ctx.save_for_backward(x, w)
    ctx.recipe, ctx.has_bias = recipe, b is not None


def _backward(ctx: Any, gy: torch.Tensor) -> tuple[Any, ...]:
    x, w = ctx.saved_tensors
    r = RECIPES[ctx.recipe]
    x2 = x.reshape(-1, x.shape[-1])
    gy2 = gy.reshape(-1, gy.shape[-1])
    gx = gw = gb = None
    if ctx.needs_input_grad[0]:
        # dgrad: W's 16x16 tiles quantise both orientations alike, so fprop's copy is reused
        wq = _weight(w, r)
        gq = _q(gy2, per_tensor=r.per_tensor_grad, stochastic=r.stochastic_grad)
        gx = (gq @ wq).reshape(x.shape)
    if ctx.needs_input_grad[1]:
        # wgrad: the reduction runs over tokens, so both operands are quantised down it
        gq = _q(gy2, per_tensor=r.per_tensor_grad, stochastic=r.stochastic_grad,
                hadamard_transform=r.hadamard_wgrad, axis=0)
        xq = _q(x2, per_tensor=r.per_tensor_forward, hadamard_transform=r.hadamard_wgrad, axis=0)
        gw = gq.t() @ xq
    if ctx.has_bias and ctx.needs_input_grad[2]:
        gb = gy2.sum(0)
    return gx, gw, gb, None


_nvfp4_linear_op.register_autograd(_backward, setup_context=_setup)


def nvfp4_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, recipe: Recipe | str = "te") -> torch.Tensor:
    """``F.linear`` with NVFP4 GEMMs (fprop, dgrad and wgrad quantised as the recipe says)."""
    name = recipe if isinstance(recipe, str) else recipe.name
    if name not in RECIPES:
        raise UsageError(f"unknown NVFP4 recipe {name!r}; choose one of {', '.join(RECIPES)}")
    # dimensions that are not multiples of 16 are zero-padded inside the quantiser (zero blocks
    # change no dot product); Transformer Engine's kernels need multiples of 16 instead
    return _nvfp4_linear_op(x, w, b, name)  # type: ignore[no-any-return]


def nvfp4_matmul(a: torch.Tensor, b: torch.Tensor, recipe: Recipe | str = "te") -> torch.Tensor:
    """``a @ b`` where ``b`` is a weight (K, N): the same three quantised GEMMs as a linear."""
    return nvfp4_linear(a, b.t(), None, recipe)


class NVFP4Linear(nn.Linear):
    """An ``nn.Linear`` whose GEMMs run in NVFP4; same parameters and state-dict keys."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, recipe: str = "te",
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self.recipe = recipe

    @classmethod
    def from_linear(cls, lin: nn.Linear, recipe: str) -> NVFP4Linear:
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.in_features, new.out_features = lin.in_features, lin.out_features
        new.weight = lin.weight  # shared, so tied weights stay tied
        new.bias = lin.bias
        new.recipe = recipe
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nvfp4_linear(x, self.weight, self.bias, self.recipe)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", nvfp4={self.recipe}"
