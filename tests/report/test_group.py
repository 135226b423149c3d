"""Grouping of per-layer findings (issue 16): the keys, the spans, and the text, github and SARIF
formats built on them. JSON and JUnit are pinned by the golden snapshots of tests/test_report.py."""

from __future__ import annotations

import doctest
import json
import re
from collections import Counter
from pathlib import Path

import jsonschema
import pytest

from unitcheck.cli import main
from unitcheck.linter import Report
from unitcheck.report import group as group_mod
from unitcheck.report import render
from unitcheck.report.group import compact_names, finding_keys, group_findings, index_span, pattern

ROOT = Path(__file__).resolve().parents[2]
SARIF_SCHEMA = json.loads((ROOT / "tests" / "schemas" / "sarif-schema-2.1.0.json").read_text())
HEAD = re.compile(r"^\S+:\d+:\d+: (?P<rule>UC\d{3}) \[\w+\] (?:x(?P<n>\d+) (?P<span>\S+): )?")


def expand_names(text: str) -> list[str]:
    """The inverse of compact_names, written independently: ``add_{14..26 step 6, 30}``."""
    out: list[str] = []
    for item in re.findall(r"[^,{}]+(?:\{[^}]*\})?", text):
        item = item.strip()
        m = re.fullmatch(r"(?P<base>.+)_\{(?P<parts>[^}]*)\}", item)
        if not m:
            out.append(item)
            continue
        for part in m["parts"].split(","):
            r = re.fullmatch(r"\s*(\d+)\.\.(\d+)(?: step (\d+))?\s*", part)
            nums = range(int(r[1]), int(r[2]) + 1, int(r[3] or 1)) if r else [int(part)]
            out += [f"{m['base']}_{n}" for n in nums]
    return out


def headers(text: str) -> list[re.Match[str]]:
    return [m for line in text.splitlines() if (m := HEAD.match(line))]


def test_module_doctests() -> None:
    assert doctest.testmod(group_mod).failed == 0


@pytest.mark.parametrize(("text", "expected"), [
    ("model.layers.17.mlp", "model.layers.{i}.mlp"),
    ("p:h.0.attn.c_attn.weight^2 · v:add_12", "p:h.{i}.attn.c_attn.weight^2 · v:add_{n}"),
    ("v:add", "v:add_{n}"),
    ("p:fc1.weight · v:conv2d", "p:fc1.weight · v:conv2d_{n}"),  # digits inside a name stay
    ("eps 0.001 and 1e-5", "eps 0.001 and 1e-5"),  # numbers in prose stay
])
def test_pattern(text: str, expected: str) -> None:
    assert pattern(text) == expected


def test_index_span() -> None:
    assert index_span(["m.h.3.a", "m.h.1.a", "m.h.2.a"]) == "m.h.{1..3}.a"
    assert index_span(["e.l.0.b.1", "e.l.0.b.2", "e.l.1.b.1"]) == "e.l.{0..1}.b.{1..2}"
    assert index_span(["m.h.0", "m.h.2", "m.h.4", "m.h.5"]) == "m.h.{0,2,4..5}"


@pytest.mark.parametrize("names", [
    ["add_14", "add_20", "add_26", "add_32", "add_33", "x", "add_1"],
    ["silu", *(f"silu_{i}" for i in range(1, 32))],
    ["a_1", "a_3", "a_9"],
    ["gelu_7"],
])
def test_compact_names_names_every_node_in_order(names: list[str]) -> None:
    text = compact_names(names)
    assert expand_names(text) == names
    assert len(text) <= len(", ".join(names))


def _assert_groups_partition(report: Report) -> None:
    groups = group_findings(report.violations)
    members = [v for g in groups for v in g.members]
    assert sorted(map(id, members)) == sorted(map(id, report.violations))
    for g in groups:
        assert len({(v.rule, v.op, v.location) for v in g.members}) == 1
        assert len({pattern(v.module) for v in g.members}) == 1
        assert len({v.module for v in g.members}) == g.count  # one finding per layer


def test_groups_do_not_grow_with_depth(gpt_report: Report, gpt4_report: Report) -> None:
    _assert_groups_partition(gpt_report)
    _assert_groups_partition(gpt4_report)
    g2, g4 = group_findings(gpt_report.violations), group_findings(gpt4_report.violations)
    assert len(g2) == len(g4) < len(gpt4_report.violations)
    assert [g.rule for g in g2] == [g.rule for g in g4]
    assert {g.span for g in g4 if g.count > 1} >= {"transformer.h.{0..3}", "transformer.h.{0..3}.attn"}
    assert len(set(finding_keys(gpt4_report.violations))) == len(gpt4_report.violations)


