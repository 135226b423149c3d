"""Ground truth for the engine (SPEC 7): equivariance checks and the radial fingerprint.

- *local* (``local.py``): every node re-run alone on its recorded inputs, rescaled by the
  characters of their units; violations must break the identity;
- *global* (``global_.py``): every leaf rescaled and the graph re-run in float64; forward units
  and the stored gradient units must predict how each node's value and gradient move;
- *fingerprint* (``fingerprint.py``): D_g L is ~0 exactly for the generators the static pass
  calls gauge directions.

Numerical floors (eps) carry the unit of what they guard and are rescaled with it
(``interp.py``), so every identity is exact up to float64 rounding (``compare.py``).

>>> res = unitcheck.oracle.verify(model, (idx, targets))   # doctest: +SKIP
>>> res.checked == res.agreed and res.violations == res.confirmed   # doctest: +SKIP
True
"""

from __future__ import annotations

import copy
import math
import os
import random
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from ..graphs import float_bytes
from ..infer import infer_units
from ..tracer import TraceError, uncompiled
from ..unitgraph import UnitGraph
from .compare import RTOL, close
from .fingerprint import fingerprint_checked, fingerprint_graph
from .global_ import global_mode, scaled_leaves
from .interp import draw, is_value, run_graph, runs_on_its_inputs, seeded
from .local import local_mode
from .result import Disagreement, FingerprintRow, OracleError, OracleResult

__all__ = [
    "check_fits_in_memory", "over_budget",
    "OracleResult", "Disagreement", "FingerprintRow", "OracleError", "verify", "verify_graph",
    "fingerprint", "fingerprint_graph", "prepare", "close", "draw", "RTOL",
]


def _to64(x: Any) -> Any:
    if is_value(x):
        return x.detach().to(torch.complex128 if x.is_complex() else torch.float64)
    return x


