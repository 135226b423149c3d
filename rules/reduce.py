"""Reductions and pooling: homogeneous of degree 1 (mean, sum, max, pools), or a fixed power
(var: u^2, prod: u^n)."""

from __future__ import annotations

import math
from fractions import Fraction

import torch

from unitcheck.registry import method, rule
from unitcheck.rulectx import RuleContext
from unitcheck.units import DIMENSIONLESS, Unit
from unitcheck.values import INDEX, Index, Poly, UnitValue

from ._util import first, funcs, nonlinear, ops, per_output, raised

F = torch.nn.functional


@rule(ops("mean", "sum", "nansum", "nanmean", "cumsum", "amax", "amin", "median", "nanmedian",
          "linalg_vector_norm", "norm", "frobenius_norm", "nuclear_norm", "linalg_norm",
          "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
          "adaptive_avg_pool3d", "_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "max_pool1d",
          "max_pool2d", "max_pool3d", "adaptive_max_pool1d", "upsample_nearest1d",
          "upsample_nearest2d", "upsample_nearest3d", "_upsample_nearest_exact1d",
          "_upsample_nearest_exact2d", "upsample_bilinear2d", "upsample_linear1d",
          "upsample_bicubic2d", "upsample_trilinear3d", "_upsample_bilinear2d_aa", "_upsample_bicubic2d_aa",
          "_upsample_nearest_exact3d", "trace",
          "diff", "lp_pool1d", "lp_pool2d", "cumulative_trapezoid",
          "trapezoid", "renorm"),
      funcs(torch.mean, torch.sum, torch.nansum, torch.cumsum, torch.amax, torch.amin,
            torch.median, torch.norm, torch.linalg.vector_norm, torch.linalg.norm, torch.diff,
            F.avg_pool1d, F.avg_pool2d, F.avg_pool3d, F.adaptive_avg_pool1d,
            F.adaptive_avg_pool2d, F.adaptive_avg_pool3d, F.max_pool1d, F.max_pool2d,
            F.max_pool3d, F.adaptive_max_pool1d, F.adaptive_max_pool2d, F.interpolate,
            F.upsample, F.lp_pool1d, F.lp_pool2d),
      method("mean", "sum", "cumsum", "amax", "amin", "median", "norm", "nansum", "diff"))
def degree_one(ctx: RuleContext) -> UnitValue:
    """
    What it does: means, sums, norms, extrema and pooling pass the unit through.
    Why it matters: they are homogeneous of degree 1: reduce(c x) = c reduce(x).
    Example: ``x.pow(2).mean(-1, keepdim=True)`` has u(x)^2.
    Fix: none.
    """
    return first(ctx)


@rule(ops("grid_sampler", "grid_sampler_2d", "grid_sampler_3d", "_grid_sampler_2d_cpu_fallback"), funcs(F.grid_sample))
def grid_sample(ctx: RuleContext) -> UnitValue:
    """
    What it does: ``grid_sample`` interpolates the input at the grid's coordinates: the output
    has u(input); the grid must be dimensionless (UC204 otherwise).
    Why it matters: bilinear (or nearest) interpolation is linear in the sampled values, so it
    commutes with rescaling them; the coordinates, normalised to [-1, 1], are positions: scaling
    them moves every sample elsewhere.
    Example: ``F.grid_sample(value, reference_points + offsets)`` in deformable attention, where
    ``offsets`` come straight out of a linear layer.
    Fix: bound the coordinates (tanh, a sigmoid) or divide the offsets by a scale of their unit.
    """
    grid = ctx.arg(1, "grid")
    ug = ctx.u(grid)
    if not isinstance(ug, (Index, Poly)) and not ctx.to_dimensionless(ug):
        return ctx.violation("UC204", f"grid_sample at coordinates of unit {ug}", {"grid": ug},
                             consumed=[first(ctx), ug])
    return first(ctx)