def test_text_groups_name_every_finding(gpt4_report: Report) -> None:
    text = render(gpt4_report, "text")
    heads = headers(text)
    assert sum(int(m["n"] or 1) for m in heads) == len(gpt4_report.violations)
    assert len(heads) == len(group_findings(gpt4_report.violations))
    # the list of other members wraps onto lines indented by six spaces
    wrapped = re.findall(r"^  = \d+ more in \S+: (.*(?:\n      .*)*)", text, re.M)
    named = [g.example.node for g in group_findings(gpt4_report.violations)]
    for block in wrapped:
        named += expand_names(" ".join(block.split()))
    assert sorted(named) == sorted(v.node for v in gpt4_report.violations)


def test_no_group_prints_every_finding(gpt4_report: Report) -> None:
    flat = render(gpt4_report, "text", group=False)
    assert len(headers(flat)) == len(gpt4_report.violations)
    assert all(m["n"] is None for m in headers(flat))
    assert "shown as" not in flat


def test_github_annotates_each_group_once(gpt4_report: Report) -> None:
    lines = render(gpt4_report, "github", root=str(ROOT)).splitlines()
    grouped = [ln for ln in lines if ln.startswith("::error ")]
    flat = [ln for ln in render(gpt4_report, "github", root=str(ROOT), group=False).splitlines() if ln.startswith("::error ")]
    assert len(flat) == len(gpt4_report.violations)
    assert len(grouped) == len(group_findings(gpt4_report.violations))
    counts = [int(m[1]) if (m := re.search(r",title=UC\d{3} x(\d+) ", ln)) else 1 for ln in grouped]
    assert sum(counts) == len(gpt4_report.violations)
    assert all(ln.split("::")[1].split(",title=")[0] in {f.split("::")[1].split(",title=")[0] for f in flat}
               for ln in grouped)  # every annotation sits on a line a finding has


def test_sarif_keeps_every_finding_and_links_groups(gpt4_report: Report) -> None:
    data = json.loads(render(gpt4_report, "sarif", root=str(ROOT)))
    jsonschema.validate(data, SARIF_SCHEMA)
    results = data["runs"][0]["results"]
    assert len(results) == len(gpt4_report.violations)
    for g in group_findings(gpt4_report.violations):
        mine = [r for r in results if r["properties"]["node"] in {m.node for m in g.members}]
        if g.count == 1:
            assert all("relatedLocations" not in r for r in mine)
            continue
        first, rest = mine[0], mine[1:]
        linked = [loc["logicalLocations"][0]["fullyQualifiedName"] for loc in first["relatedLocations"]]
        assert linked == [m.module for m in g.members[1:]]
        for r in rest:
            (back,) = r["relatedLocations"]
            assert back["logicalLocations"][0]["fullyQualifiedName"] == g.example.module
            assert back["physicalLocation"] == first["locations"][0]["physicalLocation"]
    assert sum("relatedLocations" in r for r in results) > len(results) // 2


def run(capsys, *argv: str) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_baseline_and_ignores_apply_per_finding(capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    base = tmp_path / "baseline.json"
    assert run(capsys, "lint", "gpt", "--write-baseline", str(base), "--format", "json")[0] == 1
    code, out = run(capsys, "lint", "gpt", "--set", "n_layer=4", "--baseline", str(base), "--format", "json")
    new = json.loads(out)["violations"]
    assert code == 1 and new and all(re.match(r"transformer\.h\.[23]\b", v["module"]) for v in new)
    code, text = run(capsys, "lint", "gpt", "--set", "n_layer=4", "--baseline", str(base))
    heads = headers(text)
    assert sum(int(m["n"] or 1) for m in heads) == len(new)
    assert {m["span"] for m in heads if m["n"]} >= {"transformer.h.{2..3}", "transformer.h.{2..3}.attn"}
    cfg = tmp_path / "pyproject.toml"
    cfg.write_text('[tool.unitcheck]\n[tool.unitcheck.per-module-ignores]\n"transformer.h.1.attn" = ["UC201"]\n')
    text = run(capsys, "lint", "gpt", "--config", str(cfg))[1]
    uc201 = [m for m in headers(text) if m["rule"] == "UC201"]
    assert len(uc201) == 1 and uc201[0]["n"] is None and "transformer.h.0.attn" in text


def test_llama_32_text_report_is_short_and_complete(llama32_report: Report) -> None:
    text = render(llama32_report, "text")
    data = json.loads(render(llama32_report, "json"))
    n = len(data["violations"])
    assert n == data["summary"]["violations"] == len(llama32_report.violations) > 32
    assert len(text.splitlines()) < 120
    heads = headers(text)
    assert sum(int(m["n"] or 1) for m in heads) == n
    assert Counter(m["rule"] for m in heads for _ in range(int(m["n"] or 1))) == Counter(data["summary"]["by_rule"])
    wrapped = re.findall(r"^  = \d+ more in \S+: (.*(?:\n      .*)*)", text, re.M)
    named = [g.example.node for g in group_findings(llama32_report.violations)]
    for block in wrapped:
        named += expand_names(" ".join(block.split()))
    assert sorted(named) == sorted(v["node"] for v in data["violations"])
    assert any(m["span"] == "model.layers.{0..31}" for m in heads)
