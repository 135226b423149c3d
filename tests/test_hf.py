"""Hugging Face architectures built from their config classes with random weights."""

from __future__ import annotations

import pytest

from unitcheck import oracle
from unitcheck.infer import infer_units

from .conftest import needs_hf

ARCHS = ["gpt2", "llama", "mistral", "bert", "t5"]


@needs_hf
@pytest.mark.parametrize("arch", ARCHS)
def test_inference_coverage_and_oracle(arch: str) -> None:
    from unitcheck.hf import build

    model, inputs = build(arch)
    ug = infer_units(model, inputs)
    assert ug.coverage >= 0.98, f"uncovered: {dict(ug.unknown_ops)}"
    assert sum(ug.unknown_ops.values()) == round((1 - ug.coverage) * ug.compute_nodes)
    assert ug.violations, "random-weight HF transformers are not unit-consistent"
    res = oracle.verify(model, inputs)
    assert res.disagreements == [], [str(d) for d in res.disagreements[:5]]
    assert res.checked == res.agreed and res.violations == res.confirmed
    assert res.checked + res.violations + len(res.unchecked) == res.float_nodes
    assert not res.unchecked or ug.coverage < 1.0
    assert res.global_checked == res.global_agreed and res.global_checked > 0


@needs_hf
def test_gpt2_reports_attention_and_logits() -> None:
    from unitcheck.hf import build

    model, inputs = build("gpt2")
    rules = [v.rule for v in infer_units(model, inputs).violations]
    assert rules.count("UC201") == 2 and rules.count("UC102") == 4 and rules[-1] == "UC301"


@needs_hf
def test_bad_model_type_and_field_are_clear_errors() -> None:
    from unitcheck.hf import HFError, build

    with pytest.raises(HFError, match="unknown Hugging Face model type"):
        build("not_a_model")
    with pytest.raises(HFError, match="no field 'nope'"):
        build("gpt2", {"nope": 1})
