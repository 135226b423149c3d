"""The command line: exit codes, one-line errors, formats, configuration, baselines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from unitcheck.cli import main

from .conftest import needs_hf

HERE = Path(__file__).parent
MODELS = str(HERE / "cli_models.py")


def run(capsys, *argv: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_exit_codes_clean_and_violations(capsys) -> None:  # type: ignore[no-untyped-def]
    assert run(capsys, "lint", "gct")[0] == 0
    code, out, _ = run(capsys, "lint", "gpt")
    assert code == 1 and "UC201" in out and "fix:" in out
    assert run(capsys, "lint", "gpt", "--fail-on", "never")[0] == 0
    assert run(capsys, "lint", "gpt", "--ignore", "UC1,UC2,UC3")[0] == 0


BAD_INPUTS = [
    (["lint", "no_such_model"], "unknown model"),
    (["lint", "missing/file.py:build"], "factory file not found"),
    (["lint", f"{MODELS}:raises"], "factory exploded on purpose"),
    (["lint", "gpt", "--set", "no_such_field=3"], "no config field 'no_such_field'"),
    (["lint", f"{MODELS}:module_only", "--input", "float32[2,16"], "malformed --input"),
    (["lint", f"{MODELS}:module_only"], "pass --input"),
    (["rule", "UC999"], "unknown rule code"),
    (["lint", "gpt", "--select", "UC777"], "unknown rule code"),
    (["lint", "gpt", "--set", "n_embd=30"], "n_embd (30) must be a multiple of n_head (4)"),
    (["lint", "gct", "--set", "pos=alibi"], "pos must be one of learned, rope"),
    (["train", "--steps", "-3"], "--steps must be at least 1"),
    (["train", "--beta2", "1"], "--beta2 must lie in [0, 1)"),
    (["train", "--n-embd", "30", "--steps", "1"], "must be a multiple of n_head"),
    (["train", "--steps", "1", "--out-dir", "/dev/null/run"], "Not a directory"),
    (["rewrite", "gpt", "--out", "/dev/null"], "exists and is not a directory"),
]


def test_a_branch_on_an_activation_is_linted_on_the_example_branch_with_a_note(capsys) -> None:  # type: ignore[no-untyped-def]
    """Lint records one real run where export cannot follow the branch (rewrite still refuses)."""
    code, out, _ = run(capsys, "lint", f"{MODELS}:untraceable", "-v")
    assert code == 0
    assert "UC903" in out and "recorded" in out and "cli_models.py:31" in out


@pytest.mark.parametrize(("argv", "needle"), BAD_INPUTS)
def test_bad_input_exits_2_with_one_line(capsys, argv, needle) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert needle in err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(("name", "content", "flag", "needle"), [
    ("pyproject.toml", "[tool.unitcheck\nselect = 3\n", "--config", "malformed TOML"),
    ("pyproject.toml", '[tool.unitcheck]\nfail-on = "sometimes"\n', "--config", "fail-on"),
    ("baseline.json", "{not json", "--baseline", "not valid JSON"),
    ("baseline.json", '{"something": "else"}', "--baseline", "not a unitcheck baseline"),
])
def test_malformed_config_and_baseline_exit_2(capsys, tmp_path, name, content, flag, needle) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / name
    path.write_text(content)
    code, _, err = run(capsys, "lint", "gct", flag, str(path))
    assert code == 2 and needle in err and err.count("\n") == 1


def test_config_select_ignore_and_declarations(capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = tmp_path / "pyproject.toml"
    cfg.write_text('[tool.unitcheck]\nselect = ["UC2"]\nignore = ["UC202"]\n')
    code, out, _ = run(capsys, "lint", "gpt", "--config", str(cfg), "--format", "json")
    rules = {v["rule"] for v in json.loads(out)["violations"]}
    assert code == 1 and rules == {"UC201"}
    cfg.write_text('[tool.unitcheck]\n[tool.unitcheck.per-module-ignores]\n"transformer.h.*" = ["UC2"]\n')
    out = run(capsys, "lint", "gpt", "--config", str(cfg), "--format", "json")[1]
    assert not {v["rule"] for v in json.loads(out)["violations"]} & {"UC201", "UC202"}


def test_inline_suppression_is_reported(capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run(capsys, "lint", f"{MODELS}:suppressed", "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["violations"] == []
    assert [v["rule"] for v in data["suppressed"]] == ["UC202"] and data["suppressed"][0]["suppressed"]


def test_baseline_ratchet(capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    base = tmp_path / "unitcheck-baseline.json"
    assert run(capsys, "lint", "gpt", "--write-baseline", str(base))[0] == 1
    assert run(capsys, "lint", "gpt", "--baseline", str(base))[0] == 0
    code, out, _ = run(capsys, "lint", f"{MODELS}:gpt_plus_one", "--baseline", str(base), "--format", "json")
    new = json.loads(out)["violations"]
    assert code == 1 and [v["rule"] for v in new] == ["UC103"]
    code, out, _ = run(capsys, "lint", "gct", "--baseline", str(base), "--format", "json")
    assert code == 0 and len(json.loads(out)["fixed"]) == 10


def test_output_file_is_written_atomically(capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    target = tmp_path / "report.sarif"
    target.write_text("previous")
    run(capsys, "lint", "gpt", "--format", "sarif", "--output", str(target))
    assert json.loads(target.read_text())["version"] == "2.1.0"
    assert [p.name for p in tmp_path.iterdir()] == ["report.sarif"]


def test_units_dot_and_verify(capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run(capsys, "units", "gpt", "--format", "dot")
    assert code == 0 and out.startswith('digraph "gpt"') and "color=red" in out
    assert out.count("color=red") == 10
    code, out, _ = run(capsys, "units", "gct", "--verify")
    assert code == 0 and "fingerprint: 10/10" in out


def test_rules_and_rule_docs(capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run(capsys, "rules")
    assert code == 0 and out.count("\n") >= 15 and "UC201" in out
    code, out, _ = run(capsys, "rule", "uc201")
    assert code == 0 and "## What it does" in out and "calibrated temperature" in out


@needs_hf
def test_hf_models_end_to_end(capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run(capsys, "lint", "hf:gpt2", "--set", "n_layer=2", "--format", "json")
    data = json.loads(out)
    assert code == 1 and data["summary"]["coverage"] == 1.0 and data["summary"]["by_rule"]["UC201"] == 2
    code, out, _ = run(capsys, "lint", "hf:llama", "--format", "json")
    assert code == 1 and json.loads(out)["summary"]["by_rule"]["UC301"] == 1
    code, _, err = run(capsys, "units", "hf:llama", "--verify", "--device", "meta")
    assert code == 2 and "real values" in err


def _fresh_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})


@pytest.mark.parametrize("argv", [["--help"], ["rules"], ["rule", "UC201"]])
def test_startup_does_not_import_torch(argv: list[str]) -> None:
    probe = (
        "import sys, time; t = time.process_time()\n"
        "from unitcheck.cli import main\n"
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    try: main({argv!r})\n"
        "    except SystemExit: pass\n"
        "print(time.process_time() - t, 'torch' in sys.modules)\n"
    )  # CPU time: other jobs on a shared machine stretch the wall clock, not the work done
    res = _fresh_python(probe)
    elapsed, imported = res.stdout.split()
    assert imported == "False"
    assert float(elapsed) < 0.5


def test_console_script_runs() -> None:
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "unitcheck", "rule", "UC101"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "mismatched-combine" in res.stdout
    assert time.perf_counter() - t0 < 30


def test_non_positive_sizes_are_rejected_by_the_parser(capsys) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as exc:
        main(["diagnose", "gpt", "--batch", "0"])
    assert exc.value.code == 2
    assert "--batch: must be at least 1, got 0" in capsys.readouterr().err


def test_a_factory_that_returns_a_compiled_model(capsys: pytest.CaptureFixture[str]) -> None:
    """Training code holds ``torch.compile(model)``: the report names the plain module's paths."""
    assert main(["lint", f"{MODELS}:compiled", "--format", "json"]) == 1
    found = json.loads(capsys.readouterr().out)["violations"]
    assert found and {v["module"] for v in found} >= {"transformer.h.0.attn"}
    assert not [v for v in found if v["module"].startswith("_orig_mod")]
