"""Does a generated module compute what the original computes? Bit for bit: outputs, parameter
gradients and buffer updates of one step under the same seed, in eval or training mode. This is
the test of the code generator (``unitcheck rewrite --to identity`` runs it)."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import torch
import torch.fx as fx
from torch import nn
from torch.utils import _pytree as pytree

from .. import flex
from ..errors import UsageError, fails_on_example, one_line
from ..graphs import float_bytes
from ..oracle.interp import seeded
from ..tracer import normalise_inputs
from .outputs import declared

__all__ = ["compiled_note", "deterministic", "differences", "MODES"]

MODES = ("eval", "train")


def _flat(out: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(declared(out)) if isinstance(t, torch.Tensor)]


# a step's parameter gradients, or the one line its backward raised (Reformer's reversible layers
# refuse a backward in eval mode: the generated module, which calls them, must refuse it the same)
Gradients = dict[str, torch.Tensor | None] | str


def _step(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], training: bool,
          seed: int) -> tuple[list[torch.Tensor], Gradients, dict[str, torch.Tensor]]:
    flags = {m: m.training for m in model.modules()}
    grads = {p: p.grad for p in model.parameters()}
    saved = {b: b.detach().clone() for b in model.buffers()}
    model.train(training)
    try:
        for p in model.parameters():
            p.grad = None
        named: Gradients
        with seeded(seed):  # a backward that draws (Reformer's recomputed dropout) continues the stream
            outs = _flat(model(*args, **kwargs))
            loss = [o.float().sum() for o in outs if o.requires_grad and o.is_floating_point()]
            try:
                if loss:
                    torch.stack(loss).sum().backward()
                named = {n: (p.grad.clone() if p.grad is not None else None) for n, p in model.named_parameters()}
            except Exception as err:  # noqa: BLE001 (compared with the other model's, not raised)
                named = one_line(err)
        buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
        return [o.detach() for o in outs], named, buffers
    finally:
        for m, t in flags.items():
            m.training = t
        for p, g in grads.items():
            p.grad = g
        with torch.no_grad():
            for b, v in saved.items():
                b.copy_(v)


def _same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Equal bit for bit, NaN in the same places counting as equal (NaN is not equal to itself:
    a model whose features vanish computes 0/0, and so does its regenerated module)."""
    if a is None or b is None:
        return a is None and b is None
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if torch.equal(a, b):
        return True
    if not (a.is_floating_point() or a.is_complex()):
        return False
    nan = a.isnan()
    return bool(torch.equal(nan, b.isnan()) and torch.equal(a.masked_fill(nan, 0), b.masked_fill(nan, 0)))


def check_fits_in_memory(graph: fx.Graph) -> None:
    """Comparing runs one step of each model in turn, so at most one step's values (autograd saves
    no more than the graph computes) and their gradients are held at a time: refuse up front, in
    one line, what would otherwise end in the kernel's out-of-memory kill (VibeVoice's acoustic
    decoder upsampled 3200 frames 3200 times: about 1 TiB). Counting both models' steps at once
    refused SAM at 18 GiB; its whole ``rewrite --to identity`` peaks at 8.5 GiB resident against
    the 9.0 GiB this counts."""
    from ..oracle import over_budget

    why = over_budget(2 * float_bytes(graph), "comparing the regenerated module with the model would hold",
                      "compare a smaller configuration or shorter inputs")
    if why is not None:
        raise UsageError(why)


# seeds a training-mode comparison runs for a module that branches on random draws (LayerDrop):
# with a layer drop of 0.1 over a few layers, one seed rarely drops a layer and eight usually do
DRAW_SEEDS = 8


def differences(original: nn.Module, generated: nn.Module, example_inputs: Any, training: bool = False,
                seed: int = 0) -> list[str]:
    """What differs after one forward and backward step of each model (from the same state and
    seed): ``[]`` when outputs, gradients and buffers are equal bit for bit. Both models are
    left as they were (modes, gradients, buffers such as batch-norm statistics). A generated
    module that branches on random draws is compared in training mode under ``DRAW_SEEDS``
    seeds from ``seed``, so that its branches are taken both ways. Kernels are deterministic
    throughout (:func:`deterministic`)."""
    draws = training and bool(getattr(generated, "__unitcheck_draws__", 0))
    with deterministic():
        for s in range(seed, seed + DRAW_SEEDS) if draws else (seed,):
            diffs = _differences(original, generated, example_inputs, training, s)
            if diffs:
                return [f"{d} (seed {s})" for d in diffs] if draws else diffs
    return []


def _compiled_modules(model: nn.Module) -> list[str]:
    """The paths of the modules the model runs compiled (``torch.compile``)."""
    from torch._dynamo.eval_frame import OptimizedModule

    return [name or "<root>" for name, m in model.named_modules() if isinstance(m, OptimizedModule)]


def compiled_note(model: nn.Module) -> str | None:
    """What a note says of the modules the model runs compiled (None: none)."""
    compiled = _compiled_modules(model)
    if not compiled:
        return None
    return (f"the model runs {', '.join(compiled)} compiled (torch.compile): the generated module runs the same "
            "ops eagerly, and the null rewrite compares both models run eagerly (inductor's kernels round otherwise)")