@rule(ops("max", "min", "sort", "topk", "kthvalue", "mode", "cummax", "cummin",
          "max_pool2d_with_indices", "max_pool3d_with_indices", "max_pool1d_with_indices",
          "adaptive_max_pool2d", "adaptive_max_pool3d", "msort"),
      funcs(torch.max, torch.min, torch.sort, torch.topk, torch.kthvalue, torch.cummax,
            torch.cummin), method("max", "min", "sort", "topk", "kthvalue"))
def values_and_indices(ctx: RuleContext) -> UnitValue:
    """
    What it does: max/min/sort/topk values keep the unit; their indices are index data;
    ``max(a, b)`` of two tensors is a same-unit combine.
    Why it matters: order statistics commute with positive rescaling.
    Example: ``logits.topk(k, dim=-1)``.
    Fix: none.
    """
    if len(ctx.args) > 1 and hasattr(ctx.args[1], "meta") and not isinstance(ctx.u(ctx.args[1]), Index):
        return ctx.same_unit([ctx.args[0], ctx.args[1]], "max")
    return per_output(ctx, first(ctx))


@rule(ops("var", "var_mean", "std", "std_mean"), funcs(torch.var, torch.std, torch.var_mean,
      torch.std_mean), method("var", "std"))
def variance(ctx: RuleContext) -> UnitValue:
    """
    What it does: variance has u(x)^2, standard deviation u(x); ``var_mean`` returns both units.
    Why it matters: normalisers divide by sqrt(var + eps), cancelling u(x).
    Example: ``x.var(-1, keepdim=True, unbiased=False)``.
    Fix: none.
    """
    v = first(ctx)
    if isinstance(v, Index):
        return INDEX
    unit = ctx.pin(v)
    name = ctx.op
    if not isinstance(unit, Unit):
        return v
    if "var" in name:
        return (unit**2, unit) if "mean" in name else unit**2
    return (unit, unit) if "mean" in name else unit


@rule(ops("cov", "corrcoef"), funcs(torch.cov, torch.corrcoef), method("cov", "corrcoef"))
def covariance(ctx: RuleContext) -> UnitValue:
    """
    What it does: ``cov`` of variables of unit u has u^2; ``corrcoef`` (the covariance over the
    product of the standard deviations) is dimensionless.
    Why it matters: cov(g x) = g^2 cov(x), and the correlation does not move at all; export
    cannot follow ``torch.cov`` (it branches on its weights' values), so the symbolic trace
    meets it whole.
    Example: ``torch.cov(features.T)``, a whitening or decorrelation penalty's covariance.
    Fix: none.
    """
    if ctx.op == "corrcoef" or isinstance(ctx.u(ctx.args[0]), Index):
        return DIMENSIONLESS
    return raised(ctx, ctx.args[0], Fraction(2))


@rule(ops("prod", "cumprod"), funcs(torch.prod, torch.cumprod), method("prod", "cumprod"))
def prod(ctx: RuleContext) -> UnitValue:
    """
    What it does: a product over n elements has u(x)^n (a cumulative product mixes powers: UC204
    for a unitful input).
    Why it matters: the exponent depends on the reduced size.
    Example: ``x.prod(dim=-1)`` over 4 elements has u(x)^4.
    Fix: reduce logarithms of canonical quantities instead.
    """
    v = first(ctx)
    if isinstance(v, Index):
        return INDEX
    name = ctx.op
    shape_in, shape_out = ctx.shape(ctx.args[0]), ctx.shape()
    if "cumprod" in name or shape_in is None or shape_out is None:
        return nonlinear(ctx, [ctx.args[0]], "UC204", name)
    n = math.prod(shape_in) // max(1, math.prod(shape_out))
    unit = ctx.pin(v)
    return unit**n if isinstance(unit, Unit) else v


@rule(ops("logsumexp", "logcumsumexp"), funcs(torch.logsumexp, torch.logcumsumexp), method("logsumexp", "logcumsumexp"))
def logsumexp(ctx: RuleContext) -> UnitValue:
    """
    What it does: ``logsumexp`` needs a dimensionless input (UC204).
    Why it matters: it is log(sum(exp(x))).
    Example: ``torch.logsumexp(scores, -1)``.
    Fix: canonicalise the scores.
    """
    return nonlinear(ctx, [ctx.args[0]], "UC204", "logsumexp")
