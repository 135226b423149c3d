"""Libraries that compute otherwise when they are being compiled, held to their eager path.

transformers asks whether it is being exported and computes otherwise if so. Building attention
masks, eager drops a mask it can prove full (no padding; a causal mask SDPA's ``is_causal``
gives) and calls SDPA without one; exported, it materialises the mask, and with grouped keys it
repeats them instead of ``enable_gqa``. Gated-delta layers (Qwen3.5, OLMo-hybrid) solve their
triangular systems with ``solve_triangular`` in eager and by forward substitution when exported.
The kernels round otherwise, so a module generated from the exported path differs from the model
in the last bits, and where a module sets ``is_causal`` (Phi-4's vision encoder) eager attends
causally and the export does not.

Code generation wants eager's computation. Within :func:`eager_paths` a capture patches the
library's compile checks (``is_torchdynamo_exporting``, ``is_torchdynamo_compiling`` and
``is_tracing`` in every transformers module that imported them) to answer as in eager, so the
library takes eager's path; its tests of a mask's values (``padding_mask.all()``) become
branches on values, which export with real values decides and asserts. Such a decision is sound when the value comes from the model's own constants
(a mask of ones, positions from ``arange``), the same for every input; a decision on a user's
input (an attention mask passed in) would hold the example's branch, so the capture refuses any
such decision (:class:`EagerPathRefused`; the recorded stack ends at the model's call into the
library, so it cannot tell whose branch it is) and the caller captures the export path.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Iterator
from types import ModuleType

from .errors import UnitcheckError
from .scoped import scoped

__all__ = ["LIBRARY", "EagerPathRefused", "active", "eager_paths", "loaded", "patched"]

LIBRARY = "transformers"
# the checks, wherever a module imported them: each answers as in eager, together (Mamba's scan
# takes ``compiling and not exporting`` for a third path that neither eager nor export takes)
_CHECKS = ("is_torchdynamo_exporting", "is_torchdynamo_compiling", "is_tracing")
_ON: contextvars.ContextVar[bool] = contextvars.ContextVar("eager_paths", default=False)


class EagerPathRefused(UnitcheckError):
    """Under eager paths, a branch read a user's input: the capture would hold the example's branch."""


def _not_compiling(*args: object) -> bool:
    return False


def loaded() -> bool:
    """Whether the library is imported (nothing to hold otherwise)."""
    return LIBRARY in sys.modules


# modules whose check decides whether to memoise, not what to compute: transformers'
# ``compile_compatible_method_lru_cache`` (RT-DETR's anchors) skips its cache while compiling;
# told "not compiling" it kept the capture's fake tensors, and the model's next call returned them
_MEMOS = frozenset({"transformers.pytorch_utils"})


def _checks() -> list[tuple[ModuleType, str]]:
    return [(module, name) for key, module in list(sys.modules.items())
            if (key == LIBRARY or key.startswith(LIBRARY + ".")) and key not in _MEMOS
            and isinstance(module, ModuleType)
            for name in _CHECKS if name in vars(module)]


def eager_paths() -> contextlib.AbstractContextManager[None]:
    """Captures inside take the library's eager paths (see the module's docstring)."""
    return scoped(_ON, True)


def active() -> bool:
    return _ON.get() and loaded()


@contextlib.contextmanager
def patched() -> Iterator[None]:
    """The checks answer "not compiling" while one capture runs, when :func:`eager_paths` is on."""
    saved = [(module, name, vars(module)[name]) for module, name in _checks()] if active() else []
    for module, name, _ in saved:
        setattr(module, name, _not_compiling)
    try:
        yield
    finally:
        for module, name, original in saved:
            setattr(module, name, original)
