"""Multiplicative ops: mul, div, matmul, linear, addmm, conv, einsum (exponents add)."""

from __future__ import annotations

import operator

import torch

from unitcheck.registry import method, rule
from unitcheck.rulectx import RuleContext
from unitcheck.units import DIMENSIONLESS
from unitcheck.values import Index, UnitValue

from ._util import first, funcs, nonlinear, ops, product, with_bias

F = torch.nn.functional


@rule(ops("mul", "multiply"), funcs(operator.mul, operator.imul, torch.mul, torch.multiply),
      method("mul", "mul_", "__mul__", "__rmul__", "multiply"))
def mul(ctx: RuleContext) -> UnitValue:
    """
    What it does: ``a * b`` has unit u(a) u(b); a literal factor is dimensionless.
    Why it matters: this is how gains, temperatures and gates carry units.
    Example: ``x * self.weight`` pins the weight to its own generator.
    Fix: none; mismatches show up where the product is combined.
    """
    return product(ctx, [ctx.args[0], ctx.arg(1, "other")])


@rule(ops("div", "true_divide", "divide"), funcs(operator.truediv, operator.itruediv, torch.div,
      torch.true_divide, torch.divide), method("div", "div_", "__truediv__", "__rtruediv__",
      "true_divide", "divide"))
def div(ctx: RuleContext) -> UnitValue:
    """
    What it does: ``a / b`` has unit u(a) / u(b).
    Why it matters: ``q @ k.T / sqrt(d)`` divides by a literal: the unit stays u(q) u(k).
    Example: ``x / x.norm(dim=-1, keepdim=True)`` is dimensionless.
    Fix: none.
    """
    a, b = ctx.args[0], ctx.arg(1, "other")
    if ctx.node.op == "call_method" and ctx.node.target == "__rtruediv__":
        a, b = b, a
    mode = ctx.kwargs.get("rounding_mode")
    if mode in ("floor", "trunc") and not isinstance(ctx.u(a), Index):
        return nonlinear(ctx, [a, b], "UC204", f"division with rounding_mode={mode!r}")
    return product(ctx, [a, b], [1, -1])


_MATMUL = ops("matmul", "mm", "bmm", "dot", "vdot", "mv", "outer", "ger", "inner", "kron",
              "tensordot", "_weight_int8pack_mm", "chain_matmul", "linalg_multi_dot")


@rule(_MATMUL, funcs(torch.matmul, torch.mm, torch.bmm, torch.dot, torch.mv, torch.outer,
      torch.inner, torch.kron, torch.tensordot, operator.matmul),
      method("matmul", "mm", "bmm", "dot", "mv", "outer", "__matmul__"))
def matmul(ctx: RuleContext) -> UnitValue:
    """
    What it does: a matrix product has unit u(a) u(b); a weight operand is pinned to its own
    generator.
    Why it matters: every weight is a scale degree of freedom.
    Example: ``h @ self.W`` has u(h) · p:W.
    Fix: none.
    """
    if ctx.node.target in ops("chain_matmul.default", "linalg_multi_dot.default"):
        return product(ctx, list(ctx.args[0]))  # type: ignore[arg-type]
    return product(ctx, [ctx.args[0], ctx.args[1]])


@rule(ops("einsum"), funcs(torch.einsum))
def einsum(ctx: RuleContext) -> UnitValue:
    """
    What it does: an einsum's unit is the product of its operands' units.
    Why it matters: attention written as einsum multiplies q and k units like matmul.
    Example: ``torch.einsum("bhqd,bhkd->bhqk", q, k)``.
    Fix: none.
    """
    operands = ctx.args[1]
    if not isinstance(operands, (list, tuple)):
        operands = ctx.args[1:]
    return product(ctx, list(operands))


# the NVFP4 GEMM (unitcheck.quant.gemm) by name: linting never imports the quantiser
@rule(ops("linear"), funcs(F.linear), "unitcheck::nvfp4_linear")
def linear(ctx: RuleContext) -> UnitValue:
    """
    What it does: ``linear(x, W, b)`` has unit u(x) · p:W; the bias takes that unit.
    Why it matters: the bias is bound by its combine with W x, so it is not a free scale.
    Example: ``self.c_fc(x)``.
    Fix: none.
    """
    x, w = ctx.args[0], ctx.arg(1, "weight")
    out = product(ctx, [x, w])
    return with_bias(ctx, out, ctx.arg(2, "bias"), "linear")


@rule(ops("addmm", "addbmm", "baddbmm", "addmv", "addr"), funcs(torch.addmm, torch.baddbmm,
      torch.addmv), method("addmm", "baddbmm", "addmv"))
def addmm(ctx: RuleContext) -> UnitValue:
    """
    What it does: ``addmm(b, x, W)`` (Hugging Face's Conv1D) is a product plus a bias of its unit.
    Why it matters: same as ``linear``.
    Example: ``torch.addmm(self.bias, x, self.weight)``.
    Fix: none.
    """
    out = product(ctx, [ctx.args[1], ctx.args[2]])
    return with_bias(ctx, out, ctx.args[0], "addmm")


