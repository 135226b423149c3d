"""Elementwise functions: homogeneous ones pass the unit, non-homogeneous ones need it gone."""

from __future__ import annotations

import torch

from unitcheck.fxutil import ROUNDING_OPS
from unitcheck.registry import method, rule
from unitcheck.rulectx import RuleContext
from unitcheck.units import DIMENSIONLESS
from unitcheck.values import INDEX, Index, UnitValue

from ._util import first, funcs, nonlinear, ops

F = torch.nn.functional


@rule(ops("neg", "relu", "abs", "leaky_relu", "dropout", "feature_dropout", "alpha_dropout",
          "feature_alpha_dropout", "positive", "conj", "conj_physical", "rrelu",
          "relu_", "copysign"),
      funcs(torch.neg, torch.relu, torch.abs, F.relu, F.leaky_relu, F.rrelu, torch.positive, torch.copysign),
      method("neg", "relu", "abs", "__neg__", "__abs__", "__pos__", "relu_", "abs_", "neg_", "copysign",
             "copysign_"))
def homogeneous(ctx: RuleContext) -> UnitValue:
    """
    What it does: degree-1 homogeneous functions (f(cx) = c f(x)) pass the unit through;
    ``copysign(a, b)`` is one in ``a`` and reads only the sign of ``b``, which may carry any unit.
    Why it matters: relu, abs and negation commute with rescaling; they are safe on any unit. An
    NVFP4 fake quantiser gives rounded magnitudes the signs of the unrounded values (Kolibri 1.1).
    Example: ``F.relu(self.fc(x))`` keeps u(fc(x)); ``rounded.copysign(scaled)`` keeps u(rounded).
    Fix: none.
    """
    return first(ctx)


@rule(ops("prelu", "_prelu_kernel"), funcs(F.prelu, torch.prelu))
def prelu(ctx: RuleContext) -> UnitValue:
    """
    What it does: ``prelu(x, a)`` is x where x > 0 and ``a * x`` elsewhere, so it keeps u(x)
    only for a dimensionless slope: a learned slope is bound dimensionless, and a slope that
    already carries a unit mixes the two halves' units (UC101).
    Why it matters: with a unitful slope, rescaling it rescales the negative half alone.
    Example: ``nn.PReLU()(self.fc(x))``.
    Fix: a slope that is a pure number (``F.leaky_relu``, or a slope parameter used nowhere else).
    """
    x, slope = ctx.args[0], ctx.arg(1, "weight")
    u_slope = ctx.u(slope)
    if ctx.to_dimensionless(u_slope):
        return first(ctx)
    return ctx.violation("UC101", f"prelu mixes x with its slope times x (slope unit {u_slope})",
                         {"input": ctx.u(x), "slope": u_slope})


@rule(ops("native_dropout"))
def native_dropout(ctx: RuleContext) -> UnitValue:
    """
    What it does: dropout keeps the unit; its mask is an index.
    Why it matters: dropout is a random 0/1 mask times a literal.
    Example: ``torch.ops.aten.native_dropout(x, 0.1, True)``.
    Fix: none.
    """
    return (first(ctx), INDEX)


@rule(ops("sign", "sgn", "angle"), funcs(torch.sign, torch.sgn, torch.angle), method("sign", "angle"))
def sign(ctx: RuleContext) -> UnitValue:
    """
    What it does: ``sign(x)`` (and a complex number's ``angle``) is homogeneous of degree 0:
    dimensionless for any unit of x.
    Why it matters: it is invariant under positive rescaling.
    Example: ``torch.sign(g)`` in sign-SGD.
    Fix: none.
    """
    v = first(ctx)
    return INDEX if isinstance(v, Index) else DIMENSIONLESS


_ACTIVATIONS = ops(
    "gelu", "silu", "sigmoid", "tanh", "softplus", "elu", "selu", "celu", "mish", "hardswish",
    "hardsigmoid", "relu6", "log_sigmoid_forward", "log_sigmoid", "softsign", "glu",
    "hardshrink", "softshrink", "tanhshrink", "threshold", "erf", "erfc", "erfinv", "logit",
    "_prelu_kernel_backward",
)
_ACTIVATION_FUNCS = funcs(
    F.gelu, F.silu, torch.sigmoid, F.sigmoid, torch.tanh, F.tanh, F.softplus, F.elu, F.selu,
    F.celu, F.mish, F.hardswish, F.hardsigmoid, F.relu6, F.logsigmoid, F.softsign, F.glu,
    F.hardshrink, F.softshrink, F.tanhshrink, F.threshold,
    torch.erf, torch.erfc, torch.erfinv, torch.special.erf, torch.special.expit, torch.logit,
)


