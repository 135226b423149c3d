"""The null rewrite (``--to identity``): the generated module equals the original bit for bit,
forward and gradients, in eval mode and in training mode under one seed. This is the code
generator's test, run over the bundled models and a set of transformers architectures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn
from unitcheck.models import build, names

from unitcheck.cli import main
from unitcheck.rewrite.api import rewrite
from unitcheck.rewrite.equal import differences

from ..conftest import needs_hf

# one of each pattern the generator must not bake in: dropout (gpt2, bert, roberta), casts
# relative to the dtype (olmo2, modernbert); the slow set adds a custom op (mixtral), lowered
# graphs (falcon), encoder-decoders and vision
HF_FAST = ["gpt2", "bert", "olmo2"]
HF_SLOW = ["falcon", "llama", "modernbert", "mixtral", "phi", "roberta", "gpt_neox", "gptj", "qwen2", "mistral",
           "gemma", "t5", "bart", "distilbert", "electra", "vit", "whisper", "deberta-v2", "bloom"]


def _check(model, inputs) -> None:  # type: ignore[no-untyped-def]
    res = rewrite(model, inputs, to="identity")
    for training in (False, True):
        diffs = differences(model, res.module, inputs, training)
        assert diffs == [], diffs


@pytest.mark.parametrize("name", [n for n in names() if n != "ngpt"])
def test_bundled_models_regenerate_exactly(name: str) -> None:
    _check(*build(name, **({"dropout": 0.1} if name == "gpt" else {})))


@pytest.mark.parametrize("name", ["gct", "qknorm"])
def test_regenerated_models_keep_their_declarations(name: str) -> None:
    """The original's ``__units__`` (GCT's step sizes and gains, dimensionless by design) are
    the regenerated module's too: without them it lints dirty where the original is clean."""
    from unitcheck import lint

    model, inputs = build(name)
    res = rewrite(model, inputs, to="identity")
    before, after = lint(model, inputs), lint(res.module, inputs)
    assert [(v.rule, v.module) for v in after.violations] == [(v.rule, v.module) for v in before.violations]
    if name == "gct":  # the fused residual update is called again, not inlined as its three calls
        assert res.source.count("residual_update(") == 2 * model.config.n_layer, res.source


@pytest.mark.slow
def test_ngpt_regenerates_exactly() -> None:
    _check(*build("ngpt"))


class SliceFilled(nn.Module):
    """A new tensor filled by slice assignment (DeepSeek's rotary split, RecurrentGemma's state):
    the capture lowers it to ``aten.copy``, which eager autograd cannot differentiate."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 3)
        self.b = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x.new_zeros(x.shape[0], 6)
        out[:, :3] = self.a(x)
        out[:, 3:] = self.b(x)
        return (out * out).mean()


def test_slice_assignment_regenerates_exactly() -> None:
    torch.manual_seed(0)
    _check(SliceFilled(), torch.randn(2, 4))


@needs_hf
@pytest.mark.parametrize("arch", HF_FAST)
def test_hf_models_regenerate_exactly(arch: str) -> None:
    from unitcheck.hf import build as hf_build

    _check(*hf_build(arch))


@needs_hf
@pytest.mark.slow
@pytest.mark.parametrize("arch", HF_SLOW)
def test_more_hf_models_regenerate_exactly(arch: str) -> None:
    from unitcheck.hf import build as hf_build

    _check(*hf_build(arch))


def test_identity_command_checks_equality_and_records_lint(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "id"
    code = main(["rewrite", "gpt", "--set", "n_layer=1", "--set", "dropout=0.1", "--to", "identity", "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "complete: equal to the original bit for bit" in text
    manifest = json.loads((out / "unitcheck.json").read_text())
    lint = manifest["lint"]
    assert manifest["to"] == "identity" and manifest["complete"] is True
    assert lint["before"]["violations"] == lint["after"]["violations"] > 0
    assert lint["before"]["by_rule"] == lint["after"]["by_rule"]
