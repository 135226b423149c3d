"""``unitcheck explain`` and ``units --node`` (issue 16): provenance trees end exactly at the
generators of a finding's units, and the attention finding's factors come through q and k."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn
from unitcheck.models import MODELS, build

from unitcheck.cli import main
from unitcheck.explain import (
    Explanation,
    GeneratorTree,
    Step,
    carriers,
    explain_finding,
    explain_node,
    render_text,
    to_json,
)
from unitcheck.infer import infer_units
from unitcheck.linter import Report, lint
from unitcheck.report import render
from unitcheck.report.group import finding_keys

from .conftest import assert_snapshot

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def reports() -> dict[str, Report]:
    """Every bundled model (what `unitcheck models` lists), linted once."""
    out = {}
    for name in MODELS:
        model, inputs = build(name)
        out[name] = lint(model, inputs, name=name)
    return out


def _first(report: Report, rule: str) -> tuple[Explanation, str]:
    keys = finding_keys(report.violations)
    i = next(i for i, v in enumerate(report.violations) if v.rule == rule)
    return explain_finding(report.unit_graph, report.violations[i], keys[i]), keys[i]


def _origin_of(g: str, s: Step) -> bool:
    """Is the leaf ``s`` where generator ``g`` starts?"""
    if g.startswith("v:"):
        return g[2:] == s.node or g[2:].startswith(s.node + ".")
    if g.startswith("p:"):
        return s.op in ("param", "buffer") and s.module in g[2:].split("&")
    if g.startswith("in:"):
        return s.op == "input" and s.module == g[3:]
    return s.op in ("param", "buffer", "input")  # a declared scale starts at a declared leaf


def _check(expl: Explanation, where: str) -> None:
    for role in expl.roles:
        assert [t.generator for t in role.trees] == list(role.unit.generators()), where
        for t in role.trees:
            steps = list(t.path.walk())
            assert not [s for s in steps if s.kind == "missing"], f"{where} {role.role} {t.generator}"
            leaves = t.leaves()
            assert leaves, f"{where} {role.role}: {t.generator} reaches no origin"
            assert all(_origin_of(t.generator, s) for s in leaves), (where, t.generator, [s.node for s in leaves])
            # a reference to an earlier expansion reaches that expansion's origins (through its own references)
            assert all(t.reaches(s) for s in steps if s.kind == "seen"), (where, t.generator)
    assert expl.leaves() == expl.generators(), where


def test_uc201_factors_arrive_through_q_and_k(reports: dict[str, Report]) -> None:
    """Golden: both factors of c_attn.weight^2 · ln_1.weight^2 branch at the attention into the
    query and key paths (lines 46 and 47 of models/gpt.py), each on to its parameter."""
    expl, _ = _first(reports["gpt"], "UC201")
    (role,) = expl.roles
    assert role.role == "logits" and str(role.unit) == \
        "p:transformer.h.0.attn.c_attn.weight^2 · p:transformer.h.0.ln_1.weight^2"
    assert role.sources == ["transpose", "transpose_1"]  # q and k, not v
    for tree in role.trees:
        assert tree.exponent == 2
        assert [s.node for s in tree.path.steps] == ["scaled_dot_product_attention"]
        q, k = tree.path.branches
        assert (q.steps[0].via, k.steps[0].via) == ("query", "key")
        assert q.steps[0].location.line == 46 and k.steps[0].location.line == 47
        assert q.steps[0].exponent == k.steps[0].exponent == 1
        leaf = tree.generator.removeprefix("p:")
        assert [s.module for s in q.steps if s.kind == "origin"] == [leaf]
        assert k.steps[-1].kind == "seen" and tree.reaches(k.steps[-1]) == [leaf]  # the shared split
    text = render_text(expl, root=str(ROOT))
    assert_snapshot("explain_gpt_uc201", text.replace(str(ROOT), "<ROOT>").splitlines())


def test_every_finding_of_every_bundled_model_ends_at_its_generators(reports: dict[str, Report]) -> None:
    checked = 0
    for name, report in reports.items():
        for v in report.violations:
            _check(explain_finding(report.unit_graph, v), f"{name}:{v.node}:{v.rule}")
            checked += 1
    assert checked >= 30


def test_every_node_of_gpt_explains_its_own_unit(reports: dict[str, Report]) -> None:
    ug = reports["gpt"].unit_graph
    for n in ug.graph.nodes:
        if n.op != "output":
            _check(explain_node(ug, n), n.name)


class _BiasReused(nn.Module):
    """The bias's unit is decided by the combine in ``fc`` (W x + b); its second use then carries
    the weight's generator without a multiplicative path of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.fc(x) + self.fc.bias * 2)


def test_a_bound_bias_leads_on_to_the_weight() -> None:
    ug = infer_units(_BiasReused(), (torch.randn(2, 4),))
    v = next(v for v in ug.violations if v.rule == "UC202")
    expl = explain_finding(ug, v)
    _check(expl, "bias")
    tree = next(t for t in expl.roles[0].trees if t.generator == "p:fc.weight")
    bound = [s for s in tree.path.walk() if s.kind == "bound"]
    assert [s.module for s in bound] == ["fc.bias"] and "bound to the unit" in bound[0].note


class _Doubling(nn.Module):
    """x <- x + 2x, a unit-consistent update whose paths double every layer: without sharing
    the tree would have 2^depth leaves, and a recursive walk would overflow the stack."""

    def __init__(self, depth: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))
        self.depth = depth

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x * self.w
        for _ in range(self.depth):
            h = h + h * 2.0
        return torch.tanh(h)


