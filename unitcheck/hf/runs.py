"""Trial runs of a candidate: the fake-tensor probe that stands in for ``torch.export``, and the
real run on the CPU for models small enough to make."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from .common import _short

# -- building ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _as_export() -> Iterator[None]:
    """Run eager code on fake meta tensors the way export sees it: autocast regions on meta
    allowed, and ``torch.compiler.is_exporting()`` true, so library code takes the same branches
    as under ``torch.export`` (Hugging Face's MoE layers pick their exportable fallback)."""
    from torch import compiler

    from ..tracer import meta_autocast

    flags = (compiler._is_compiling_flag, compiler._is_exporting_flag)
    compiler._is_compiling_flag = compiler._is_exporting_flag = True
    try:
        with meta_autocast():
            yield
    finally:
        compiler._is_compiling_flag, compiler._is_exporting_flag = flags


def _faked(mode: Any, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """``inputs`` with every tensor, inside lists too (a pyramid's levels), a fake meta tensor of
    ``mode``; counts and other values as they are."""
    from torch.utils._pytree import tree_map_only

    return tree_map_only(torch.Tensor, lambda v: mode.from_tensor(v.to("meta")), dict(inputs))


def _probe(model: nn.Module, inputs: Mapping[str, Any]) -> str | None:
    """None when a forward pass on fake meta tensors accepts ``inputs``, else why not.

    Fake tensors, as export uses: Hugging Face code sees it is being traced and takes the paths
    export takes (plain meta tensors fail on the ``.item()`` calls of eager-only shortcuts)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    try:
        with FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv()) as mode, torch.no_grad(), \
                _as_export():
            fake = _faked(mode, inputs)
            model(**fake)
    except Exception as err:
        return _failure(err)
    return None


def _logits_rows(model: nn.Module, inputs: Mapping[str, Any]) -> tuple[int, ...] | None:
    """The axes of the logits a fake run without ``labels`` returns, the vocabulary's left out:
    the shape a head's loss wants its labels in (Dia's, one row per example and codebook,
    ``(batch * channels, frames)``); None where that run fails or returns no logits."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    try:
        with FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv()) as mode, torch.no_grad(), \
                _as_export():
            out = model(**_faked(mode, {k: v for k, v in inputs.items() if k != "labels"}))
            logits = out.get("logits") if isinstance(out, Mapping) else getattr(out, "logits", None)
            return tuple(int(n) for n in logits.shape[:-1]) if isinstance(logits, torch.Tensor) else None
    except Exception:  # noqa: BLE001 (no shape to read: the caller keeps its labels)
        return None


# a loss comparing the sizes of its input and its target: cross entropy's "Expected input
# batch_size (18) to match target batch_size (32)", MSE's "Using a target size ...", BCE's
# "Target size (...) must be the same as input size (...)"
_TARGET_SIZE = re.compile(r"target (batch_)?size", re.IGNORECASE)


def _loss_refuses_labels(why: str, inputs: Mapping[str, Any]) -> bool:
    """Whether a failure is the loss refusing the labels' shape."""
    return "labels" in inputs and _TARGET_SIZE.search(why.partition(" [at: ")[0]) is not None


def _failure(err: BaseException) -> str:
    """A failed run's reason: the error, and the model statement that raised (:func:`_statement`
    reads it back)."""
    line = _model_line(err)
    return _short(err, 200) + (f" [at: {line}]" if line else "")


def _statement(why: str) -> str | None:
    """The model statement a failure's reason names (:func:`_failure`), None where it names none."""
    return why.rpartition("[at: ")[2] if "[at: " in why else None


_REAL_RUN_PARAMETERS = 20_000_000  # larger candidates are left to the tracer's own real run


def _runs_on_cpu(meta: nn.Module) -> bool:
    """Whether :func:`_real_run` makes the model (else it leaves the check to the tracer)."""
    return sum(p.numel() for p in meta.parameters()) <= _REAL_RUN_PARAMETERS


def _model_line(err: BaseException) -> str:
    """The statement of model code that raised (it names the argument a ``NoneType`` error is
    about), all its lines: LLaVA-NeXT's ``image_num_patches = [`` names ``image_sizes`` two
    lines down. Of an ``if`` that raised deciding its test, the test: the block it guards names
    arguments the test never read (wav2vec2's layer drop, ``layer(h, attention_mask=...)``)."""
    import linecache
    import traceback

    for fr in reversed(traceback.extract_tb(err.__traceback__)):
        if "/transformers/" in fr.filename and "/utils/" not in fr.filename:
            first = fr.lineno or 0
            last = min(fr.end_lineno or first, first + 8)
            lines: list[str] = []
            for n in range(first, last + 1):
                lines.append(linecache.getline(fr.filename, n).strip())
                if lines[-1].split("#")[0].rstrip().endswith(":"):  # a branch raises on its whole block: its header
                    break
            text = " ".join(x for x in lines if x) or (fr.line or "").strip()
            return text[:320]
    return ""


# probe failures that say more about fake tensors than about the inputs
_PROBE_LIMITS = ("NotImplementedError", "concrete integers", "Unrecognised padding", "DataDependent", "data-dependent",
                 "meta tensor", "on the meta device", "out of meta")


def _probe_limited(why: str) -> bool:
    """Does a probe failure say more about fake tensors than about the inputs? Not where the
    model's own code raises NotImplementedError (OmDet-Turbo's "Training is not implemented yet"
    for labels): the model refuses those inputs, on real tensors too."""
    return any(k in why for k in _PROBE_LIMITS) and "[at: raise NotImplementedError" not in why
