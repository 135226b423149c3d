"""The rewriter on the patterns real architectures use, and its contract: exit 0 only with zero
violations left, else exit 1 naming what was left (issue 15)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from unitcheck.cli import main
from unitcheck.infer import infer_units
from unitcheck.linter import lint
from unitcheck.rewrite.api import rewrite

from ..conftest import needs_hf
from .pattern_models import (
    autocast_lm,
    biased_head_lm,
    clamped_glu_lm,
    codebook_losses_lm,
    delta_rule_lm,
    differential_lm,
    einsum_attention_lm,
    entropy_head_lm,
    explicit_attention_lm,
    fp32_residual_lm,
    gated_residual_lm,
    gated_skip_lm,
    hyper_connection_lm,
    learned_positions_lm,
    linear_scan_lm,
    log_normalised_gate_lm,
    looped_experts_lm,
    matmul_head_lm,
    media_tokens_lm,
    mixed_gate_lm,
    mixer_lm,
    normed_embedding_lm,
    param_gate_lm,
    penalty_lm,
    prescaled_query_lm,
    query_position_lm,
    query_row_position_lm,
    rel_bias_lm,
    residual_twice_lm,
    scaled_residual_lm,
    scaled_tokens_plus_positions_lm,
    scattered_topk_lm,
    segment_sum_lm,
    seq2seq_lm,
    shared_expert_lm,
    sized_by_its_part_lm,
    skip_gain_lm,
    split_key_lm,
    stacked_heads_lm,
    stream_bias_lm,
    threshold_router_lm,
    topk_first_lm,
    window_pool_lm,
    wrapper_lm,
)

HERE = Path(__file__).resolve().parent
MODELS = HERE / "pattern_models.py"


def _fixed_by_mixed_parts(model, inputs, finding: tuple[str, str, str], log_prefix: str) -> None:  # type: ignore[no-untyped-def]
    """The model lints with ``finding``; its rewrite is complete, lints clean, logs the
    mixed_parts rule and computes a finite loss."""
    assert finding in {(v.rule, v.module, v.op) for v in lint(model, inputs).violations}
    res = rewrite(model, inputs)
    assert res.complete and not res.gct.unhandled
    assert infer_units(res.module, inputs).violations == []
    assert any(line.startswith(log_prefix) for line in res.gct.log)
    assert torch.isfinite(res.module(*inputs)[1])


def test_residual_adds_in_a_wrapper_module() -> None:
    """x-transformers style: ``residual(block(norm(x)), x)`` with the add in a module beside the
    block. Lint calls the adds residual mismatches; the rewrite puts them on the stream."""
    model, inputs = wrapper_lm()
    assert {(v.rule, v.module) for v in lint(model, inputs).violations} >= {("UC102", "layers.0.2")}
    res = rewrite(model, inputs)
    assert res.complete and res.gct.residuals_rewritten == res.gct.residuals == 2
    assert {"layers.0.2.alpha_attn", "layers.1.2.alpha_mlp"} <= set(res.gct.new_params)
    assert infer_units(res.module, inputs).violations == []


@pytest.mark.parametrize(("mixer", "kind"), [("self_attn", "attn"), ("mixer", "mixer")])
def test_residual_steps_are_named_for_a_mixer_without_a_softmax(mixer: str, kind: str) -> None:
    """Linear attention (no softmax in the graph) and a scan mixer: the step of each is named for
    the module it runs in, and the MLP's stays ``alpha_mlp`` although its normaliser is called
    ``post_attention_layernorm``."""
    model, inputs = mixer_lm(mixer)
    res = rewrite(model, inputs)
    assert res.complete
    assert sorted(k for k in res.gct.new_params if ".alpha" in k) == sorted(["layers.0.alpha_mlp",
                                                                             f"layers.0.alpha_{kind}"])


@pytest.mark.parametrize("scatter", [False, True], ids=["cat", "slice_scatter"])
def test_keys_joined_from_parts_with_different_units(scatter: bool) -> None:
    """DeepSeek-style keys: a latent part and a positional part from two projections, joined by
    ``cat`` or written slice by slice into an empty tensor (UC101). Each part is canonicalised
    before the join; the rewrite lints clean and still computes a finite loss."""
    model, inputs = split_key_lm(scatter)
    join = "aten.slice_scatter.default" if scatter else "aten.cat.default"
    _fixed_by_mixed_parts(model, inputs, ("UC101", "attn", join), "[mixed_parts]")


def test_states_of_a_scan_written_into_a_zero_filled_output() -> None:
    """RecurrentGemma's RG-LRU: each step's state written into ``zeros_like(x)`` (UC101 where a
    state meets the zeros; lowered, a chain of writes onto ``full_like``); each state is
    canonicalised as it is written (the chain was left as "not a fresh tensor")."""
    model, inputs = linear_scan_lm()
    _fixed_by_mixed_parts(model, inputs, ("UC101", "layers.0.mixer", "aten.where.self"),
                          "[mixed_parts] slice_scatter@layers.0.mixer")


def test_an_activation_of_a_value_masked_to_minus_infinity_is_canonical_under_the_mask() -> None:
    """Mamba2's ``exp(segsum)``: C over a value already filled with -inf is NaN everywhere, so the
    rewrite canonicalises the cumulative sum and masks after (its GCT rewrite computed NaN)."""
    model, inputs = segment_sum_lm()
    assert ("UC204", "layers.0.mixer", "aten.exp.default") in {(v.rule, v.module, v.op) for v in lint(model, inputs).violations}
    res = rewrite(model, inputs)
    assert res.complete and infer_units(res.module, inputs).violations == []
    assert "[activations] exp(cumsum@layers.0.mixer) -> exp(C(a))" in res.gct.log
    assert torch.isfinite(res.module(*inputs)[1])


def test_an_in_place_substitution_whose_rows_agree_once_the_decay_is_dimensionless() -> None:
    """A chunked delta rule's forward substitution (Kimi-Linear, Bailing-hybrid) writes rows of
    different units into a value that is not a fresh tensor, only because its decay's argument
    has a unit. The activations rule makes that argument dimensionless, after which the rows
    agree: the rewrite lints clean and is complete (it was refused, "slices with different units
    written into a value that is not a fresh tensor", though nothing was left). The decay's
    projection is one wide (a decay per token): C of its one value would be its sign, so it is made
    dimensionless as a router's projection."""
    model, inputs = delta_rule_lm()
    assert ("UC101", "layers.0.mixer", "aten.slice_scatter.default") in {
        (v.rule, v.module, v.op) for v in lint(model, inputs).violations}
    res = rewrite(model, inputs)
    assert res.complete and not res.gct.unhandled, res.gct.unhandled
    assert any(line.startswith("[router_logits] linear@layers.0.mixer.a_proj") for line in res.gct.log), res.gct.log
    assert infer_units(res.module, inputs).violations == []
    assert torch.isfinite(res.module(*inputs)[1])


def test_a_gate_over_inputs_combined_inline() -> None:
    """HY-V4's head: ``sigmoid(linear(x) * rms(x) * s + b)``, two input-dependent values combined
    inline (UC202; was left as "no single pre-activation input"). The product is the
    pre-activation: ``sigmoid(C(linear(x) * rms(x)) * s + b)``, with ``s`` and ``b`` declared."""
    model, inputs = mixed_gate_lm()
    assert ("UC202", "gate", "aten.sigmoid.default") in {(v.rule, v.module, v.op) for v in lint(model, inputs).violations}
    res = rewrite(model, inputs)
    assert res.complete and not res.gct.unhandled
    assert {"gate.base", "gate.scale"} <= set(res.gct.declared)
    assert any(line.startswith("[activations] sigmoid(mul@gate)") for line in res.gct.log)
    assert infer_units(res.module, inputs).violations == []


def test_sizes_added_under_symbolic_shapes_are_not_a_residual() -> None:
    """DeepSeek-V4 adds ``T`` and a submodule's ``T // 4``: in the rewrite's capture (symbolic
    sizes) that add of two sizes was taken for a residual add, its "stream" the sequence length
    canonicalised, and the generated code called ``canonical`` on an int."""
    from unitcheck.graphs import residual_adds
    from unitcheck.tracer import trace

    model, inputs = sized_by_its_part_lm()
    adds = residual_adds(trace(model, inputs, dynamic=True).graph)
    assert len(adds) == 2 and all(isinstance(a.meta["val"], torch.Tensor) for a, _, _ in adds)
    res = rewrite(model, inputs)
    assert res.complete and res.gct.residuals_rewritten == res.gct.residuals == 2


def test_routed_and_shared_experts_summed() -> None:
    """Qwen2-MoE: routed experts plus a gated shared expert, summed on flattened tokens (UC101
    on the add inside the MLP). Each summand is canonicalised; router, gate and experts are
    handled by their own rules, and the result lints clean."""
    model, inputs = shared_expert_lm()
    _fixed_by_mixed_parts(model, inputs, ("UC101", "mlp", "aten.add.Tensor"), "[mixed_parts] add@mlp")


def test_stream_keeps_the_dtype_of_a_float32_normaliser_cast_back() -> None:
    """NanoChat normalises the embedding in float32 and casts it back (``.type_as(x)``); the
    canonical stream must be the value cast back, or the rewritten model computes its stream in
    float32 under float64 weights (`units DIR --verify` exits 2 on a dtype mismatch)."""
    import copy

    model, inputs = normed_embedding_lm()
    res = rewrite(model, inputs)
    assert res.complete and infer_units(res.module, inputs).violations == []
    wide = copy.deepcopy(res.module).double()
    with torch.no_grad():
        logits, loss = wide(*inputs)
    assert logits.dtype == torch.float64 and torch.isfinite(loss)


def test_activation_with_parameter_terms(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Dory/AXK2's output gate ``sigmoid(g.view(B, T, C) * s^2)`` and a Mamba step size
    ``softplus(dt + dt_bias)`` (UC202): the input-dependent value is canonicalised, the
    parameter terms stay and are declared dimensionless; sizes of the view are not inputs."""
    model, inputs = param_gate_lm()
    before = {(v.rule, v.module, v.op) for v in lint(model, inputs).violations}
    assert {("UC202", "attn", "aten.sigmoid.default"), ("UC202", "mlp", "aten.softplus.default")} <= before
    res = rewrite(model, inputs)
    assert res.complete and not res.gct.unhandled
    assert res.gct.declared == {"attn.s_gate": "1", "mlp.dt_bias": "1"}
    assert sum(line.startswith("[activations]") for line in res.gct.log) == 2
    assert infer_units(res.module, inputs).violations == []
    assert torch.isfinite(res.module(*inputs)[1])
    out = tmp_path / "rw"
    assert main(["rewrite", f"{MODELS}:param_gate_lm", "--out", str(out)]) == 0, capsys.readouterr().out
    assert main(["units", str(out), "--verify"]) == 0, capsys.readouterr().out


def test_explicit_attention_with_bias_mask_sinks_and_learned_logit_scale() -> None:
    """GPT-1's product mask ``w * b + -1e4 * (1 - b)`` on a sliced buffer, CPM-Ant's relative
    position bias shared by every layer, Flint's sink logits joined by ``cat`` before the
    softmax, GraniteMoE-SWA's ``sigmoid(logsumexp(w) - sink)`` (left as it is: dimensionless once
    the logits are), Dory's learned ``logits * logit_scale`` and GPT-1's embedding sum ``+ 0``: the scores are still found, C(q) and
    C(k) replace q and k, and the bias table, sinks and logit scale are declared dimensionless."""
    model, inputs = explicit_attention_lm()
    before = {(v.rule, v.module) for v in lint(model, inputs).violations}
    assert {("UC201", "attns.0"), ("UC201", "attns.1"), ("UC301", ""), ("UC101", "")} <= before
    res = rewrite(model, inputs)
    assert res.complete and not res.gct.unhandled
    assert res.gct.declared == {"attns.0.sinks": "1", "attns.1.sinks": "1", "rel.weight": "1", "logit_scale": "1"}
    assert sum("a statistic of attention logits" in line for line in res.gct.log) == 2  # the sink scaling
    assert sum(line.startswith("[explicit_attention]") for line in res.gct.log) == 2
    assert res.gct.residuals == 4  # the bias added to later layers' scores is not a residual add
    assert "h0 = C(C(embedding@wte) + C(embedding@wpe))" in "\n".join(res.gct.log)  # the ``+ 0`` looked through
    assert infer_units(res.module, inputs).violations == []
    assert torch.isfinite(res.module(*inputs)[1])


def test_residual_added_as_a_float32_cast() -> None:
    """Mamba's block adds ``residual.to(torch.float32)``, a cast taken after the normaliser read
    the stream: still a residual add (it was "no residual stream"), rewritten on the canonical
    stream (the first block's normaliser reads the embedding before the cast, and stays)."""
    model, inputs = fp32_residual_lm()
    assert {(v.rule, v.module) for v in lint(model, inputs).violations} >= {("UC102", "layers.0"), ("UC102", "layers.1")}
    res = rewrite(model, inputs)
    assert res.complete and res.gct.residuals_rewritten == res.gct.residuals == 2
    assert sum(line.startswith("[branch_normalisers]") for line in res.gct.log) == 2
    assert infer_units(res.module, inputs).violations == []


def test_router_softmax_over_the_top_k_values() -> None:
    """Cohere2-MoE takes the top-k of the router logits, then the softmax of the k values (UC203
    on a selection of the projection): the router projection is still rewritten."""
    model, inputs = topk_first_lm()
    assert ("UC203", "mlp") in {(v.rule, v.module) for v in lint(model, inputs).violations}
    res = rewrite(model, inputs)
    assert res.complete and not res.gct.unhandled
    assert any(line.startswith("[router_logits] linear@mlp.router") for line in res.gct.log)
    assert infer_units(res.module, inputs).violations == []


def test_skip_term_gain_declared_dimensionless() -> None:
    """Mamba's ``y + u * D``: after the activation rules ``y`` and ``u`` are dimensionless, and
    the sum is consistent only with ``D`` dimensionless; the rewrite declares it (logged as
    ``parameter_gains``) instead of leaving UC101."""
    model, inputs = skip_gain_lm()
    res = rewrite(model, inputs)
    assert res.complete and not res.gct.unhandled
    assert {"layers.0.mixer.D", "layers.1.mixer.D"} <= set(res.gct.declared)
    assert sum(line.startswith("[parameter_gains]") for line in res.gct.log) == 2
    assert infer_units(res.module, inputs).violations == []


@pytest.mark.parametrize("build_lm", [stacked_heads_lm, codebook_losses_lm])
def test_stacked_per_position_heads(build_lm) -> None:  # type: ignore[no-untyped-def]
    """CSM's codebook heads: the logits are a stack of one linear head per position (UC301 on a
    stack, not one projection); each head becomes its own dimensionless linear with a gain, once,
    also where each codebook's loss reads the stack (MusicGen)."""
    model, inputs = build_lm()
    assert ("UC301", "") in {(v.rule, v.module) for v in lint(model, inputs).violations}
    res = rewrite(model, inputs)
    assert res.complete and not res.gct.unhandled
    assert {"logit_gain_0", "logit_gain_1", "logit_gain_2"} <= set(res.gct.new_params)
    assert infer_units(res.module, inputs).violations == []


def test_residual_with_constant_factors() -> None:
    """MiniMax's ``residual * alpha + branch * beta`` (constants): still residual adds (it was
    "no residual stream"); the factors are subsumed by the learnable step and C."""
    model, inputs = scaled_residual_lm()
    assert {(v.rule, v.module) for v in lint(model, inputs).violations} >= {("UC102", "layers.0"), ("UC102", "layers.1")}
    res = rewrite(model, inputs)
    assert res.complete and res.gct.residuals_rewritten == res.gct.residuals == 4
    assert infer_units(res.module, inputs).violations == []


def test_residual_with_factors_computed_from_parameters() -> None:
    """Ergo's gate scales the stream by ``sqrt(1 + sigmoid(w)) * exp(-softplus(w) / 2)``, a value
    computed from a parameter alone: still a residual add (it was "no residual stream", and lint
    called the adds plain UC101 mixes); the gates are subsumed by the learnable step and C."""
    model, inputs = gated_residual_lm()
    assert {(v.rule, v.module) for v in lint(model, inputs).violations} >= {
        ("UC102", "layers.0.attn_gate"), ("UC102", "layers.1.mlp_gate")}
    res = rewrite(model, inputs)
    assert res.complete and res.gct.residuals_rewritten == res.gct.residuals == 4
    assert infer_units(res.module, inputs).violations == []


def test_violations_left_make_it_incomplete(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Squared logits: no rule applies. Exit 1, "INCOMPLETE", each thing left named; with
    --partial the directory is written and unitcheck.json says so, lint before and after."""
    out = tmp_path / "rw"
    assert main(["rewrite", f"{MODELS}:squared_head", "--out", str(out)]) == 1
    text = capsys.readouterr().out
    assert "INCOMPLETE" in text and "the logits are not a linear projection" in text and "UC301" in text
    assert not out.exists()
    assert main(["rewrite", f"{MODELS}:squared_head", "--out", str(out), "--partial"]) == 1
    manifest = json.loads((out / "unitcheck.json").read_text())
    assert manifest["complete"] is False and any("UC301" in x for x in manifest["left"])
    assert manifest["lint"]["before"]["violations"] > manifest["lint"]["after"]["violations"] > 0


def test_the_api_calls_a_rewrite_that_lints_dirty_incomplete() -> None:
    """Every rule did its part, but the loss adds a penalty in the weights' units: ``complete``
    is False, as the command's exit code is, and ``violations_left`` names what a lint finds."""
    model, inputs = penalty_lm()
    res = rewrite(model, inputs)
    assert res.gct.complete and not res.gct.unhandled
    assert [v.rule for v in res.violations_left] == ["UC303"] and not res.complete
    assert [v.rule for v in infer_units(res.module, inputs).violations] == ["UC303"]


@needs_hf
def test_mlm_encoder_rewrites_clean_and_verifies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """BERT: word + position + token-type tables under a LayerNorm, post-LN blocks, an MLM head."""
    out = tmp_path / "bert"
    assert main(["rewrite", "hf:bert", "--out", str(out)]) == 0, capsys.readouterr().out
    text = capsys.readouterr().out
    assert "complete: every residual add and interface rewritten, zero violations left" in text
    assert "h0 = C(C(embedding@bert.embeddings.word_embeddings) + " in text
    assert json.loads((out / "unitcheck.json").read_text())["lint"]["after"]["violations"] == 0
    assert main(["units", str(out), "--verify"]) == 0


# one of each: parallel blocks (falcon, phi, gptj, cohere), scaled or capped logits (granite,
# cohere, gemma2), MoE routers (mixtral), MLM encoders (roberta, distilbert, electra, deberta-v2),
# explicit softmax attention (bloom, gemma2, deberta-v2), encoder-decoders (t5: a shared relative
# position bias in SDPA's mask; bart: a logit bias buffer after the head)
ACCEPTANCE = ["falcon", "phi", "granite", "cohere", "mixtral", "gptj", "roberta", "distilbert", "electra",
              "deberta-v2", "bloom", "gemma2", "modernbert", "xlnet", "got_ocr2", "t5", "bart"]


@needs_hf
@pytest.mark.slow
@pytest.mark.parametrize("arch", ACCEPTANCE)
def test_architectures_rewrite_clean_and_verify(arch: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / arch
    assert main(["rewrite", f"hf:{arch}", "--out", str(out)]) == 0, capsys.readouterr().out
    assert main(["units", str(out), "--verify"]) == 0, capsys.readouterr().out


def test_usage_lists_every_registered_rule_with_before_and_after() -> None:
    """docs/usage.md's pattern table has a row for every rule the driver runs, each with a
    before and an after snippet (code in backticks in both cells)."""
    from unitcheck.rewrite.gct import RULES

    text = (HERE.parents[1] / "docs" / "usage.md").read_text()
    text = text.split("**The patterns**", 1)[1].split("\n#", 1)[0]  # the pattern table's section
    rows = [line.split("|")[1:4] for line in text.splitlines() if line.startswith("| `")]
    documented: dict[str, int] = {}
    for name, before, after in rows:
        rule = name.strip().split("`")[1]
        if "`" in before and "`" in after:
            documented[rule] = documented.get(rule, 0) + 1
    missing = [r.__name__ for r in RULES if r.__name__ not in documented]
    assert RULES and not missing, f"rules without a before/after row in docs/usage.md: {missing}"


def test_a_broadcast_position_table_in_the_embedding_sum() -> None:
    """BioGPT: ``wte(idx) * sqrt(d) + wpe(pos)`` with the positions broadcast over the batch is
    an embedding sum: each table is canonicalised before it (it was left as a UC101)."""
    model, inputs = scaled_tokens_plus_positions_lm()
    assert ("UC101", "") in {(v.rule, v.module) for v in lint(model, inputs).violations}
    res = rewrite(model, inputs)
    assert res.complete and infer_units(res.module, inputs).violations == []


def test_a_rewrite_that_computes_nan_is_not_complete(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A result that lints clean but computes NaN where the original computes finite values is
    not complete: the command says so and exits 1 (Llama 4 in the zoo was called complete).
    P_perp_h without its floor divides by ||h||^2 = 0 at a zero padding row."""
    from unitcheck import canonical

    def floorless(a: torch.Tensor, h: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
        return a - (a * h).sum(-1, keepdim=True) / (h * h).sum(-1, keepdim=True) * h

    monkeypatch.setattr(canonical, "orthogonal", floorless)
    out = tmp_path / "rw"
    assert main(["rewrite", f"{MODELS}:padded_table_lm", "--out", str(out)]) == 1
    text = capsys.readouterr().out
    assert "computes NaN or inf on the example inputs, where the original does not" in text
    assert not out.exists()


def test_a_zero_padding_row_rewrites_complete_and_finite(tmp_path: Path) -> None:
    """The stream is exactly 0 at a padding token whose table row is zero: P_perp_h has a floor
    like C's, so the rewrite is complete and its loss and gradients are finite (NaN before)."""
    from .pattern_models import padded_table_lm

    model, inputs = padded_table_lm()
    res = rewrite(model, inputs)
    assert res.complete and infer_units(res.module, inputs).violations == []
    res.module.train()
    _, loss = res.module(*inputs)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in res.module.parameters() if p.grad is not None)
    assert main(["rewrite", f"{MODELS}:padded_table_lm", "--out", str(tmp_path / "rw")]) == 0


def test_clamps_literals_and_a_composite_activation_take_c_of_their_input(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """GPT-OSS's clamped GLU (``clamp(gate, max=7)``, ``up + 1``: UC103) and Apertus's xIELU (a
    square beside x, ``expm1(min(x, eps))``: UC101, UC204), neither with a UC202 op: each
    elementwise function of one pre-activation reads C(a), once per pre-activation."""
    model, inputs = clamped_glu_lm()
    before = {(v.rule, v.module, v.op) for v in lint(model, inputs).violations}
    assert {("UC103", "mlp", "aten.clamp.default"), ("UC103", "mlp", "aten.add.Tensor"),
            ("UC204", "mlp.act", "aten.expm1.default"), ("UC101", "mlp.act", "aten.add.Tensor")} <= before
    res = rewrite(model, inputs)
    assert res.complete and not res.gct.unhandled
    assert infer_units(res.module, inputs).violations == []
    acts = [line for line in res.gct.log if line.startswith("[activations]")]
    assert len(acts) == 3, acts  # gate, up and the xIELU input: no C(C(a)) at the sigmoid or the + 1
    assert res.source.count("unitcheck_canonical_canonical(canonical") == 0
    assert torch.isfinite(res.module(*inputs)[1])
    out = tmp_path / "rw"
    assert main(["rewrite", f"{MODELS}:clamped_glu_lm", "--out", str(out)]) == 0, capsys.readouterr().out
    assert main(["units", str(out), "--verify"]) == 0, capsys.readouterr().out


def test_a_router_scattered_into_a_minus_inf_fill_is_rewritten_at_its_projection() -> None:
    """Llama 4 gates experts by ``sigmoid(full_like(logits, -inf).scatter(idx, topk))``: C of
    that argument is C over a -inf fill, NaN (the zoo's Llama 4 rewrite computed a NaN loss).
    The router's projection is made dimensionless instead, and the loss is finite."""
    model, inputs = scattered_topk_lm()
    assert ("UC202", "mlp", "aten.sigmoid.default") in {(v.rule, v.module, v.op) for v in lint(model, inputs).violations}
    res = rewrite(model, inputs)
    assert res.complete and infer_units(res.module, inputs).violations == []
    assert any(line.startswith("[router_logits] linear@mlp.router") for line in res.gct.log), res.gct.log
    res.module.train()
    _, loss = res.module(*inputs)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in res.module.parameters() if p.grad is not None)


def test_explicit_attention_through_a_floor_and_a_prescaled_query() -> None:
    """XGLM: ``bmm(q * d^-0.5, k^T) + mask``, then ``torch.max(w, finfo.min)``. The floor is
    looked through like a mask, and the query's scale is kept after C(q): the logits read
    C(q) . C(k)^T / sqrt(d), not C(q) . C(k)^T (the code's temperature stays)."""
    model, inputs = prescaled_query_lm()
    assert ("UC201", "attn") in {(v.rule, v.module) for v in lint(model, inputs).violations}
    res = rewrite(model, inputs)
    assert res.complete and not res.gct.unhandled, res.gct.unhandled
    assert any(line.startswith("[explicit_attention] bmm@attn") and "scale" in line for line in res.gct.log), res.gct.log
    assert infer_units(res.module, inputs).violations == []
    assert torch.isfinite(res.module(*inputs)[1])
    scaled = [line for line in res.source.splitlines() if "mul" in line and f"{8**-0.5!r}" in line]
    assert any("canonical" in line for line in scaled), scaled  # C(q) * d^-0.5


def test_explicit_attention_with_query_dependent_relative_positions() -> None:
    """SAM's decomposed relative positions (GOT-OCR2's vision tower) add the raw query contracted
    with a learned offset table to the scores: with only the scores' query canonical, the two
    terms kept different units (UC101, UC201 left). The query is canonical in both, and the table
    is declared dimensionless."""
    model, inputs = query_position_lm()
    res = rewrite(model, inputs)
    assert res.complete and not res.gct.unhandled, res.gct.unhandled
    line = next(line for line in res.gct.log if line.startswith("[explicit_attention]"))
    assert "attn.rel_pos_h" in line and "attn.rel_pos_w" in line, line
    assert {"attn.rel_pos_h", "attn.rel_pos_w"} <= set(res.module.__units__)
    assert infer_units(res.module, inputs).violations == []
    assert torch.isfinite(res.module(*inputs)[1])


def test_one_query_position_term_beside_the_scores_is_not_taken_for_them() -> None:
    """Scores plus one ``einsum`` of the query with a table: both are products, and only the
    one of two input-dependent operands is q . k^T (the table's product is a term)."""
    model, inputs = query_row_position_lm()
    res = rewrite(model, inputs)
    assert res.complete and not res.gct.unhandled, res.gct.unhandled
    line = next(line for line in res.gct.log if line.startswith("[explicit_attention]"))
    assert line.startswith("[explicit_attention] matmul@attn") and "attn.rel_pos_h" in line, line
    assert infer_units(res.module, inputs).violations == []


def test_a_router_softmax_over_masked_logits_rewrites_the_router() -> None:
    """PhiMoE: ``softmax(scores.masked_fill(below_threshold, -inf))`` and a second softmax of
    the same logits with the top one scattered to -inf: the router rule looks through the fills
    to the projection, and rewrites it once for both (each was left, "not a linear projection")."""
    model, inputs = threshold_router_lm()
    assert ("UC203", "mlp") in {(v.rule, v.module) for v in lint(model, inputs).violations}
    res = rewrite(model, inputs)
    assert res.complete and not res.gct.unhandled, res.gct.unhandled
    assert any(line.startswith("[router_logits] linear@mlp.router") for line in res.gct.log), res.gct.log
    assert infer_units(res.module, inputs).violations == []
    assert torch.isfinite(res.module(*inputs)[1])


def test_media_features_placed_into_text_embeddings() -> None:
    """``embeds.masked_scatter(mask, projector(media))`` (MOSS-Transcribe and LLaVA-style
    models): the join's two sides are canonicalised (it was left as a UC101)."""
    model, inputs = media_tokens_lm()
    assert ("UC101", "", "aten.masked_scatter.default") in {(v.rule, v.module, v.op) for v in lint(model, inputs).violations}
    res = rewrite(model, inputs)
    assert res.complete and infer_units(res.module, inputs).violations == []
    assert any(line.startswith("[mixed_parts] masked_scatter@<root>") for line in res.gct.log), res.gct.log
    assert torch.isfinite(res.module(*inputs)[1])


def test_a_skip_side_with_parameters_is_a_residual_stream() -> None:
    """Doge scales the skip by a parameter and Zaya shifts and scales both sides: the residual
    adds are found through the parameter terms (it was "no residual stream"), and an
    exponential of a parameter times an already-rewritten softplus declares the parameter."""
    model, inputs = gated_skip_lm()
    res = rewrite(model, inputs)
    assert res.gct.residuals == 2 and res.gct.residuals_rewritten == 2
    assert res.complete and infer_units(res.module, inputs).violations == []
    assert res.gct.declared.get("A") == "1"
    assert torch.isfinite(res.module(*inputs)[1])


def test_an_exponential_of_parameters_alone_declares_them() -> None:
    """DiffLlama's lambda, ``exp(sum(lq1 * lk1)) - exp(sum(lq2 * lk2)) + 0.8``: no input reaches
    it, and only dimensionless parameters make the exponentials consistent; the rewrite declares
    them (the lint left UC204 at each exp and the violations downstream)."""
    model, inputs = differential_lm()
    assert ("UC204", "attn", "aten.exp.default") in {(v.rule, v.module, v.op) for v in lint(model, inputs).violations}
    res = rewrite(model, inputs)
    assert res.complete and infer_units(res.module, inputs).violations == []
    assert {"attn.lq1", "attn.lk1", "attn.lq2", "attn.lk2"} <= set(res.gct.declared)
    assert torch.isfinite(res.module(*inputs)[1])


def test_a_residual_whose_branch_is_itself_a_residual() -> None:
    """BLT's cross attention returns ``attn(h) + h`` and its caller adds ``h`` again. The inner
    add is rewritten first; the outer one's branch is then the inner rewrite's result (the
    rewrite used to build on the erased inner add: an internal error)."""
    model, inputs = residual_twice_lm()
    res = rewrite(model, inputs)
    assert res.complete and res.gct.residuals_rewritten == res.gct.residuals == 4, res.gct.unhandled
    assert {"cross.alpha_mlp", "alpha_mlp"} <= set(res.gct.new_params), sorted(res.gct.new_params)
    assert infer_units(res.module, inputs).violations == []
    assert torch.isfinite(res.module(*inputs)[1])


def test_an_attention_bias_computed_from_the_stream() -> None:
    """Inkling: SDPA's additive mask holds ``r_proj(h) @ proj`` gathered by distance, so after
    q and k were canonical the bias still carried p:r_proj * p:proj (UC201 left, exit 1). The
    projection of the stream is canonical per head where it meets the bank, and the bank is
    declared dimensionless, as a logit bias is. (A table of its own, T5's, needs no rewrite:
    lint binds its unit to the logits'.)"""
    model, inputs = stream_bias_lm()
    found = [v for v in lint(model, inputs).violations if v.rule == "UC201"]
    assert found and "bias" in found[0].message
    res = rewrite(model, inputs)
    assert res.complete and not res.gct.unhandled, res.gct.unhandled
    line = next(line for line in res.gct.log if line.startswith("[attention_bias]"))
    assert "attn.proj" in line and "C(view" in line, line
    assert "attn.proj" in res.module.__units__
    assert infer_units(res.module, inputs).violations == []
    assert torch.isfinite(res.module(*inputs)[1])


def test_flex_attention_logits_are_canonical() -> None:
    """flex_attention's logits are q k^T as SDPA's: C(q) times a per-head gain and C(k), the
    temperature sqrt(d_h) as its scale; its score function then modifies dimensionless logits
    (taken for explicit attention, the projection was made a router's)."""
    from .pattern_models import flex_attention_lm

    model, inputs = flex_attention_lm()
    assert any(v.rule == "UC201" and v.node.startswith("flex_attention") for v in lint(model, inputs).violations)
    res = rewrite(model, inputs)
    assert res.complete and not res.gct.unhandled, res.gct.unhandled
    line = next(line for line in res.gct.log if line.startswith("[attention]"))
    assert "flex_attention(C(q) * attn.gain, C(k), v), temperature sqrt(8)" in line, line
    assert not [line for line in res.gct.log if line.startswith("[router_logits]")], res.gct.log
    assert infer_units(res.module, inputs).violations == []
    loss = res.module(*inputs)[1]
    loss.backward()
    assert torch.isfinite(loss) and res.module.get_parameter("attn.gain").grad is not None


def _llama_with(attention: str):  # type: ignore[no-untyped-def]
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2)
    cfg._attn_implementation = attention
    idx = torch.randint(0, 64, (2, 16))
    return LlamaForCausalLM(cfg), {"input_ids": idx, "labels": idx}


@needs_hf
def test_transformers_flex_attention_is_checked_and_rewritten() -> None:
    """transformers' flex_attention integration compiles ``flex_attention`` itself: lint finds
    what it finds with SDPA, and the GCT rewrite completes (the capture failed on meta; the
    recording of the losses' inputs, a dispatch mode, made Dynamo refuse the compiled call)."""
    model, inputs = _llama_with("flex_attention")
    found = sorted(v.rule for v in lint(model, inputs).violations)
    assert found == sorted(v.rule for v in lint(*_llama_with("sdpa")).violations) and "UC201" in found
    res = rewrite(model, inputs)
    assert res.complete and not res.gct.unhandled, res.gct.unhandled
    assert sum(line.startswith("[attention] flex_attention") for line in res.gct.log) == 2, res.gct.log
    assert infer_units(res.module, inputs).violations == []
    with torch.no_grad():  # the original after the rewrite still runs its compiled attention
        assert torch.isfinite(model.eval()(**inputs).loss)


def test_a_scalar_gate_is_a_dimensionless_projection_not_the_sign_of_its_logit() -> None:
    """``mlp(x) * sigmoid(Linear(d, 1)(x))``: the activation rule put C on the gate's logit, a
    single value, whose C is its sign: the gate became sigmoid(+-1), and the rewrite said it was
    complete. The gate's projection is made dimensionless instead, as a router's."""
    from .pattern_models import scalar_gated_lm

    model, inputs = scalar_gated_lm()
    res = rewrite(model, inputs)
    assert res.complete, (res.gct.unhandled, res.violations_left)
    assert [line for line in res.gct.log if line.startswith("[router_logits] linear@mlp.gate")], res.gct.log
    assert not [line for line in res.gct.log if line.startswith("[activations] sigmoid")], res.gct.log
    from unitcheck.fxutil import base_name
    from unitcheck.tracer import trace

    sigmoid = [n for n in trace(res.module, inputs).graph.nodes if base_name(n) == "sigmoid"]
    assert sigmoid and all(base_name(n.args[0]) != "rms_norm" for n in sigmoid)  # not C of one value


def test_a_depth_routed_blocks_router_score_is_not_canonical_over_the_chosen_tokens() -> None:
    """Mixture-of-Depths gates each chosen token's update by ``sigmoid(gather(router(x), 1,
    top))``: C over that gather's last axis normalised over the chosen tokens (the rewrite mixed
    positions). The router's projection is made dimensionless."""
    from .pattern_models import depth_routed_lm

    model, inputs = depth_routed_lm()
    res = rewrite(model, inputs)
    assert not res.gct.unhandled, res.gct.unhandled  # no mixed positions
    assert [line for line in res.gct.log if line.startswith("[router_logits] linear@routed.router")], res.gct.log


def test_a_residual_add_into_chosen_rows_is_a_residual_update_of_those_rows() -> None:
    """Mixture-of-Depths adds the chosen tokens' updates back with ``x.scatter_add(1, idx, u)``:
    a residual add into some rows. It was named as left (UC101, exit 1). The rewrite updates the
    chosen rows, ``scatter(h, 1, idx, C(h_i + alpha C(P_perp_{h_i} u)))`` with ``h_i =
    gather(h, 1, idx)``, and passes the others through: every row stays canonical."""
    from unitcheck import oracle
    from unitcheck.oracle.interp import leaf_values, run_graph
    from unitcheck.rewrite.equal import differences
    from unitcheck.tracer import trace

    from .pattern_models import depth_routed_lm

    model, inputs = depth_routed_lm()
    res = rewrite(model, inputs)
    assert res.complete and res.gct.residuals == res.gct.residuals_rewritten == 2, res.gct.log
    assert res.violations_left == [], res.violations_left
    assert [line for line in res.gct.log if line.startswith("[residual_stream] scatter_add(stream, ")
            and "chosen rows" in line], res.gct.log
    assert "torch.scatter(" in res.source and "torch.gather(" in res.source and "aten.scatter" not in res.source
    check = oracle.verify(res.module, inputs)
    assert check.ok and check.checked == check.agreed > 0, [str(d) for d in check.disagreements[:3]]
    tg = trace(res.module, inputs)
    scatter = next(n for n in tg.graph.nodes if n.op == "call_function" and "scatter" in str(n.target))
    assert "scatter_add" not in str(scatter.target)
    with torch.no_grad():
        env = run_graph(tg, leaf_values(tg))
    h, out, idx = env[scatter.args[0]], env[scatter], env[scatter.args[2]]
    chosen = torch.zeros(h.shape[:2], dtype=torch.bool)
    chosen.scatter_(1, idx[..., 0], True)
    assert chosen.any() and not chosen.all()
    assert torch.equal(out[~chosen], h[~chosen])  # rows not chosen pass through
    assert not torch.allclose(out[chosen], h[chosen])  # the chosen ones are updated
    rms = out.pow(2).mean(-1).sqrt()
    assert torch.allclose(rms, torch.ones_like(rms), atol=1e-4)  # and every row is canonical
    same = rewrite(model, inputs, to="identity")  # torch.gather and torch.scatter_add, the same bits
    assert "torch.scatter_add(" in same.source and "torch.gather(" in same.source
    for training in (False, True):
        assert differences(model, same.module, inputs, training) == []


def test_logits_log_normalised_by_their_own_logsumexp() -> None:
    """BLT's patcher: ``Categorical(logits=aux(h)).entropy()`` computes ``x - logsumexp(x)``, then
    a softmax. The rewrite had put C on the logsumexp's argument alone and left the softmax
    ("not a linear projection", incomplete); the projection is made dimensionless instead, once
    for the statistic and the softmax, so the log-normalisation stays exact."""
    model, inputs = entropy_head_lm()
    assert {"UC203", "UC204"} <= {v.rule for v in lint(model, inputs).violations}
    res = rewrite(model, inputs)
    assert res.complete and not res.gct.unhandled, res.gct.unhandled
    assert [line for line in res.gct.log if line.startswith("[router_logits] linear@aux")], res.gct.log
    assert not [line for line in res.gct.log if "logsumexp" in line], res.gct.log
    assert infer_units(res.module, inputs).violations == []
    assert torch.isfinite(res.module(*inputs)[1])


def test_an_activation_log_normalised_by_its_own_logsumexp() -> None:
    """Inkling's router normalises ``logsigmoid(gate(h))`` by its own logsumexp: that is an
    activation's output, not a projection, so the activations rule keeps it (taken for logits,
    it was left: "logsumexp of a unitful value that is not a linear projection")."""
    model, inputs = log_normalised_gate_lm()
    res = rewrite(model, inputs)
    assert res.complete and not res.gct.unhandled, res.gct.unhandled
    assert any(line.startswith("[activations] log_sigmoid(linear@mlp.gate)") for line in res.gct.log), res.gct.log
    assert infer_units(res.module, inputs).violations == []


def test_an_moe_kept_whole_gets_its_children_rewritten(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Research-code MoE (DBRX, Mixtral before transformers 5): a loop over the experts the batch
    hit, kept whole by the capture, so the graph rules cannot reach its router softmax, its
    experts' activations or the sum of their outputs. Its children are swapped instead, in every
    expert, hit or not; the written directory reloads, lints clean and verifies."""
    model, inputs = looped_experts_lm()
    before = {(v.rule, v.module) for v in lint(model, inputs).violations}
    assert {("UC203", "mlp"), ("UC202", "mlp.experts.2.act")} <= before
    out = tmp_path / "moe"
    assert main(["rewrite", f"{MODELS}:looped_experts_lm", "--out", str(out)]) == 0, capsys.readouterr().out
    assert main(["units", str(out), "--verify"]) == 0, capsys.readouterr().out
    report = json.loads((out / "unitcheck.json").read_text())
    assert report["report"]["kept_whole"] == ["mlp"]
    assert report["lint"]["after"]["violations"] == 0
    log = report["report"]["log"]
    assert "[kept_module] Linear@mlp.router -> gain * C(h) . C(W)^T / sqrt(16)" in log
    assert {f"[kept_module] SiLU@mlp.experts.{i}.act -> silu(C(a))" for i in range(4)} <= set(log)
    assert {f"[kept_module] Linear@mlp.experts.{i}.w2 -> C(linear(x))" for i in range(4)} <= set(log)
    assert "mlp.router.gain" in report["report"]["new_parameters"]
    assert not [p for p in report["report"]["dropped_parameters"] if p.startswith("mlp.")]  # it reads them
    source = (out / "model.py").read_text()
    assert "unitcheck.canonical:DimensionlessLinear" in source and "unitcheck.canonical:CanonicalInput" in source


def test_learned_positions_the_first_block_reads_stay_on_the_stream() -> None:
    """``wte(idx) + pos[:, :T]`` with ``pos`` a parameter: the lint binds pos to the tokens' unit,
    and the stream is the sum. The rewrite had taken the shift for one applied after the branch
    read the stream (Zaya's) and started the stream at C(wte(idx)): the positions reached the
    first attention's input only, never the stream. With that attention's output zeroed, the
    result must still depend on the positions."""
    model, inputs = learned_positions_lm()
    res = rewrite(model, inputs)
    assert res.complete and infer_units(res.module, inputs).violations == []
    assert "[residual_stream] stream input add@<root> -> h0 = C(stream input)" in res.gct.log
    out = res.module
    with torch.no_grad():
        out.get_parameter("attn.c_proj.weight").zero_()
        out.get_parameter("attn.c_proj.bias").zero_()
        loss = out(*inputs)[1]
        out.get_parameter("pos").add_(torch.randn_like(out.get_parameter("pos")))
        moved = out(*inputs)[1]
    assert not torch.allclose(loss, moved)


def test_an_autocast_region_in_forward(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``with torch.autocast(...)`` inside forward: lowering inlined the region with the wrapper's
    metadata, so every op read as the root's code (no residual add found: "nothing to rewrite",
    every finding at ``<root>``). The findings name their modules, and the rewrite casts its new
    gains to the region's bfloat16 (a float32 gain had promoted the queries, which attention
    refused beside bfloat16 keys)."""
    model, inputs = autocast_lm()
    found = {(v.rule, v.module) for v in lint(model, inputs).violations}
    assert found == {("UC102", ""), ("UC201", "attn"), ("UC202", "mlp"), ("UC301", "")}  # was UC101, all at ""
    out = tmp_path / "autocast"
    assert main(["rewrite", f"{MODELS}:autocast_lm", "--out", str(out)]) == 0, capsys.readouterr().out
    assert main(["units", str(out), "--verify"]) == 0, capsys.readouterr().out


def test_einsum_attention_with_a_learned_relative_bias() -> None:
    """T5-style ``einsum("bqhd,bkhd->bhqk", q, k)`` scores plus a learned bias per head and
    offset: the scores were not recognised as a product of queries and keys (exit 1). Each
    operand is canonical over the contracted head dimension, the bias table is declared
    dimensionless."""
    model, inputs = einsum_attention_lm()
    assert ("UC201", "attn") in {(v.rule, v.module) for v in lint(model, inputs).violations}
    res = rewrite(model, inputs)
    assert res.complete and not res.gct.unhandled, res.gct.unhandled
    line = next(line for line in res.gct.log if line.startswith("[explicit_attention]"))
    assert line.startswith("[explicit_attention] einsum@attn") and "attn.rel.weight" in line, line
    assert infer_units(res.module, inputs).violations == []
    assert torch.isfinite(res.module(*inputs)[1])


@pytest.mark.parametrize("einsum", [False, True])
def test_a_tied_head_written_as_a_product(einsum: bool) -> None:
    """Logits as ``h @ wte.weight.t() * d^-0.5`` or ``einsum("btd,vd->btv", h, wte.weight)``
    (no nn.Linear): the rewrite stopped ("a matmul head is not rewritten", "the logits are not a
    linear projection"). The product is the head: gain * C(h) . C(W)^T / sqrt(d), the code's
    scale kept after it."""
    model, inputs = matmul_head_lm(einsum)
    assert ("UC301", "") in {(v.rule, v.module) for v in lint(model, inputs).violations}
    res = rewrite(model, inputs)
    assert res.complete and not res.gct.unhandled, res.gct.unhandled
    op = "einsum" if einsum else "matmul"
    assert any(line.startswith(f"[logits] {op}@<root>") for line in res.gct.log), res.gct.log
    assert "canonical(wte_weight)" in res.source.replace("unitcheck_canonical_canonical", "canonical")
    assert "logit_gain" in res.gct.new_params
    assert infer_units(res.module, inputs).violations == []
    assert torch.isfinite(res.module(*inputs)[1])


def test_a_norm_after_a_post_norm_reads_the_stream_too() -> None:
    """``nn.Transformer``: each post-norm layer ends in a norm, and each stack adds a final norm
    after it. The layer's norm became the identity on the stream, but the final norm, reading
    it only after that, was left with its gain: the decoder's cross-attention kept a bias and a
    product of different units (UC101, exit 1). Every norm that comes to read the stream goes."""
    model, inputs = seq2seq_lm()
    res = rewrite(model, inputs)
    assert res.complete and not res.gct.unhandled, res.gct.unhandled
    dropped = {line.split()[1] for line in res.gct.log if line.startswith("[branch_normalisers]")}
    assert {"layer_norm@tr.encoder.norm", "layer_norm@tr.decoder.norm"} <= dropped, dropped
    assert infer_units(res.module, inputs).violations == []
    assert torch.isfinite(res.module(*inputs))


def test_a_shared_relative_position_bias_in_the_attention_mask() -> None:
    """T5: the first block computes SDPA's additive bias from its table of relative-position
    logits and hands it on; with the scores dimensionless the table kept its own unit (UC201 at
    every SDPA, "an attention bias with no parameter bank to declare", exit 1). A bias of
    parameters alone is declared dimensionless, as the explicit-attention rule declares one."""
    model, inputs = rel_bias_lm()
    res = rewrite(model, inputs)
    assert res.complete and not res.gct.unhandled, res.gct.unhandled
    assert res.module.__units__.get("blocks.0.table.weight") == "1"
    assert any(line.startswith("[attention_bias]") and "blocks.0.table.weight" in line for line in res.gct.log)
    assert infer_units(res.module, inputs).violations == []
    assert torch.isfinite(res.module(*inputs)[1])


def test_a_logit_bias_buffer_after_the_head() -> None:
    """BART: ``lm_head(h) + final_logits_bias``: the logits were "not a linear projection of
    the stream" (exit 1). A bias of parameters or buffers alone added after the head stays, and
    the head is rewritten."""
    model, inputs = biased_head_lm()
    res = rewrite(model, inputs)
    assert res.complete and not res.gct.unhandled, res.gct.unhandled
    assert any(line.startswith("[logits] linear@head") for line in res.gct.log), res.gct.log
    assert "final_logits_bias" in res.source
    assert infer_units(res.module, inputs).violations == []


def test_a_stream_of_copies_averaged_by_hyper_connections() -> None:
    """DeepSeek-V4's blocks add ``post * attn(x)`` to ``comb^T @ copies``: no add takes the stream
    itself, but an average of its copies keeps their unit, so the add is a residual (UC102, not
    UC101) and the rewrite puts it on canonical coordinates (before, "no residual stream").
    The mixing weights' projection, split into parts and shifted and scaled by parameters, is
    made dimensionless once, with the parameters declared."""
    model, inputs = hyper_connection_lm()
    found = {(v.rule, v.module) for v in lint(model, inputs).violations}
    assert ("UC102", "blocks.0") in found and ("UC101", "blocks.0") not in found, found
    res = rewrite(model, inputs)
    assert res.complete and not res.gct.unhandled and res.gct.residuals == 4
    assert infer_units(res.module, inputs).violations == []
    routers = [line for line in res.gct.log if line.startswith("[router_logits]")]
    assert len(routers) == 4 and all("declared dimensionless: blocks." in line for line in routers), routers
    assert {"blocks.0.attn_hc.base", "blocks.0.attn_hc.scale"} <= set(res.gct.declared)
    steps = [line for line in res.gct.log if line.startswith("[residual_stream] add(")]
    assert [("alpha_attn" in line, "alpha_mlp" in line) for line in steps] == [(True, False), (False, True)] * 2, steps
    res.module.train()
    _, loss = res.module(*inputs)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in res.module.parameters() if p.grad is not None)


def test_gates_written_as_slices_into_a_minus_inf_fill_are_a_projection() -> None:
    """DeepSeek-V4's compressor writes two windows' gates into a -inf buffer and softmaxes it:
    the slices all come from one projection, which is made dimensionless (before, "not a
    linear projection"), its position bias declared."""
    model, inputs = window_pool_lm()
    res = rewrite(model, inputs)
    assert res.complete and not res.gct.unhandled
    assert infer_units(res.module, inputs).violations == []
    assert any(line.startswith("[router_logits] linear@layers.0.mixer.gate") for line in res.gct.log), res.gct.log
    assert "layers.0.mixer.position_bias" in res.gct.declared
    assert torch.isfinite(res.module(*inputs)[1])