def _doubling(depth: int) -> None:
    ug = infer_units(_Doubling(depth), (torch.randn(3),), method="fx")
    v = next(v for v in ug.violations if v.rule == "UC202")
    expl = explain_finding(ug, v)
    _check(expl, "doubling")
    tree = next(t for t in expl.roles[0].trees if t.generator == "p:w")
    assert len(list(tree.path.walk())) < 3 * ug.compute_nodes  # each node once, plus its references
    text = render_text(expl)
    assert len(text.splitlines()) < 4 * ug.compute_nodes and len(text) < 300 * len(text.splitlines())
    assert "(shown above; reaches w)" in text
    json.loads(json.dumps(to_json(expl)))


def test_reconverging_paths_share() -> None:
    _doubling(40)


@pytest.mark.slow
def test_deep_trees_stay_iterative() -> None:
    _doubling(1100)  # deeper than Python's recursion limit and json's nesting limit


def test_provenance_pass_writes_one_key(reports: dict[str, Report]) -> None:
    ug = reports["gpt"].unit_graph
    explain_finding(ug, reports["gpt"].violations[0])
    linear = ug.node("linear")
    got = {g: [p.name for p in ps] for g, ps in carriers(linear).by_generator.items()}
    # the bias (bound by this very combine) is not a carrier: the weight and the input are
    assert got == {"p:transformer.h.0.attn.c_attn.weight": ["p_transformer_h_0_attn_c_attn_weight"],
                   "p:transformer.h.0.ln_1.weight": ["layer_norm"]}
    assert carriers(ug.node("p_transformer_h_0_attn_c_attn_bias")).bound_at is linear


def test_html_blocks_show_the_trees(reports: dict[str, Report]) -> None:
    report = reports["gpt"]
    text = render(report, "html")
    _, key = _first(report, "UC201")
    block = text[text.index(f'id="f-{key.replace(":", "-")}"'):]
    block = block[block.index('<details class="explain"'):]
    block = block[:block.index("</details>")]
    assert '<pre class="tree">' in block and "query: transpose" in block and "key: transpose_1" in block


def test_generator_tree_leaves_are_origins_only() -> None:
    seen = Step("a", "op", "", None, 1, kind="seen")
    origin = Step("b", "param", "w", None, 1, kind="origin")
    from unitcheck.explain import Path as TreePath

    t = GeneratorTree("p:w", 1, TreePath([Step("c", "op", "", None, 1)], [TreePath([origin]), TreePath([seen])]))
    assert t.leaves() == [origin]


# -- the command line -------------------------------------------------------------------------


def run(capsys, *argv: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_explain_by_code_node_and_fingerprint(capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run(capsys, "explain", "gpt", "UC201")
    assert code == 0 and not err
    assert out.startswith("UC201 [error] at node scaled_dot_product_attention")
    assert "├─ query: transpose" in out and "└─ key: transpose_1" in out
    code, data, _ = run(capsys, "explain", "gpt", "add_1", "--format", "json")
    got = json.loads(data)
    assert code == 0 and got["finding"]["rule"] == "UC102" and got["model"] == "gpt"
    assert {r["role"] for r in got["roles"]} == {"stream", "branch"}
    stream = next(r for r in got["roles"] if r["role"] == "stream")
    assert stream["generators"][0]["leaves"] == ["add"]
    code, again, _ = run(capsys, "explain", "gpt", got["finding"]["fingerprint"], "--format", "json")
    assert code == 0 and json.loads(again)["finding"]["key"] == got["finding"]["key"]
    code, out, _ = run(capsys, "explain", "gpt", "linear")  # a node with no finding: its own unit
    assert code == 0 and out.startswith("node linear") and "● p:transformer.h.0.attn.c_attn.weight" in out


@pytest.mark.parametrize(("finding", "expect"), [
    ("add_1x", "did you mean add_1"),
    ("UC203", "gpt has no UC203 finding; its findings: UC101 (first at add)"),
    ("UC999", "unknown rule code"),
    ("0123456789abcdef", "no finding or node"),
])
def test_cli_explain_bad_finding(capsys, finding: str, expect: str) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run(capsys, "explain", "gpt", finding)
    assert code == 2 and not out
    assert err.count("\n") == 1 and err.startswith("unitcheck: ") and expect in err


def test_cli_units_node(capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run(capsys, "units", "gpt", "--node", "linear")
    assert code == 0
    assert "unit:           p:transformer.h.0.attn.c_attn.weight · p:transformer.h.0.ln_1.weight" in out
    assert "set by:         rule unitcheck.rules.linear.linear" in out and "models/gpt.py:45" in out
    code, data, _ = run(capsys, "units", "gpt", "--node", "transformer.h.0.attn.c_attn.bias", "--format", "json")
    got = json.loads(data)
    assert code == 0 and got["node"] == "p_transformer_h_0_attn_c_attn_bias" and got["op"] == "param"
    assert "bound by the same-unit constraint at node linear" in got["set_by"]
    assert got["grad_unit"].startswith("p:transformer.h.0.attn.c_attn.weight^-1")
    code, out, _ = run(capsys, "units", "gpt", "--node", "scaled_dot_product_attention")
    assert code == 0 and "finding:        UC201" in out and "unitcheck.rules.attention.sdpa" in out
    code, out, err = run(capsys, "units", "gpt", "--node", "lineer")
    assert code == 2 and err.count("\n") == 1 and "did you mean linear" in err
    code, _, err = run(capsys, "units", "gpt", "--node", "linear", "--format", "dot")
    assert code == 2 and "--node" in err
