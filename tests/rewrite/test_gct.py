"""The GCT rewrite: zero violations and oracle agreement on the results, equivalence with the
hand-written gct, generated code that reloads and trains, and clear failures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from unitcheck.models import build

from unitcheck import oracle
from unitcheck.cli import main
from unitcheck.infer import infer_units
from unitcheck.rewrite.api import RewriteError, rewrite, write_rewrite
from unitcheck.rewrite.save import load_rewritten

from ..conftest import needs_hf

HERE = Path(__file__).resolve().parents[1]


def _check_clean(model, inputs):  # type: ignore[no-untyped-def]
    res = rewrite(model, inputs)
    assert res.gct.complete and not res.gct.unhandled
    ug = infer_units(res.module, inputs)
    assert ug.violations == [] and ug.coverage == 1.0
    verdict = oracle.verify(res.module, inputs)
    assert verdict.disagreements == [] and verdict.checked == verdict.agreed > 0
    assert verdict.global_checked == verdict.global_agreed > 0
    return res


@pytest.mark.parametrize("name", ["gpt", "llama", "qknorm"])
def test_bundled_rewrites_are_clean_and_verified(name: str) -> None:
    model, inputs = build(name)
    assert infer_units(model, inputs).violations  # the original is not
    _check_clean(model, inputs)


@pytest.mark.parametrize("name", ["gpt", "llama"])
def test_a_bfloat16_model_gets_bfloat16_parameters(name: str) -> None:
    """The rewrite's new gains and step sizes were float32 in a bfloat16 model: the per-head
    query gain promoted the queries, and attention refused keys of another dtype, so the
    rewritten model did not run (nor lint)."""
    model, inputs = build(name)
    model = model.to(torch.bfloat16)
    res = rewrite(model, inputs)
    assert res.gct.new_params and all(p.value.dtype == torch.bfloat16 for p in res.gct.new_params.values())
    assert {p.dtype for p in res.module.parameters()} == {torch.bfloat16}
    assert res.complete and res.violations_left == []


@needs_hf
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_hf_rewrites_are_clean_and_verified(arch: str) -> None:
    from unitcheck.hf import build as hf_build

    _check_clean(*hf_build(arch))


@needs_hf
@pytest.mark.slow
@pytest.mark.parametrize("arch", ["phi", "gptj"])
def test_more_hf_rewrites_are_clean_and_verified(arch: str) -> None:
    from unitcheck.hf import build as hf_build

    _check_clean(*hf_build(arch))


@needs_hf
def test_parallel_branches_get_one_step_each() -> None:
    """h + (attn(ln h) + mlp(ln h)): two orthogonalised terms, each named for what it computes."""
    from unitcheck.hf import build as hf_build

    res = _check_clean(*hf_build("falcon"))
    assert sorted(k.rsplit(".", 1)[-1] for k in res.gct.new_params if ".h.0.alpha" in k) == ["alpha_attn", "alpha_mlp"]
    parallel = [line for line in res.gct.log if line.startswith("[residual_stream] add(stream, ") and " + " in line]
    assert len(parallel) == 2


def test_rewrite_of_gpt_is_the_hand_written_gct() -> None:
    model, inputs = build("gpt", n_layer=3)
    res = rewrite(model.double(), inputs)
    reference, _ = build("gct", n_layer=3)
    reference = reference.double()
    missing, unexpected = reference.load_state_dict(res.module.state_dict(), strict=False)
    assert missing == [] and unexpected == []
    x = torch.randint(0, 65, (3, 24), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        a, b = res.module(x, x), reference(x, x)
    assert float((a[0] - b[0]).abs().max()) < 1e-5 and abs(float(a[1] - b[1])) < 1e-5


def test_the_log_names_every_replacement() -> None:
    model, inputs = build("gpt")
    log = rewrite(model, inputs).gct.log
    rules = [line.split("]")[0].strip("[") for line in log]
    assert rules.count("residual_stream") == 5 and rules.count("attention") == 2
    assert rules.count("activations") == 2 and rules.count("logits") == 1
    assert rules.count("branch_normalisers") == 5


def test_written_directory_reloads_runs_at_new_shapes_and_lints(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    model, inputs = build("llama")
    res = rewrite(model, inputs)
    files = write_rewrite(res, str(tmp_path), "llama", inputs)
    assert set(files) == {"model.py", "model.safetensors", "example_inputs.pt", "unitcheck.json"}
    loaded, example = load_rewritten(str(tmp_path))
    x = torch.randint(0, 65, (5, 40))
    with torch.no_grad():
        assert torch.equal(loaded(x, x)[0], res.module(x, x)[0])
    assert "class Rewritten(nn.Module)" in (tmp_path / "model.py").read_text()
    assert main(["lint", str(tmp_path)]) == 0


def test_nvfp4_composes_with_the_rewrite() -> None:
    model, inputs = build("gpt")
    res = rewrite(model, inputs, nvfp4="ngpt")
    names = [r["name"] for r in res.nvfp4.replaced]
    assert len(names) == 9 and names[-1] == "lm_head"  # 8 block GEMMs and the canonical head
    assert {k["reason"].split(",")[0] for k in res.nvfp4.kept} == {
        "embedding lookup", "scaled_dot_product_attention of activations (attention's batched GEMMs stay in high precision"}
    ug = infer_units(res.module, inputs)
    assert ug.violations == []
    assert sum("nvfp4_linear" in str(n.target) for n in ug.graph.nodes) == 9


def test_plain_mlp_is_a_clear_report_and_exit_1(capsys) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(RewriteError, match="no residual stream"):
        rewrite(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()), torch.randn(2, 8))
    code = main(["rewrite", f"{HERE}/cli_models.py:module_only", "--input", "float32[4,16]", "--out", "/tmp/unused"])
    err = capsys.readouterr().err
    assert code == 1 and "no residual stream" in err and "Traceback" not in err


def test_untraceable_model_exits_2(capsys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code = main(["rewrite", f"{HERE}/cli_models.py:untraceable", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and "data-dependent branch" in err and err.count("\n") == 1
    assert not (tmp_path / "x").exists()


def test_nvfp4_rewrite_directory_loads_in_a_fresh_process(tmp_path: Path) -> None:
    model, inputs = build("gpt")
    write_rewrite(rewrite(model, inputs, nvfp4="te"), str(tmp_path / "rw"), "gpt", inputs)
    script = ("import sys, torch; from unitcheck.rewrite.save import load_rewritten; "
              "m, (x, y) = load_rewritten(sys.argv[1]); print(float(m(x, y)[1]))")
    run = subprocess.run([sys.executable, "-c", script, str(tmp_path / "rw")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert 0 < float(run.stdout.strip().splitlines()[-1]) < 10


def test_rewrite_directory_trains(tmp_path: Path) -> None:
    from unitcheck.train import TrainConfig, train

    model, inputs = build("gpt", vocab_size=82, block_size=32, n_layer=2, n_embd=32, n_head=2)
    write_rewrite(rewrite(model, inputs, nvfp4="ngpt"), str(tmp_path / "rw"), "gpt", inputs)
    res = train(TrainConfig(model=str(tmp_path / "rw"), seq_len=32, batch_size=8, steps=30, lr=3e-3,
                            warmup=3, eval_interval=30, eval_batches=2, out_dir=str(tmp_path / "run")))
    assert res.final_val_loss < res.history[0]["train_loss"] - 0.5


@needs_hf
@pytest.mark.slow
def test_mamba_steps_are_named_for_its_mixer() -> None:
    """Mamba has no MLP: the block's step and the step of the skip term inside the mixer
    (``y + x D``, the only residual add of that module) are both ``alpha_mixer``."""
    from unitcheck.hf import build as hf_build

    model, inputs = hf_build("mamba")
    res = rewrite(model, inputs)
    assert res.complete
    assert sorted(k for k in res.gct.new_params if "layers.0." in k) == [
        "backbone.layers.0.alpha_mixer", "backbone.layers.0.mixer.alpha_mixer"]
