"""Does a rewrite make outputs depend on inputs the original's do not read? A measurement of
what the unit checks cannot see.

C over the wrong axis is unit-consistent: the rewritten model lints clean and the oracle agrees
with every unit it stores, yet C over a sequence axis leaks later tokens into earlier ones
(Mamba's mixer convolves over time with its features at axis 1) and C over a feature map's
width mixes the pixels of a row. Both show as a dependence the original does not have: change
one input element (the last token of the first example, the last pixel of the first image),
and an output position the original leaves bit for bit as it was moves in the rewritten model.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from ..errors import one_line
from ..oracle.interp import seeded
from ..tracer import normalise_inputs
from .equal import deterministic
from .outputs import declared

__all__ = ["Unmeasured", "new_dependencies"]


class Unmeasured(Exception):
    """The measurement could not run (the models refuse the changed input)."""


def _perturbed(x: torch.Tensor) -> torch.Tensor | None:
    """``x`` with its last element of the first example changed: a token id to another id
    the input holds (still inside the vocabulary), a float by one unit of its scale."""
    out = x.clone()
    where = (0,) + (-1,) * (x.dim() - 1)
    if x.is_floating_point():
        out[where] = out[where] + 1.0 + float(x.abs().max())
        return out
    others = x[x != x[where]]
    if others.numel() == 0:
        return None
    out[where] = others[0]
    return out


def _target(args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]] | None:
    """The inputs with their first batched tensor (rank 2 or more, floats or ids) perturbed."""
    for key, a in [*enumerate(args), *kwargs.items()]:
        if isinstance(a, torch.Tensor) and a.dim() >= 2 and (p := _perturbed(a)) is not None:
            if isinstance(key, int):
                return [*args[:key], p, *args[key + 1:]], kwargs
            return args, {**kwargs, str(key): p}
    return None


# the ops whose first argument is what a loss compares (logits before their log-softmax, a
# regression's prediction): positions of a model that returns its loss alone
_LOSS_INPUTS = frozenset({"_log_softmax", "log_softmax", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
                          "binary_cross_entropy_with_logits"})


class _LossInputs(TorchDispatchMode):
    """Records what each loss reads, as the kernels see it (the model's ``F.cross_entropy`` and
    generated code's ``aten.cross_entropy_loss`` both reach ``_log_softmax``)."""

    supports_higher_order_operators = True  # flex_attention reaches the mode whole: run as it is

    @classmethod
    def is_infra_mode(cls) -> bool:
        """Dynamo refuses to compile under a mode that is not torch's own, and flex_attention
        compiles its operator's call even in eager (transformers compiles it too): the recording
        lets it, and sees what the compiled call runs eagerly."""
        return True

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[torch.Tensor] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if isinstance(func, torch._ops.HigherOrderOperator):
            return func(*args, **(kwargs or {}))
        if func.overloadpacket.__name__ in _LOSS_INPUTS and args and isinstance(args[0], torch.Tensor) \
                and args[0].dim() >= 1:
            self.seen.append(args[0].detach().clone())
        return func(*args, **(kwargs or {}))


def _outputs(model: nn.Module, args: list[Any], kwargs: dict[str, Any]) -> dict[str, list[torch.Tensor]]:
    """The outputs with positions, and what each loss compared (a model that returns its loss
    alone has positions there)."""
    with torch.no_grad(), seeded(0), _LossInputs() as losses:
        out = model(*args, **kwargs)
    outs = [t for t in pytree.tree_leaves(declared(out)) if isinstance(t, torch.Tensor) and t.dim() >= 1]
    return {"output": outs, "the input of loss": losses.seen}


# a position of the rewritten model moves when it changes by more than this fraction of the
# output's largest value: float noise is not a dependence (DBRX's experts sum their tokens in an
# order the batch's routing sets, and another token's route moves a row of another example by
# 1e-6 of 3; C over time moves every earlier position by a few percent). The original's
# positions that change at all, however little (the edge of a receptive field), are its own
# dependences.
TOLERANCE = 1e-4


def _moved(a: torch.Tensor, b: torch.Tensor, tolerance: float = TOLERANCE) -> torch.Tensor:
    """Which positions changed: any element along the features (axis 1 of a feature map, the
    last axis of a sequence's values or of a loss's rows of logits) by more than ``tolerance``
    of the largest value, NaN in both counting as equal. Elements are not positions: a row the
    original moved in part (a logit that happens to stay) is the original's own dependence."""
    if a.is_floating_point() or a.is_complex():
        finite = a[a.isfinite()]
        scale = float(finite.abs().max()) if finite.numel() else 0.0
        diff = (a - b).abs() > tolerance * scale
        diff |= a.isnan() != b.isnan()
    else:
        diff = a != b
    if diff.dim() >= 4:
        return diff.any(1)
    if diff.dim() >= 2:
        return diff.any(-1)
    return diff


def new_dependencies(original: nn.Module, rewritten: nn.Module, example_inputs: Any) -> list[str]:
    """Output positions of ``rewritten`` that move when one input element changes while the
    original's stay bit for bit: each a dependence the rewrite added (``[]`` when there is none,
    or nothing to perturb). Both models run in eval mode and are left in their modes."""
    args, kwargs = normalise_inputs(example_inputs)
    changed = _target(list(args), dict(kwargs))
    if changed is None:
        return []
    modes = [(m, m.training) for model in (original, rewritten) for m in model.modules()]
    try:
        original.eval()
        rewritten.eval()
        with deterministic():
            try:
                before = [_outputs(m, list(args), dict(kwargs)) for m in (original, rewritten)]
            except Exception as err:  # noqa: BLE001 (a kernel that refuses a dispatch mode: nothing measured)
                # (transformers compiles its flex_attention itself, and Dynamo refuses the mode)
                raise Unmeasured(f"the models do not run while their losses' inputs are recorded: "
                                 f"{one_line(err)}") from None
            try:
                after = [_outputs(m, *changed) for m in (original, rewritten)]
            except Exception as err:  # noqa: BLE001 (an input the model refuses changed: nothing measured)
                raise Unmeasured(f"the models refuse the changed input: {one_line(err)}") from None
    finally:
        for m, t in modes:
            m.training = t
    found = []
    for kind in before[0]:
        for i, (o0, o1, r0, r1) in enumerate(zip(before[0][kind], after[0][kind], before[1][kind], after[1][kind])):
            if o0.shape != r0.shape or o0.dtype != r0.dtype or o0.shape != o1.shape or r0.shape != r1.shape:
                continue
            new = _moved(r0, r1) & ~_moved(o0, o1, 0.0)
            if bool(new.any()):
                first = [int(v) for v in new.nonzero()[0]]
                found.append(f"{kind} {i}: {int(new.sum())} of {new.numel()} positions (first {first}) move when "
                             "the input's last element of the first example changes; the original's do not")
    return found
