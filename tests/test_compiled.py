"""The library's compiled kernels (unitcheck/compiled.py)."""

from __future__ import annotations

import pytest
import torch

from unitcheck import compiled
from unitcheck.canonical import CANONICAL_EPS, _canonical_backward, _canonical_forward


def test_a_backward_kernel_fed_by_a_compiled_forward_runs_in_parallel() -> None:
    """Inductor judges a loop's work from size hints; C's backward, compiled on the tensors the
    compiled forward returned, was judged too small and compiled serial (one of two threads
    idle in every GCT step). Every kernel now keeps its parallel loop."""
    from torch._inductor.utils import run_and_get_code

    if not compiled.compile_enabled():
        pytest.skip("UNITCHECK_COMPILE=0: the kernels run eagerly")
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    saved = dict(compiled._COMPILED)
    try:
        torch._dynamo.reset()
        compiled._COMPILED.clear()
        x = torch.randn(32, 128, 512)
        y, ss = compiled.call_compiled(_canonical_forward, x, CANONICAL_EPS)
        if compiled._COMPILED[_canonical_forward] is _canonical_forward:
            pytest.skip("no compiler on this platform: the kernels run eagerly")
        _, code = run_and_get_code(compiled.call_compiled, _canonical_backward, torch.randn_like(x), y, ss,
                                   CANONICAL_EPS)
        assert code and all("#pragma omp parallel" in c for c in code), code
    finally:
        torch.set_num_threads(threads)
        torch._dynamo.reset()
        compiled._COMPILED.clear()
        compiled._COMPILED.update(saved)