def _redraw(model: nn.Module, seed: int) -> None:
    """Every parameter redrawn at its own RMS (or 0.02 when it was zero), random signs, no zeros:
    a zero-initialised bias would otherwise make radial sensitivities vanish trivially."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if not p.is_floating_point():
                continue
            rms = float(p.double().pow(2).mean().sqrt()) if p.numel() else 0.0
            s = rms if rms > 0 and math.isfinite(rms) else 0.02
            mag = torch.empty(p.shape, dtype=torch.float64).uniform_(0.5, 1.5, generator=g)
            sign = torch.randint(0, 2, p.shape, generator=g, dtype=torch.float64) * 2 - 1
            p.copy_((s * mag * sign).to(p.dtype))


def prepare(
    model: nn.Module, example_inputs: Any, seed: int = 0, redraw: bool = True, **infer_kw: Any
) -> tuple[nn.Module, Any, UnitGraph]:
    """A float64 copy of the model (parameters redrawn) and its unit graph."""
    model = uncompiled(model)
    for t in list(model.parameters()) + list(model.buffers()):
        if t.device.type == "meta":
            raise OracleError(
                "the oracle needs real values; this model was built on the meta device "
                "(static lint only). Build it with real weights to verify."
            )
    # the copy comes first, and a model of billions of parameters dies there in the kernel's
    # out-of-memory kill: refuse it in one line instead
    state = [t for t in (*model.parameters(), *model.buffers()) if t.is_floating_point() or t.is_complex()]
    why = over_budget(sum(t.numel() for t in state) * 8, "a float64 copy of the model's parameters and buffers would "
                      "hold", "verify a smaller configuration (fewer layers, a narrower width)")
    if why is not None:
        raise OracleError(why)
    model64, inputs64 = _copy(model, seed, redraw, torch.float64), pytree.tree_map(_to64, example_inputs)
    try:
        return model64, inputs64, infer_units(model64, inputs64, **infer_kw)
    except TraceError as err:
        if all(t.dtype == torch.float64 for t in state):
            raise
        first = err
    # the model makes tensors in a fixed float32 (SLANet's decoder state, Gemma 4's audio
    # positions) or casts a submodule to one (Switch's router), which its float64 copy mixes or
    # refuses: the graph is captured in the model's own dtype, and every oracle run still computes
    # in float64 (leaves and recorded casts raised). A model that fails there too fails with its
    # float64 copy's error.
    del model64
    own = _copy(model, seed, redraw)
    try:
        return own, example_inputs, infer_units(own, example_inputs, **infer_kw)
    except TraceError:
        raise first from None


def _copy(model: nn.Module, seed: int, redraw: bool, dtype: torch.dtype | None = None) -> nn.Module:
    """A copy of ``model`` (in ``dtype``), its parameters redrawn when ``redraw``. A tensor a
    module computed and keeps as a plain attribute (the old ``nn.utils.weight_norm`` keeps the
    weight it recomputes before every call) is copied detached: deepcopy refuses a tensor that is
    not a graph leaf, which made ``--verify`` on such a model an internal error."""
    computed = {id(v): v.detach().clone() for m in model.modules() for v in vars(m).values()
                if isinstance(v, torch.Tensor) and not v.is_leaf}
    out = copy.deepcopy(model, computed)
    if dtype is not None:
        out = out.to(dtype)
    if redraw:
        _redraw(out, seed)
    return out


def verify(
    model: nn.Module,
    example_inputs: Any,
    *,
    modes: tuple[str, ...] = ("local", "global"),
    with_fingerprint: bool = False,
    seed: int = 0,
    redraw: bool = True,
    **infer_kw: Any,
) -> OracleResult:
    """Run the equivariance oracle in float64 on a copy of ``model`` (parameters redrawn)."""
    _, _, ug = prepare(model, example_inputs, seed=seed, redraw=redraw, **infer_kw)
    return verify_graph(ug, modes=modes, with_fingerprint=with_fingerprint, seed=seed)


def verify_graph(
    ug: UnitGraph, *, modes: tuple[str, ...] = ("local", "global"), with_fingerprint: bool = False,
    seed: int = 0,
) -> OracleResult:
    """The oracle on an already inferred float64 unit graph (see :func:`prepare`)."""
    check_fits_in_memory(ug)
    rng = random.Random(seed)
    res = OracleResult()
    if "local" in modes:
        with seeded(), torch.no_grad(), runs_on_its_inputs():
            env = run_graph(ug.traced, scaled_leaves(ug, None), high=True)
        local_mode(ug, env, res, rng)
    if "global" in modes:
        global_mode(ug, res, rng)
    if with_fingerprint:
        res.fingerprint, bad = fingerprint_checked(ug)
        res.disagreements.extend(bad)
    return res


def memory_budget() -> int:
    """Bytes the oracle may hold: ``UNITCHECK_ORACLE_MEMORY_GB``, else half the machine's memory."""
    env = os.environ.get("UNITCHECK_ORACLE_MEMORY_GB")
    if env:
        return int(float(env) * 2**30)
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not a POSIX system
        return 8 * 2**30


def over_budget(need: int, holds: str, advice: str, of: str = "") -> str | None:
    """The one-line refusal when ``need`` bytes exceed :func:`memory_budget`, else None."""
    if need <= memory_budget():
        return None
    return (f"{holds} about {need / 2**30:.1f} GiB{of} (budget {memory_budget() / 2**30:.1f} GiB, "
            f"UNITCHECK_ORACLE_MEMORY_GB): {advice}")


def check_fits_in_memory(ug: UnitGraph) -> None:
    """Global mode holds every node's float64 value and gradient for two runs: refuse up front,
    in one line, what would otherwise end in the kernel's out-of-memory kill."""
    why = over_budget(4 * float_bytes(ug.graph, itemsize=8), "the oracle would hold",
                      "verify a smaller configuration or shorter inputs", of=" of float64 values")
    if why is not None:
        raise OracleError(why)


def fingerprint(model: nn.Module, example_inputs: Any, *, seed: int = 0, **infer_kw: Any) -> list[FingerprintRow]:
    """Radial fingerprint per generator: static gauge prediction vs measured rate (Prop. 6)."""
    _, _, ug = prepare(model, example_inputs, seed=seed, **infer_kw)
    return fingerprint_graph(ug)
