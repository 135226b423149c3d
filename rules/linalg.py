"""Linear algebra on a matrix A of unit u: an inverse has u^-1, a Cholesky factor u^(1/2), a
solve of A X = B u(B) u^-1, a determinant u^n; a decomposition's orthonormal factors are
dimensionless and its spectrum or triangular factor keeps u. ``matrix_exp`` and the log of a
determinant need a dimensionless matrix."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import torch

from unitcheck.registry import rule
from unitcheck.rulectx import RuleContext
from unitcheck.units import DIMENSIONLESS
from unitcheck.values import UnitValue

from ._util import funcs, nonlinear, ops, per_output, product, raised

_LINALG = torch.linalg


@rule(ops("linalg_inv", "linalg_inv_ex", "inverse", "linalg_pinv", "pinverse"),
      funcs(_LINALG.inv, _LINALG.inv_ex, torch.inverse, _LINALG.pinv, torch.pinverse))
def inverse(ctx: RuleContext) -> UnitValue:
    """
    What it does: the inverse (or pseudo-inverse) of a matrix of unit u has u^-1.
    Why it matters: (g A)^-1 = A^-1 / g: a whitening or a precision matrix scales inversely.
    Example: ``torch.linalg.inv(x.T @ x)`` has u(x)^-2.
    Fix: none.
    """
    return per_output(ctx, raised(ctx, ctx.args[0], Fraction(-1)))


@rule(ops("linalg_cholesky", "linalg_cholesky_ex", "cholesky"),
      funcs(_LINALG.cholesky, _LINALG.cholesky_ex, torch.cholesky))
def cholesky(ctx: RuleContext) -> UnitValue:
    """
    What it does: the Cholesky factor L of A = L L^T has u(A)^(1/2).
    Why it matters: the factor of g A is sqrt(g) L.
    Example: ``torch.linalg.cholesky(K)`` of a kernel matrix K.
    Fix: none.
    """
    return per_output(ctx, raised(ctx, ctx.args[0], Fraction(1, 2)))


@rule(ops("linalg_solve_triangular", "linalg_solve", "linalg_solve_ex", "_linalg_solve_ex"),
      funcs(_LINALG.solve_triangular, _LINALG.solve, _LINALG.solve_ex))
def solve(ctx: RuleContext) -> UnitValue:
    """
    What it does: the solution X of A X = B (or X A = B) has unit u(B) / u(A). With
    ``unitriangular=True`` the solver takes A's diagonal to be ones, so A's other entries must be
    dimensionless; X then has u(B).
    Why it matters: gated delta-rule layers (Qwen3.5, OLMo-hybrid) solve I + L over key products
    in eager; unnormalised keys would make the implied identity a mismatched sum.
    Example: ``torch.linalg.solve_triangular(ut_system, v_beta, upper=False, unitriangular=True)``.
    Fix: normalise the keys that build the system (as gated delta layers do).
    """
    a, b = ctx.arg(0, "A", ctx.kwargs.get("self")), ctx.arg(1, "B")
    unitriangular = ctx.op.endswith("solve_triangular") and bool(ctx.kwargs.get("unitriangular", False))
    if not unitriangular:  # _linalg_solve_ex also returns A's LU factors
        return per_output(ctx, product(ctx, [b, a], [1, -1]), raised(ctx, a, Fraction(1)))
    va = ctx.u(a)
    if not ctx.to_dimensionless(va):
        return ctx.violation("UC101", f"a unit-triangular solve adds its unit diagonal to a matrix of unit {va}",
                             {"A": va})
    return ctx.u(b)


@rule(ops("linalg_det", "_linalg_det", "det"), funcs(_LINALG.det, torch.det))
def determinant(ctx: RuleContext) -> UnitValue:
    """
    What it does: the determinant of an n x n matrix of unit u has u^n.
    Why it matters: det(g A) = g^n det(A).
    Example: ``torch.det(jacobian)``.
    Fix: none.
    """
    n = _size(ctx.args[0])
    if n is None:
        return ctx.violation("UC204", "determinant of a matrix whose size is not fixed", {"input": ctx.u(ctx.args[0])})
    return per_output(ctx, raised(ctx, ctx.args[0], Fraction(n)), raised(ctx, ctx.args[0], Fraction(1)))


@rule(ops("_linalg_slogdet", "linalg_slogdet", "slogdet", "logdet", "linalg_matrix_exp", "matrix_exp"),
      funcs(_LINALG.slogdet, torch.slogdet, torch.logdet, _LINALG.matrix_exp, torch.matrix_exp))
def of_a_dimensionless_matrix(ctx: RuleContext) -> UnitValue:
    """
    What it does: ``slogdet``/``logdet`` (a log) and ``matrix_exp`` need a dimensionless matrix
    (UC204); their results are dimensionless.
    Why it matters: log det(g A) = log det(A) + n log g is shifted, not scaled, and
    exp(g A) is no power of exp(A): neither commutes with rescaling A.
    Example: a Gaussian process's ``torch.logdet(K)`` with K built from unitful features.
    Fix: divide A by a scale of its unit first (its mean diagonal, a canonicalised feature map).
    """
    out = nonlinear(ctx, [ctx.args[0]], "UC204", ctx.op)
    return per_output(ctx, out, out, raised(ctx, ctx.args[0], Fraction(1)))


_DECOMPOSITIONS: dict[str, tuple[str, ...]] = {  # each output: "1" dimensionless, "u" the matrix's unit
    "linalg_qr": ("1", "u"),
    "_linalg_svd": ("1", "u", "1"),
    "linalg_svd": ("1", "u", "1"),
    "linalg_svdvals": ("u",),
    "_linalg_eigh": ("u", "1"),
    "linalg_eigh": ("u", "1"),
    "linalg_eigvalsh": ("u",),
}


@rule(ops(*_DECOMPOSITIONS), funcs(_LINALG.qr, _LINALG.svd, _LINALG.svdvals, _LINALG.eigh, _LINALG.eigvalsh))
def decomposition(ctx: RuleContext) -> UnitValue:
    """
    What it does: QR, SVD and the symmetric eigendecomposition of a matrix of unit u: the
    orthonormal factors (Q, U, V, eigenvectors) are dimensionless, R, the singular values and
    the eigenvalues have u.
    Why it matters: g A = Q (g R) = U (g S) V^T: rescaling moves only the spectrum.
    Example: ``torch.linalg.svdvals(W)``, a spectral-norm estimate of W.
    Fix: none.
    """
    kinds = _DECOMPOSITIONS.get(ctx.op, ("u",))
    u = raised(ctx, ctx.args[0], Fraction(1))
    return per_output(ctx, *(u if k == "u" else DIMENSIONLESS for k in kinds))


def _size(x: Any) -> int | None:
    val = x.meta.get("val") if hasattr(x, "meta") else None
    n = val.shape[-1] if isinstance(val, torch.Tensor) and val.dim() >= 2 else None
    return n if isinstance(n, int) else None