@rule(ops("addcmul", "addcdiv"), funcs(torch.addcmul, torch.addcdiv), method("addcmul", "addcdiv"))
def addcmul(ctx: RuleContext) -> UnitValue:
    """
    What it does: ``a + v * b * c`` (or ``b / c``) needs u(a) = u(b) u(c)^(+-1).
    Why it matters: optimiser-style fused updates mix units like any add.
    Example: ``torch.addcmul(x, g, h, value=0.5)``.
    Fix: none.
    """
    sign = -1 if ctx.op == "addcdiv" else 1
    out = product(ctx, [ctx.args[1], ctx.args[2]], [1, sign])
    return with_bias(ctx, out, ctx.args[0], "addcmul")


_CONV = ops("conv1d", "conv2d", "conv3d", "convolution", "_convolution", "conv_transpose1d",
            "conv_transpose2d", "conv_transpose3d", "conv_tbc", "mkldnn_convolution",
            "_convolution_mode", "cudnn_convolution")


@rule(_CONV, funcs(F.conv1d, F.conv2d, F.conv3d, F.conv_transpose1d, F.conv_transpose2d,
      F.conv_transpose3d))
def conv(ctx: RuleContext) -> UnitValue:
    """
    What it does: a convolution has unit u(x) · p:W; the bias takes that unit.
    Why it matters: like ``linear``, per output channel.
    Example: ``self.conv1(img)`` has in:img · p:conv1.weight.
    Fix: none.
    """
    out = product(ctx, [ctx.args[0], ctx.arg(1, "weight")])
    return with_bias(ctx, out, ctx.arg(2, "bias"), "convolution")


@rule(ops("_grouped_mm"), funcs(getattr(F, "grouped_mm", None)), "transformers::grouped_mm_fallback")
def grouped_mm(ctx: RuleContext) -> UnitValue:
    """
    What it does: a grouped matrix product (one weight per expert, tokens sorted by expert) has
    unit u(x) · p:W, like ``linear``; an optional bias takes that unit.
    Why it matters: mixture-of-experts layers run every expert's GEMM through it.
    Example: ``torch.ops.transformers.grouped_mm_fallback(x, self.experts.gate_up_proj, offs)``.
    Fix: none.
    """
    out = product(ctx, [ctx.args[0], ctx.arg(1, "mat2", ctx.kwargs.get("weight"))])
    return with_bias(ctx, out, ctx.arg(3, "bias"), "grouped_mm")


@rule(ops("_trilinear", "bilinear"), funcs(F.bilinear))
def bilinear(ctx: RuleContext) -> UnitValue:
    """
    What it does: ``bilinear(x1, x2, W, b)`` = x1^T W x2 + b has u(x1) u(W) u(x2); the bias
    must match it (it binds to it if free).
    Why it matters: ``nn.Bilinear`` scores pairs (a relation head, a gated fusion): each factor
    scales the score.
    Example: ``nn.Bilinear(d, d, 1)(premise, hypothesis)``.
    Fix: none.
    """
    out = product(ctx, list(ctx.args[:3]))
    if ctx.op == "_trilinear":  # (x1, W, x2, then dimensions): the bias is added after it
        return out
    return with_bias(ctx, out, ctx.arg(3, "bias"), "bilinear")


_FFT = ops("_fft_r2c", "_fft_c2c", "_fft_c2r", "fft_fft", "fft_ifft", "fft_fft2", "fft_ifft2", "fft_fftn",
           "fft_ifftn", "fft_rfft", "fft_irfft", "fft_rfft2", "fft_irfft2", "fft_rfftn", "fft_irfftn",
           "fft_hfft", "fft_ihfft", "fft_fftshift", "fft_ifftshift")


@rule(_FFT, funcs(torch.fft.fft, torch.fft.ifft, torch.fft.fft2, torch.fft.ifft2, torch.fft.fftn,
                  torch.fft.ifftn, torch.fft.rfft, torch.fft.irfft, torch.fft.rfft2, torch.fft.irfft2,
                  torch.fft.rfftn, torch.fft.irfftn, torch.fft.hfft, torch.fft.ihfft, torch.fft.fftshift,
                  torch.fft.ifftshift))
def fourier(ctx: RuleContext) -> UnitValue:
    """
    What it does: a discrete Fourier transform is linear (its normalisation is a fixed number), so
    the output keeps the input's unit; integer input gives a dimensionless spectrum.
    Why it matters: FNet mixes tokens with ``fft2(x).real``; calling it unknown (UC901) would
    hide every scale downstream.
    Example: ``torch.fft.fft2(h).real`` keeps u(h).
    Fix: none.
    """
    v = first(ctx)
    return DIMENSIONLESS if isinstance(v, Index) else v

