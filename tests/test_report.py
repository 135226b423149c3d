"""Golden snapshots of every report format for the bundled gpt and gct, validated by schema."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

import jsonschema
import pytest
from unitcheck.models import build

from unitcheck import docgen
from unitcheck.linter import lint
from unitcheck.report import FORMATS, render

from .conftest import assert_snapshot

ROOT = Path(__file__).resolve().parents[1]
SARIF_SCHEMA = json.loads((ROOT / "tests" / "schemas" / "sarif-schema-2.1.0.json").read_text())
LINT_SCHEMA = json.loads((ROOT / "docs" / "schema" / "lint.schema.json").read_text())


def _report(name: str):  # type: ignore[no-untyped-def]
    model, inputs = build(name)
    return lint(model, inputs, name=name)


@pytest.mark.parametrize("name", ["gpt", "gct"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_format_snapshot(name: str, fmt: str) -> None:
    text = render(_report(name), fmt, root=str(ROOT)).replace(str(ROOT), "<ROOT>")
    text = text.replace(ROOT.as_uri(), "<ROOT>")
    assert_snapshot(f"format_{name}_{fmt}", text.splitlines())


@pytest.mark.parametrize("name", ["gpt", "gct"])
def test_json_validates_against_its_schema(name: str) -> None:
    data = json.loads(render(_report(name), "json", root=str(ROOT)))
    jsonschema.validate(data, LINT_SCHEMA)
    assert data["summary"]["violations"] == len(data["violations"])


@pytest.mark.parametrize("name", ["gpt", "gct"])
def test_sarif_validates_and_is_code_scanning_ready(name: str) -> None:
    data = json.loads(render(_report(name), "sarif", root=str(ROOT)))
    jsonschema.validate(data, SARIF_SCHEMA)
    run = data["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert {r["id"] for r in rules} >= {"UC101", "UC201", "UC301", "UC901"}
    for r in rules:
        assert r["name"] and r["shortDescription"]["text"] and r["fullDescription"]["text"] and r["help"]["text"]
    for res in run["results"]:
        loc = res["locations"][0]["physicalLocation"]
        assert loc["artifactLocation"]["uri"] == "models/gpt.py"  # relative to the repository root
        assert loc["region"]["startLine"] > 0
        assert res["partialFingerprints"]["unitcheck/v1"]


def test_sarif_fingerprints_are_stable_and_unique() -> None:
    a = json.loads(render(_report("gpt"), "sarif", root=str(ROOT)))["runs"][0]["results"]
    b = json.loads(render(_report("gpt"), "sarif", root=str(ROOT)))["runs"][0]["results"]
    fa = [r["partialFingerprints"]["unitcheck/v1"] for r in a]
    assert fa == [r["partialFingerprints"]["unitcheck/v1"] for r in b]
    assert len(set(fa)) == len(fa)


def test_junit_has_one_case_per_module() -> None:
    root = ET.fromstring(render(_report("gpt"), "junit"))
    cases = root.findall(".//testcase")
    names = [c.get("name") for c in cases]
    assert len(names) == len(set(names)) and "transformer.h.0.attn" in names
    failed = {c.get("name") for c in cases if c.find("failure") is not None}
    assert failed == {"<root>", "transformer.h.0", "transformer.h.0.attn", "transformer.h.0.mlp",
                      "transformer.h.1", "transformer.h.1.attn", "transformer.h.1.mlp"}
    assert ET.fromstring(render(_report("gct"), "junit")).get("failures") == "0"


def test_github_annotations() -> None:
    report = _report("gpt")
    lines = render(report, "github", root=str(ROOT), group=False).splitlines()
    errors = [ln for ln in lines if ln.startswith("::error ")]
    assert len(errors) == len(report.violations) == 10
    assert errors[0].startswith("::error file=models/gpt.py,line=")
    grouped = [ln for ln in render(report, "github", root=str(ROOT)).splitlines() if ln.startswith("::error ")]
    assert len(grouped) == 6  # UC201, UC202 and the two residual adds once for both layers


def test_rule_docs_do_not_drift() -> None:
    for name, text in docgen.expected_files().items():
        path = ROOT / "docs" / "rules" / name
        assert path.exists() and path.read_text() == text, f"{path} drifted: run python -m unitcheck.docgen"