@contextlib.contextmanager
def deterministic() -> Iterator[None]:
    """Kernels that give the same bits on every run, for the span of a comparison. A CPU
    scatter-add with repeated indices (the gradient of ``table[index]``) sums in the order its
    threads finish: the gradient of a 127-row table read over a 64-wide grid (SAM's relative
    positions) differed from its first run in 19 of 20 reruns, so no generated module could
    equal the model (SAM's null rewrite "differed" by 1e-9). Memory ``torch.empty``
    returns stays unfilled, as in the model's own runs; ops without a deterministic kernel run
    as they are (``warn_only``), silently. ``torch.seed()`` reseeds from the generator's own
    stream, not from the system's entropy: Reformer seeds each layer's dropout so, and two of
    its training steps under one seed differed."""
    import torch.utils.deterministic as det

    was = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    fill = det.fill_uninitialized_memory  # type: ignore[attr-defined]
    entropy = torch.seed, torch.random.seed
    torch.use_deterministic_algorithms(True, warn_only=True)
    det.fill_uninitialized_memory = False  # type: ignore[attr-defined]
    torch.seed = torch.random.seed = _seed_from_stream  # type: ignore[assignment]
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*deterministic.*")
            yield
    finally:
        torch.use_deterministic_algorithms(was[0], warn_only=was[1])
        det.fill_uninitialized_memory = fill  # type: ignore[attr-defined]
        torch.seed, torch.random.seed = entropy  # type: ignore[assignment]


def _seed_from_stream() -> int:
    """``torch.seed()``'s contract (a new seed, set and returned) with the seed drawn from the
    default generator."""
    seed = int(torch.randint(0, 2**62, (), dtype=torch.int64))
    torch.manual_seed(seed)
    return seed


def _differences(original: nn.Module, generated: nn.Module, example_inputs: Any, training: bool,
                 seed: int) -> list[str]:
    args, kwargs = normalise_inputs(example_inputs)
    mode = "train" if training else "eval"
    # flex_attention's eager reference has a backward on CPU; a model's compiled modules run as
    # their ops (only there: forced eager, flex_attention's own compiled call would lose the
    # tensors its score function reads, and their gradients)
    eager = torch.compiler.set_stance("force_eager") if _compiled_modules(original) else contextlib.nullcontext()
    with flex.on_any_device(), eager:
        try:
            out_a, grad_a, buf_a = _step(original, args, kwargs, training, seed)
        except Exception as err:  # a check of the model's own (a capture on meta deferred it)
            if _runs_without_grad(original, args, kwargs, training, seed):
                # (transformers' flex_attention compiles a training graph inductor cannot make on CPU)
                raise UsageError(f"the model cannot compute gradients here in {mode} mode (its forward with "
                                 f"gradients fails: {one_line(err)}; without them it runs), and the null rewrite "
                                 "compares gradients") from None
            raise fails_on_example(err, mode) from None
        out_b, grad_b, buf_b = _step(generated, args, kwargs, training, seed)
    diffs = []
    if len(out_a) != len(out_b):
        diffs.append(f"{mode}: {len(out_a)} output tensors, the generated module returns {len(out_b)}")
    for i, (a, b) in enumerate(zip(out_a, out_b)):
        if not _same(a, b):
            diffs.append(f"{mode}: output {i} differs ({_how(a, b)})")
    if isinstance(grad_a, str) or isinstance(grad_b, str):
        if grad_a != grad_b:
            said = [f"raised {g}" if isinstance(g, str) else "ran" for g in (grad_a, grad_b)]
            diffs.append(f"{mode}: the model's backward {said[0]}, the generated module's {said[1]}")
        grad_a = grad_b = {}
    for name, g in grad_a.items():
        if name not in grad_b:
            diffs.append(f"{mode}: parameter {name} is missing from the generated module")
        elif not _same(g, grad_b[name]):
            diffs.append(f"{mode}: the gradient of {name} differs ({_how(g, grad_b[name])})")
    for name, b in buf_a.items():
        if name in buf_b and not _same(b, buf_b[name]):
            diffs.append(f"{mode}: buffer {name} differs after the step ({_how(b, buf_b[name])})")
    return diffs


def _runs_without_grad(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], training: bool,
                       seed: int) -> bool:
    with torch.no_grad():
        try:
            _step(model, args, kwargs, training, seed)
        except Exception:  # noqa: BLE001 (the model's own failure, which the caller reports)
            return False
    return True


def _how(a: torch.Tensor | None, b: torch.Tensor | None) -> str:
    if a is None or b is None:
        return "one is None"
    if a.dtype != b.dtype or a.shape != b.shape:
        return f"{a.dtype}{list(a.shape)} against {b.dtype}{list(b.shape)}"
    if a.is_floating_point() and not torch.equal(a.isnan(), b.isnan()):
        return f"NaN in {int((a.isnan() != b.isnan()).sum())} places in one only"
    err = (a.double() - b.double()).nan_to_num(0).abs().max() if a.is_floating_point() else (a != b).sum()
    return f"max difference {float(err):.3g}"
