"""The library's compiled kernels (unitcheck/compiled.py)."""

from __future__ import annotations

import pytest
import torch

from unitcheck import compiled
from unitcheck.canonical import CANONICAL_EPS, _canonical_backward, _canonical_forward


@pytest.fixture
def fresh_kernels():  # type: ignore[no-untyped-def]
    """Empty kernel caches for one test, the session's restored after it."""
    saved = (dict(compiled._COMPILED), dict(compiled._STATIC))
    compiled.reset()
    yield
    compiled.reset()
    compiled._COMPILED.update(saved[0])
    compiled._STATIC.update(saved[1])


def test_a_backward_kernel_fed_by_a_compiled_forward_runs_in_parallel(fresh_kernels) -> None:  # type: ignore[no-untyped-def]
    """Inductor judges a loop's work from size hints; C's backward, compiled on the tensors the
    compiled forward returned, was judged too small and compiled serial (one of two threads
    idle in every GCT step). Every kernel now keeps its parallel loop."""
    from torch._inductor.utils import run_and_get_code

    if not compiled.compile_enabled():
        pytest.skip("UNITCHECK_COMPILE=0: the kernels run eagerly")
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch._dynamo.reset()
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


def _scaled_rows(x: torch.Tensor, w: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    ss = (x * x).sum(-1, keepdim=True)
    return x * torch.rsqrt(ss / x.size(-1) + eps) * w, ss


def _double(x: torch.Tensor) -> torch.Tensor:
    return 2 * x


def _needs_compiler() -> None:
    if not compiled.compile_enabled() or compiled._compiled(_scaled_rows) is _scaled_rows:
        pytest.skip("the kernels run eagerly here (UNITCHECK_COMPILE=0 or no compiler)")


def _counting_dynamic_kernel(fn):  # type: ignore[no-untyped-def]
    """Count the calls that reach fn's dynamic (Dynamo) kernel."""
    calls = []
    dynamic = compiled._compiled(fn)

    def counted(*args):  # type: ignore[no-untyped-def]
        calls.append(args)
        return dynamic(*args)

    compiled._COMPILED[fn] = counted
    return calls


def test_every_call_of_a_signature_runs_one_kernel_of_its_own_without_dynamo(fresh_kernels) -> None:  # type: ignore[no-untyped-def]
    """Dynamo's frame evaluation cost GCT 5 ms of a 12 ms training step at a tiny size: a call
    runs a kernel compiled for its signature, directly. The first call too: a kernel compiled
    for symbolic sizes rounds otherwise, and a second call must give the first call's bits."""
    _needs_compiler()
    calls = _counting_dynamic_kernel(_scaled_rows)
    x, w = torch.randn(6, 5, 37), torch.randn(6, 5, 1)
    expected = _scaled_rows(x, w, 1e-6)
    first = compiled.call_compiled(_scaled_rows, x, w, 1e-6)
    for _ in range(3):
        y, ss = compiled.call_compiled(_scaled_rows, x, w, 1e-6)
        assert torch.equal(y, first[0]) and torch.equal(ss, first[1])
    assert torch.allclose(y, expected[0], rtol=1e-6, atol=1e-6) and torch.allclose(ss, expected[1])
    assert calls == []  # Dynamo's kernel never ran
    assert sum(k[0] is _scaled_rows for k in compiled._STATIC) == 1
    for _ in range(2):  # a kernel returning one tensor returns it bare
        one = compiled.call_compiled(_double, x)
        assert isinstance(one, torch.Tensor) and torch.equal(one, 2 * x)
    assert compiled._STATIC[(_double, compiled._signature((x,)))] is not None


def test_a_static_kernel_serves_only_its_own_signature(fresh_kernels) -> None:  # type: ignore[no-untyped-def]
    """Shapes, strides and constants are the static kernel's: a transposed input, another
    length or another eps gets the dynamic kernel (then a kernel of its own), never a wrong
    answer."""
    _needs_compiler()
    x, w = torch.randn(6, 5, 24), torch.randn(6, 5, 1)
    compiled.call_compiled(_scaled_rows, x, w, 1e-6)
    variants = [
        (torch.randn(5, 6, 24).transpose(0, 1), w, 1e-6),  # same shape, other strides
        (torch.randn(6, 5, 40), w, 1e-6),  # another row length
        (x, w, 0.5),  # another constant
        (torch.randn(6, 5, 48)[..., ::2], w, 1e-6),  # strided rows
    ]
    for args in variants:
        for _ in range(3):
            y, _ = compiled.call_compiled(_scaled_rows, *args)
            assert torch.allclose(y, _scaled_rows(*args)[0], rtol=1e-5, atol=1e-6)
    assert sum(k[0] is _scaled_rows and v is not None for k, v in compiled._STATIC.items()) == 5


def test_a_call_autograd_records_stays_on_the_dynamic_kernel(fresh_kernels) -> None:  # type: ignore[no-untyped-def]
    """A static kernel is compiled without autograd: a call on tensors that require grad, with
    grad enabled, keeps Dynamo's differentiable kernel."""
    _needs_compiler()
    x = torch.randn(3, 8, requires_grad=True)
    w = torch.ones(3, 1)
    for _ in range(3):
        y, _ = compiled.call_compiled(_scaled_rows, x, w, 1e-6)
        assert y.grad_fn is not None
    assert not any(k[0] is _scaled_rows for k in compiled._STATIC)
    with torch.no_grad():
        compiled.call_compiled(_scaled_rows, x, w, 1e-6)
    assert any(k[0] is _scaled_rows for k in compiled._STATIC)


def test_static_kernels_are_bounded_and_a_dropped_one_comes_back_the_same(fresh_kernels, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Inference over many sequence lengths would keep a kernel per length: the oldest are
    dropped, and one needed again is compiled again to the same code (the same bits)."""
    _needs_compiler()
    monkeypatch.setattr(compiled, "_LIMIT", 2)
    x0, w0 = torch.randn(2, 40), torch.ones(2, 1)
    first = compiled.call_compiled(_scaled_rows, x0, w0, 1e-6)
    for n in (8, 16):
        x, w = torch.randn(2, n), torch.ones(2, 1)
        y, _ = compiled.call_compiled(_scaled_rows, x, w, 1e-6)
        assert torch.allclose(y, _scaled_rows(x, w, 1e-6)[0], rtol=1e-5, atol=1e-6)
    assert len(compiled._STATIC) == 2
    assert (_scaled_rows, compiled._signature((x0, w0, 1e-6))) not in compiled._STATIC  # dropped
    again = compiled.call_compiled(_scaled_rows, x0, w0, 1e-6)
    assert torch.equal(again[0], first[0]) and torch.equal(again[1], first[1])


def _refused(fn, args):  # type: ignore[no-untyped-def]
    raise RuntimeError("AOT compilation refused")


def test_a_static_kernel_that_fails_to_compile_leaves_the_dynamic_one(fresh_kernels, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    _needs_compiler()
    monkeypatch.setattr(compiled, "_static_kernel", _refused)
    calls = _counting_dynamic_kernel(_scaled_rows)
    x, w = torch.randn(2, 8), torch.ones(2, 1)
    for _ in range(3):
        y, _ = compiled.call_compiled(_scaled_rows, x, w, 1e-6)
    assert torch.allclose(y, _scaled_rows(x, w, 1e-6)[0], rtol=1e-5, atol=1e-6)
    assert len(calls) == 3


def test_unitcheck_compile_dynamic_keeps_every_call_on_dynamo(fresh_kernels, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    _needs_compiler()
    monkeypatch.setenv("UNITCHECK_COMPILE", "dynamic")
    calls = _counting_dynamic_kernel(_scaled_rows)
    x, w = torch.randn(2, 8), torch.ones(2, 1)
    for _ in range(3):
        compiled.call_compiled(_scaled_rows, x, w, 1e-6)
    assert len(calls) == 3 and not any(compiled._STATIC.values())


def test_autocast_and_nan_constants_keep_the_dynamic_kernel(fresh_kernels) -> None:  # type: ignore[no-untyped-def]
    """A trace under autocast would bake its casts into a kernel that a call outside autocast
    could then reuse; a NaN constant never finds its own key. Both stay on Dynamo's kernel,
    which guards on them."""
    _needs_compiler()
    calls = _counting_dynamic_kernel(_scaled_rows)
    x, w = torch.randn(2, 8), torch.ones(2, 1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        compiled.call_compiled(_scaled_rows, x, w, 1e-6)
    y, _ = compiled.call_compiled(_scaled_rows, x, w, float("nan"))
    assert torch.isnan(y).all()
    assert len(calls) == 2 and not compiled._STATIC


def test_a_call_under_vmap_keeps_the_dynamic_kernel(fresh_kernels) -> None:  # type: ignore[no-untyped-def]
    """vmap's batched tensors are plain tensors by type; a kernel compiled for one sample's
    shape must not see them."""
    _needs_compiler()
    x, w = torch.randn(3, 5, 8), torch.rand(3, 1)
    y, _ = torch.func.vmap(lambda t: compiled.call_compiled(_scaled_rows, t, w, 1e-6), in_dims=1)(x)
    expected, _ = torch.func.vmap(lambda t: _scaled_rows(t, w, 1e-6), in_dims=1)(x)
    assert torch.allclose(y, expected, rtol=1e-5, atol=1e-6)
    assert not compiled._STATIC


def test_a_static_kernel_keeps_no_reference_to_the_tensors_it_was_compiled_on(fresh_kernels) -> None:  # type: ignore[no-untyped-def]
    """Up to 1024 kernels are kept: one holding its first call's activations would hold them
    for the process's life."""
    import gc
    import weakref

    _needs_compiler()
    x, w = torch.randn(64, 256), torch.ones(64, 1)
    refs = [weakref.ref(x), weakref.ref(w)]
    compiled.call_compiled(_scaled_rows, x, w, 1e-6)
    assert any(v is not None for v in compiled._STATIC.values())
    del x, w
    gc.collect()
    assert all(r() is None for r in refs)


def test_a_failing_backend_falls_back_to_eager(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    def broken(fn, **kw):  # type: ignore[no-untyped-def]
        def run(*args):  # type: ignore[no-untyped-def]
            raise RuntimeError("backend failed")
        return run

    monkeypatch.setattr(torch, "compile", broken)
    monkeypatch.setattr(compiled, "_static_kernel", _refused)
    monkeypatch.setenv("UNITCHECK_COMPILE", "1")
    assert torch.equal(compiled.call_compiled(_triple, torch.ones(3)), torch.full((3,), 3.0))
    assert compiled._COMPILED[_triple] is _triple  # eager from now on


def _triple(x: torch.Tensor) -> torch.Tensor:
    return 3 * x
