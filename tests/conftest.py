"""Shared fixtures. Snapshot tests compare against tests/snapshots/*.json; regenerate with
``UNITCHECK_UPDATE_SNAPSHOTS=1 make test`` after an intended change and review the diff."""

from __future__ import annotations

import importlib.util
import json
import os
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

SNAPSHOTS = Path(__file__).parent / "snapshots"
HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None

warnings.filterwarnings("ignore")
# one thread per xdist worker: `make test` runs one worker per core
torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER") else max(1, min(2, os.cpu_count() or 1)))


def assert_snapshot(name: str, data: Any) -> None:
    path = SNAPSHOTS / f"{name}.json"
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    if os.environ.get("UNITCHECK_UPDATE_SNAPSHOTS") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"missing snapshot {path}; run with UNITCHECK_UPDATE_SNAPSHOTS=1 to create it"
    expected = json.loads(path.read_text())
    assert json.loads(text) == expected, f"snapshot {name} differs (UNITCHECK_UPDATE_SNAPSHOTS=1 to update)"


def violation_summary(violations: list[Any]) -> list[dict[str, Any]]:
    return [
        {"rule": v.rule, "node": v.node, "module": v.module, "message": v.message,
         "units": {k: str(u) for k, u in v.units.items()}}
        for v in violations
    ]


needs_hf = pytest.mark.skipif(not HAS_TRANSFORMERS, reason="transformers is not installed")


@pytest.fixture(autouse=True)
def _one_seed() -> None:
    """Every test starts from the same seed: tests that draw their inputs unseeded (``torch.randn``
    in a model's example) draw the same values whatever ran before them in their worker, so a
    failure on one run is a failure on every run."""
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def rewrite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A rewrite directory of a one-layer GPT, written once per session (copy it to damage it)."""
    from unitcheck.cli import main

    out = tmp_path_factory.mktemp("templates") / "rewrite"
    assert main(["rewrite", "gpt", "--set", "n_layer=1", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def run_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished two-step training run (copy it to resume or damage it)."""
    from unitcheck.cli import main

    from .user_files import TINY_TRAIN

    out = tmp_path_factory.mktemp("templates") / "run"
    assert main(["train", *TINY_TRAIN, "--steps", "2", "--out-dir", str(out)]) == 0
    return out
