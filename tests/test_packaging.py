"""The distribution ships every subpackage (an editable install hides a missing one)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]


def _declared() -> set[str]:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return set(cfg["packages"]), cfg["package-dir"]  # type: ignore[return-value]


def _on_disk() -> set[str]:
    found = {"unitcheck"}
    for pkg_root, dotted in ((ROOT / "unitcheck", "unitcheck"), (ROOT / "rules", "unitcheck.rules"),
                             (ROOT / "models", "unitcheck.models")):
        for init in pkg_root.rglob("__init__.py"):
            rel = init.parent.relative_to(pkg_root).parts
            found.add(".".join((dotted, *rel)))
    return found


def test_every_subpackage_is_declared() -> None:
    packages, mapping = _declared()
    assert _on_disk() == packages
    assert mapping == {"unitcheck.rules": "rules", "unitcheck.models": "models"}


@pytest.mark.slow
def test_non_editable_install_lints_with_source_lines_and_trains(tmp_path: Path) -> None:
    src, target = tmp_path / "src", tmp_path / "site"
    # a clean copy: a stale build/ directory would hide a package missing from the list
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "runs", "docs", "*.egg-info", "__pycache__", ".mypy_cache", ".ruff_cache"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-q",
                    "--target", str(target), str(src)], check=True, timeout=600)
    env = {**os.environ, "PYTHONPATH": str(target)}
    # every package must come from the installed copy (the dev checkout's editable finder would
    # otherwise supply whatever the wheel left out)
    check = ("import importlib, sys; bad = [m for m in sys.argv[2:] if not "
             "importlib.import_module(m).__file__.startswith(sys.argv[1])]; print(bad); sys.exit(bool(bad))")
    run = subprocess.run([sys.executable, "-c", check, str(target), *sorted(_on_disk())],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    run = subprocess.run([sys.executable, "-m", "unitcheck", "lint", "gpt", "--format", "json"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert run.returncode == 1, run.stderr
    assert str(target) in run.stdout and '"line":' in run.stdout  # the bundled model's lines
    run = subprocess.run([sys.executable, "-m", "unitcheck", "train", "--steps", "2", "--n-layer", "1",
                          "--out-dir", str(tmp_path / "run"), "--eval-interval", "1", "--eval-batches", "1"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stderr
