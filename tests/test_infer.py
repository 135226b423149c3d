"""The default policy of SPEC 2 and the engine's bookkeeping, one behaviour per test."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import unitcheck
from unitcheck.infer import infer_units
from unitcheck.record import record, unit_of
from unitcheck.units import Unit
from unitcheck.values import INDEX, POLY

U = Unit.parse


def units_by_target(ug, target):  # type: ignore[no-untyped-def]
    return [unit_of(n) for n in ug.graph.nodes if n.target == target]


aten = torch.ops.aten


def test_bias_takes_the_unit_of_wx() -> None:
    ug = infer_units(nn.Linear(3, 3), torch.randn(2, 3))
    units = ug.leaf_units()
    assert units["weight"] == U("p:weight")
    assert units["bias"] == U("in:input * p:weight")


class Transposed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wt = self.w.t() * 0.5  # unit-transparent: the variable flows unbound
        return x + wt  # the combine binds it to x's unit


def test_variable_flows_through_transparent_ops_and_binds_at_a_combine() -> None:
    ug = infer_units(Transposed(), torch.randn(3, 3))
    assert ug.leaf_units()["w"] == U("in:x")
    assert not ug.violations


class Gain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.g = nn.Parameter(torch.ones(3))
        self.s = nn.Parameter(torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.s) * (x * self.g)


def test_multiplicative_use_pins_and_nonlinear_use_binds_dimensionless() -> None:
    ug = infer_units(Gain(), torch.randn(2, 3))
    units = ug.leaf_units()
    assert units["g"] == U("p:g")
    assert units["s"] == Unit()  # tanh bound it to dimensionless
    assert not ug.violations


class Stats(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(3))
        self.register_buffer("table", torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) * self.table


def test_buffers_bind_by_combine_or_are_dimensionless_constants() -> None:
    ug = infer_units(Stats(), torch.randn(2, 3))
    units = ug.leaf_units()
    assert units["mean"] == U("in:x")
    assert units["table"] == Unit()


class Masked(nn.Module):
    def forward(self, q: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        mask = torch.full((4, 4), float("-inf")).triu(1)
        scores = q @ q.transpose(-1, -2)
        scores = scores + mask
        keep = ids > 0
        return scores.masked_fill(~keep[:, None, :], torch.finfo(q.dtype).min)


def test_masks_are_polymorphic_and_integer_data_is_index() -> None:
    ug = infer_units(Masked(), (torch.randn(2, 4, 8), torch.randint(0, 3, (2, 4))))
    assert not ug.violations
    assert units_by_target(ug, aten.full.default) == [POLY]
    assert all(u is INDEX for u in units_by_target(ug, aten.gt.Scalar))
    assert units_by_target(ug, aten.add.Tensor) == [U("in:q^2")]


class Floored(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def test_numerical_floor_is_a_note_not_a_violation() -> None:
    ug = infer_units(Floored(), torch.randn(2, 3))
    assert not ug.violations
    assert [n.rule for n in ug.notes] == ["UC902"]
    mul = [n for n in ug.graph.nodes if n.target == aten.mul.Tensor][-1]
    assert unit_of(mul) == Unit()


def test_floor_threshold_is_configurable() -> None:
    ug = infer_units(Floored(), torch.randn(2, 3), floor_eps=1e-9)
    assert [v.rule for v in ug.violations] == ["UC103"]


def test_gradient_units_are_dual() -> None:
    from unitcheck.models import build

    model, inputs = build("gct")
    ug = infer_units(model, inputs)
    assert ug.loss_unit == Unit()
    for n in ug.graph.nodes:
        u = unit_of(n)
        if isinstance(u, Unit):
            assert record(n).grad_unit == u.inverse()


class MSE(nn.Module):
    def forward(self, pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(pred, y)


def test_unitful_loss_and_gradient_units_carry_the_loss_unit() -> None:
    ug = infer_units(MSE(), (torch.randn(4, 1), torch.randn(4, 1)), input_units={"pred": "in:y"})
    rules = [v.rule for v in ug.violations]
    assert rules == ["UC302"]
    assert ug.loss_unit == U("in:y^2")
    x_leaf = next(n for n in ug.graph.nodes if n.name == "y")
    assert record(x_leaf).grad_unit == U("in:y")  # u(L) - u(y)


def test_coverage_is_full_on_bundled_models() -> None:
    from unitcheck.models import build, names

    for name in names():
        model, inputs = build(name)
        ug = infer_units(model, inputs)
        assert ug.coverage == 1.0, (name, ug.unknown_ops)


def test_user_rule_for_a_custom_op() -> None:
    @torch.library.custom_op("unitcheck_test::square_plus", mutates_args=())
    def square_plus(x: torch.Tensor) -> torch.Tensor:
        return x * x + x

    @square_plus.register_fake
    def _(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.ops.unitcheck_test.square_plus(x)

    ug = infer_units(M(), torch.randn(3))
    assert [v.rule for v in ug.violations] == ["UC901"]

    @unitcheck.rule(torch.ops.unitcheck_test.square_plus.default)
    def square_plus_rule(ctx):  # type: ignore[no-untyped-def]
        return ctx.violation("UC101", "x*x + x mixes units", {"lhs": ctx.u(ctx.args[0]) ** 2, "rhs": ctx.u(ctx.args[0])})

    ug = infer_units(M(), torch.randn(3))
    assert [v.rule for v in ug.violations] == ["UC101"]
    with pytest.raises(ValueError, match="already has the rule"):
        unitcheck.rule(torch.ops.unitcheck_test.square_plus.default)(lambda ctx: None)


def test_a_compiled_model_is_checked_as_the_module_it_wraps(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``torch.compile(model)`` is what training code holds: its findings, its report's name and
    its rewrite's parameter names are the plain module's (the wrapper had put ``_orig_mod.``
    before every path, and named the report OptimizedModule)."""
    from unitcheck.models import build

    from unitcheck.rewrite.api import rewrite

    model, inputs = build("gpt", n_layer=1)
    plain = unitcheck.lint(model, inputs)
    compiled = unitcheck.lint(torch.compile(model), inputs)
    assert compiled.model == plain.model == "GPT"
    assert [(v.rule, v.module) for v in compiled.violations] == [(v.rule, v.module) for v in plain.violations]
    assert all(not v.module.startswith("_orig_mod") for v in compiled.violations) and compiled.violations
    assert unitcheck.oracle.verify(torch.compile(model), inputs).agreed > 0
    names = {n for n, _ in rewrite(torch.compile(model), inputs).module.named_parameters()}
    assert "transformer.h.0.alpha_attn" in names


class _ComplexRotary(nn.Module):
    """Meta's Llama reference code: the rotary table a complex tensor (``torch.polar``) held as a
    plain attribute, applied by complex products."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.freqs_cis = torch.polar(torch.ones(3, 2), torch.rand(3, 2, generator=torch.Generator().manual_seed(0)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = torch.view_as_complex(self.lin(x).reshape(3, 2, 2)) * self.freqs_cis
        return torch.view_as_real(z).reshape(3, 4)


def test_a_complex_constant_is_a_dimensionless_rotation() -> None:
    """Real values of a complex constant: its kind was read with ``unique``, which complex tensors
    lack (an internal error in ``units`` and ``--verify`` on Meta's Llama code). The rotation is
    dimensionless, so the output keeps the projection's unit."""
    ug = infer_units(_ComplexRotary(), (torch.randn(3, 4),))
    assert ug.coverage == 1.0 and ug.violations == []
    out = next(n for n in ug.graph.nodes if n.op == "output").args[0][0]
    assert str(ug.unit(out)) == "in:x · p:lin.weight"
