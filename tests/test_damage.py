"""What once damaged a user's files or passed a CI job that should fail (issue 13), outside
training: baselines, exiting factories, temporary-file names in errors, library warnings."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from unitcheck.cli import main

from .conftest import needs_hf
from .user_files import FACTORIES


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def entries(path: Path) -> int:
    return len(json.loads(path.read_text())["violations"])


def test_write_baseline_records_what_was_found_not_what_the_baseline_let_through(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, again = tmp_path / "base.json", tmp_path / "again.json"
    assert run(capsys, "lint", "gpt", "--write-baseline", str(base))[0] == 1
    found = entries(base)
    assert found == 10
    code, _, _ = run(capsys, "lint", "gpt", "--baseline", str(base), "--write-baseline", str(again))
    assert code == 0 and entries(again) == found  # not 0: every violation is still there


def test_write_baseline_refuses_the_file_it_reads_unless_updating(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = tmp_path / "base.json"
    run(capsys, "lint", "gpt", "--write-baseline", str(base))
    before = base.read_bytes()
    code, _, err = run(capsys, "lint", "gpt", "--baseline", str(base), "--write-baseline", str(base))
    assert code == 2 and "--update-baseline" in err and base.read_bytes() == before
    code, _, _ = run(capsys, "lint", "gpt", "--baseline", str(base), "--update-baseline")
    assert code == 0 and entries(base) == 10
    assert run(capsys, "lint", "gpt", "--baseline", str(base))[0] == 0  # the ratchet still holds


def test_factory_that_exits_fails_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "facts.py").write_text(FACTORIES)
    for name, status in (("exits", 0), ("raises_exit", 1)):
        code, out, err = run(capsys, "lint", f"{tmp_path / 'facts.py'}:{name}")
        assert code == 2 and out == "" and f"sys.exit({status})" in err


def test_lint_of_a_parameterless_module_with_meta_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "facts.py").write_text(FACTORIES)
    code, out, err = run(capsys, "lint", f"{tmp_path / 'facts.py'}:no_params", "--format", "json")
    assert code == 0 and json.loads(out)["violations"] == [] and err == ""


def test_huge_input_lints_on_meta_without_allocating(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNITCHECK_MEMORY_BUDGET", "1M")  # an input of 1.6 TB must not be drawn
    (tmp_path / "facts.py").write_text(FACTORIES)
    code, out, _ = run(capsys, "lint", f"{tmp_path / 'facts.py'}:module_only", "--input",
                       "float32[100000000000,4]", "--format", "json")
    assert code == 1 and [v["rule"] for v in json.loads(out)["violations"]] == ["UC202"]


def test_write_errors_name_the_users_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "report.txt"
    target.mkdir()
    code, _, err = run(capsys, "lint", "gct", "--output", str(target))
    assert code == 2 and f"{target}: Is a directory" in err and ".tmp" not in err
    assert [p.name for p in tmp_path.iterdir()] == ["report.txt"]


def test_out_of_memory_is_a_user_error() -> None:
    from unitcheck.cli import _exit_code, _message

    err = RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: "
                       "you tried to allocate 512000000000 bytes")
    assert _exit_code(err) == 2 and "reduce" in _message(err)
    assert _exit_code(MemoryError()) == 2
    assert _exit_code(RuntimeError("shape mismatch")) == 3


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_library_warnings_only_with_verbose() -> None:
    from unitcheck.cli import _library_warnings

    logger = logging.getLogger("transformers.modeling_utils")
    records = _Records()
    logger.addHandler(records)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with _library_warnings(False):
            warnings.warn("from a library", UserWarning, stacklevel=1)
            logger.warning("logged by a library")
        with _library_warnings(True):
            warnings.warn("shown with --verbose", UserWarning, stacklevel=1)
            logger.warning("logged with --verbose")
    logger.removeHandler(records)
    assert [str(w.message) for w in seen] == ["shown with --verbose"]
    assert records.messages == ["logged with --verbose"]


@pytest.mark.parametrize(("argv", "code", "shown"), [
    (["diagnose", "gpt", "--set", "n_layer=1", "--batch", "2", "--seq", "16", "--no-plots", "--no-fingerprint"], 0, "UVI_res"),
    pytest.param(["lint", "hf:gpt2"], 1, "UC201", marks=needs_hf),
])
def test_a_plain_run_prints_no_library_warning(tmp_path: Path, argv: list[str], code: int, shown: str) -> None:
    """diagnose printed PyTorch's 3-line warning on every run, lint hf:gpt2 a transformers notice."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "TRANSFORMERS_VERBOSITY")}
    res = subprocess.run([sys.executable, "-m", "unitcheck", *argv], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path, env=env)
    assert res.returncode == code and shown in res.stdout
    assert res.stderr == ""
