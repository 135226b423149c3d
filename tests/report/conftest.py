"""Reports shared by the report tests: each model is linted once per session (the 32-layer Llama
costs about 15 s on 2 cores)."""

from __future__ import annotations

from typing import Any

import pytest

from unitcheck.linter import Report, lint

from ..conftest import HAS_TRANSFORMERS


def lint_spec(spec: str, **sets: Any) -> Report:
    """What ``unitcheck lint SPEC --set k=v`` reports: built on the meta device, the CLI default."""
    from unitcheck.loader import load_model

    loaded = load_model(spec, sets, None, device="meta")
    return lint(loaded.model, loaded.inputs, name=loaded.name)


@pytest.fixture(scope="session")
def gpt_report() -> Report:
    return lint_spec("gpt")


@pytest.fixture(scope="session")
def gpt4_report() -> Report:
    return lint_spec("gpt", n_layer=4)


@pytest.fixture(scope="session")
def llama32_report() -> Report:
    if not HAS_TRANSFORMERS:
        pytest.skip("transformers is not installed")
    return lint_spec("hf:llama", num_hidden_layers=32)
