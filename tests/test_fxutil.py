"""FX node facts: op names, and the movement tables agreeing with the rules."""

from __future__ import annotations

import operator

import torch
import torch.fx as fx
import unitcheck.rules  # noqa: F401  (registers the built-in rules)

from unitcheck import registry
from unitcheck.fxutil import IDENTITY_OPS, MOVEMENT_OPS, VIEW_OPS, base_name, op_name
from unitcheck.units import Unit


def _node(target: object, op: str = "call_function") -> fx.Node:
    g = fx.Graph()
    x = g.placeholder("x")
    return g.create_node(op, target, (x,))  # type: ignore[arg-type]


def test_base_and_op_names() -> None:
    aten = torch.ops.aten
    assert base_name(_node(aten.add.Tensor)) == "add" and op_name(_node(aten.add.Tensor)) == "aten.add.Tensor"
    assert base_name(_node(operator.add)) == "add" and op_name(_node(operator.add)) == "operator.add"
    assert base_name(_node("view", "call_method")) == "view" and op_name(_node("view", "call_method")) == "Tensor.view"
    assert base_name(_node(torch.nn.functional.gelu)) == "gelu"


def test_movement_ops_pass_units_through_in_the_rules() -> None:
    """Every movement op that exists in ATen has a rule, and that rule keeps the unit: the table
    the rewriter and the oracle look through says the same as the rules."""
    from unitcheck.rulectx import RuleContext

    assert IDENTITY_OPS.isdisjoint(VIEW_OPS)
    u = Unit.parse("in:x")

    class _Engine:
        floor_eps = 1e-3

        def unit(self, node: fx.Node) -> Unit:
            return u

    checked = 0
    for name in sorted(MOVEMENT_OPS):
        packet = getattr(torch.ops.aten, name, None)
        overloads = [getattr(packet, o) for o in packet.overloads()] if packet is not None else []
        if not any(o._schema.returns for o in overloads):
            continue  # absent from this build, or an assertion that returns nothing
        fn = registry.lookup(packet)
        assert fn is not None, f"movement op {name} has no unit rule"
        node = _node(packet)
        node.meta["val"] = torch.empty(2, 3, device="meta")
        assert fn(RuleContext(node, _Engine())) == u, name  # type: ignore[arg-type]
        checked += 1
    assert checked >= 20