@rule(_ACTIVATIONS, _ACTIVATION_FUNCS,
      method("sigmoid", "tanh", "erf", "erfinv", "sigmoid_", "tanh_", "logit"))
def activation(ctx: RuleContext) -> UnitValue:
    """
    What it does: non-homogeneous activations (gelu, silu, sigmoid, tanh, softplus, erf, ...)
    need a dimensionless input (UC202); the output is dimensionless.
    Why it matters: their kink or saturation sits at |x| ~ 1, so a unitful input makes the
    nonlinearity depend on raw weight norms.
    Example: ``F.gelu(self.c_fc(x))``.
    Fix: ``gelu(C(a))``; the normalised gate ``C(a) * sigmoid(C(a))`` for gated MLPs.
    """
    name = ctx.op
    return nonlinear(ctx, [ctx.args[0]], "UC202", name)


_TRANSCENDENTAL = ops(
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "asin", "acos",
    "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "arcsin", "arccos", "arctan", "floor",
    "ceil", "round", "trunc", "frac", "lgamma", "digamma", "polygamma", "i0", "sinc", "xlogy",
    "special_xlog1py", "special_entr", "special_i0e", "special_i1", "special_i1e",
    "special_ndtr", "special_ndtri", "special_log_ndtr", "logaddexp", "logaddexp2",
    "floor_divide", "mvlgamma", "deg2rad", "rad2deg", "sigmoid_backward",
)
_TRANSCENDENTAL_FUNCS = funcs(
    torch.exp, torch.exp2, torch.expm1, torch.log, torch.log2, torch.log10, torch.log1p,
    torch.sin, torch.cos, torch.tan, torch.asin, torch.acos, torch.atan, torch.sinh, torch.cosh,
    torch.asinh, torch.acosh, torch.atanh, torch.floor, torch.ceil, torch.round, torch.trunc,
    torch.frac, torch.lgamma, torch.digamma, torch.sinc, torch.xlogy, torch.logaddexp,
)


@rule(_TRANSCENDENTAL, _TRANSCENDENTAL_FUNCS,
      method("exp", "log", "log1p", "expm1", "sin", "cos", "tan", "floor", "ceil", "round",
             "trunc", "exp_", "log_", "lgamma", "log2", "log10", "atan", "sinh", "cosh"))
def transcendental(ctx: RuleContext) -> UnitValue:
    """
    What it does: exp, log, trigonometric and rounding functions need dimensionless input
    (UC204); their output is dimensionless.
    Why it matters: exp(c x) is not c^k exp(x) for any k: the result has no unit.
    Example: ``torch.exp(self.log_scale(h))``.
    Fix: divide by a scale with the input's unit first.
    """
    name = ctx.op
    tensors = [a for a in ctx.args if not isinstance(a, (int, float))][:2]
    if name in ROUNDING_OPS and isinstance(ctx.u(ctx.args[0]), Index):
        return INDEX
    return nonlinear(ctx, tensors or [ctx.args[0]], "UC204", name)


@rule(ops("polar"), funcs(torch.polar))
def polar(ctx: RuleContext) -> UnitValue:
    """
    What it does: ``polar(r, theta) = r e^(i theta)`` has u(r) and needs a dimensionless angle
    (UC204).
    Why it matters: complex rotary embeddings build their rotations this way.
    Example: ``torch.polar(torch.ones_like(freqs), freqs)``.
    Fix: make the angle a pure number.
    """
    r = first(ctx)
    theta = nonlinear(ctx, [ctx.arg(1, "angle")], "UC204", "polar angle")
    return r if theta == DIMENSIONLESS else theta


@rule(ops("lstm", "gru", "rnn_tanh", "rnn_relu", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell"))
def recurrent(ctx: RuleContext) -> UnitValue:
    """
    What it does: a recurrent layer's gates are sigmoids and tanhs of ``W x + U h + b``, so its
    input, its state and its weights must be dimensionless (UC202); its outputs (the hidden
    states, the cell state) are dimensionless.
    Why it matters: a unitful input moves every gate's saturation with the raw weight norms.
    Example: ``nn.LSTM(64, 64)(self.conv(x))`` (EnCodec's sequence model).
    Fix: canonicalise the input: ``lstm(C(x))``.
    """
    unit = nonlinear(ctx, ctx.node.all_input_nodes, "UC202", f"{ctx.op} (a recurrent layer's gates)")
    if ctx.op.endswith("_cell"):
        return unit
    return (unit, unit, unit) if ctx.op == "lstm" else (unit, unit)
