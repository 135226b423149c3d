"""The NVFP4 linear (three quantised GEMMs), the substitution pass and NVFP4 training."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from unitcheck.models import build

from unitcheck.infer import infer_units
from unitcheck.quant.gemm import nvfp4_linear
from unitcheck.quant.nvfp4 import fake_quantize
from unitcheck.quant.substitute import substitute_nvfp4

from ..conftest import needs_hf


def _data(seed: int = 0):  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(40, 48, generator=g, requires_grad=True)
    w = torch.randn(32, 48, generator=g, requires_grad=True)
    b = torch.randn(32, generator=g, requires_grad=True)
    return x, w, b


@pytest.mark.parametrize("recipe", ["te", "ngpt"])
def test_fprop_is_the_quantised_product(recipe: str) -> None:
    x, w, b = _data()
    per_tensor = recipe == "te"
    y = nvfp4_linear(x, w, b, recipe)
    expected = fake_quantize(x.detach(), per_tensor=per_tensor) @ fake_quantize(
        w.detach(), block_2d=True, per_tensor=per_tensor).t() + b.detach()
    assert torch.equal(y.detach(), expected)


def test_gradients_are_quantised_and_close_to_exact() -> None:
    x, w, b = _data()
    torch.manual_seed(11)
    nvfp4_linear(x, w, b, "te").pow(2).sum().backward()
    gx, gw, gb = x.grad, w.grad, b.grad
    x2, w2, b2 = (t.detach().clone().requires_grad_(True) for t in _data())
    F.linear(x2, w2, b2).pow(2).sum().backward()
    for got, exact in ((gx, x2.grad), (gw, w2.grad)):
        rel = float((got - exact).norm() / exact.norm())
        assert 0.0 < rel < 0.35  # quantised (not exact), yet the same direction
    # dgrad and wgrad really go through the quantiser: the stochastic draws change them
    x.grad = w.grad = b.grad = None
    torch.manual_seed(12)
    nvfp4_linear(x, w, b, "te").pow(2).sum().backward()
    assert not torch.equal(x.grad, gx) and not torch.equal(w.grad, gw)
    assert torch.equal(b.grad, gb)  # the bias gradient is a high-precision sum


@pytest.mark.parametrize(("quantise_head", "expected"), [(False, 8), (True, 9)])
def test_graph_shows_one_node_per_quantised_linear(quantise_head: bool, expected: int) -> None:
    model, inputs = build("gpt")
    before = [v.rule for v in infer_units(model, inputs).violations]
    substitute_nvfp4(model, "te", quantise_head=quantise_head)
    ug = infer_units(model, inputs)
    nodes = [n for n in ug.graph.nodes if "nvfp4_linear" in str(n.target)]
    assert len(nodes) == expected  # 4 per layer x 2 layers (+ the tied head)
    assert [v.rule for v in ug.violations] == before and ug.coverage == 1.0


def test_gct_substitution_includes_the_functional_head_on_request() -> None:
    model, _ = build("gct")
    report = substitute_nvfp4(model, "ngpt", quantise_head=True)
    names = [r["name"] for r in report.replaced]
    assert "logits = h @ C(transformer.wte.weight)^T" in names
    assert [k["name"] for k in report.kept] == ["transformer.wpe.weight"]


@pytest.mark.parametrize("name", ["gpt", "llama", "qknorm", "ngpt", "gct"])
def test_head_kept_in_high_precision_by_default(name: str) -> None:
    """Seed 001 keeps embeddings (and, after its reference recipe, the output layer) in high
    precision; ``quantise_head`` adds the head's GEMM and nothing else."""
    model, (x, _) = build(name)
    kept, quantised = copy.deepcopy(model), copy.deepcopy(model)
    report = substitute_nvfp4(kept, "te")
    report_q = substitute_nvfp4(quantised, "te", quantise_head=True)
    assert [k["name"] for k in report.kept if "output head" in k["reason"]] == (
        ["<root>: functional logits GEMM"] if name == "gct" else ["lm_head"])
    assert not any("output head" in k["reason"] for k in report_q.kept)
    assert len(report_q.replaced) == len(report.replaced) + 1
    if name == "gct":
        assert kept.head_recipe is None and quantised.head_recipe == "te"
    else:
        assert type(kept.lm_head) is torch.nn.Linear and type(quantised.lm_head).__name__ == "NVFP4Linear"
    with torch.no_grad():
        assert not torch.equal(kept(x), quantised(x))  # the head's GEMM really changed


def test_quantise_head_flag_reaches_the_substitution(tmp_path: Path) -> None:
    from unitcheck.train import TrainConfig, train

    def heads(flag: bool) -> str:
        cfg = TrainConfig(model="ngpt", n_layer=1, n_embd=32, n_head=2, seq_len=16, batch_size=2, steps=1,
                          eval_interval=1, eval_batches=1, precision="nvfp4", nvfp4_recipe="matched",
                          quantise_head=flag, out_dir=str(tmp_path / str(flag)), seed=1)
        return type(train(cfg).model.lm_head).__name__  # type: ignore[union-attr]

    assert heads(False) == "Linear" and heads(True) == "NVFP4Linear"


def test_matched_recipe_uses_the_declared_bounds() -> None:
    """GCT under ``matched``: canonical inputs get the fixed scale sqrt(K) and are never clipped
    (trained-looking weights), the attention output gets per-tensor scaling; under ``ngpt`` the
    same inputs are clipped to nGPT's unit bound."""
    from unitcheck.quant.gemm import NVFP4Linear
    from unitcheck.quant.nvfp4 import saturated_blocks

    model, (x, _) = build("gct", n_layer=2, n_embd=64)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(3 * p.abs().mean() * torch.randn(p.shape, generator=g))
    report = substitute_nvfp4(model, "matched")
    notes = {r["name"]: r.get("scaling") for r in report.replaced}
    assert notes["transformer.h.0.attn.c_attn"] == f"input fixed amax {math.sqrt(64):.4g}, weight per-tensor"
    assert notes["transformer.h.0.mlp.c_proj"] == f"input fixed amax {math.sqrt(256):.4g}, weight per-tensor"
    assert notes["transformer.h.0.attn.c_proj"] is None  # nothing declared: per-tensor
    clipped: dict[str, tuple[float, float]] = {}
    hooks = []
    for name, mod in model.named_modules():
        if isinstance(mod, NVFP4Linear) and mod.x_amax > 0:
            def hook(m: NVFP4Linear, args: tuple[torch.Tensor, ...], name: str = name) -> None:
                clipped[name] = (saturated_blocks(args[0], amax=m.x_amax), saturated_blocks(args[0], amax=1.0))
            hooks.append(mod.register_forward_pre_hook(hook))
    with torch.no_grad():
        model(x)
    assert len(clipped) == 6  # c_attn, c_fc, c_proj per layer
    assert all(matched == 0.0 for matched, _ in clipped.values())
    assert all(unit > 0.05 for _, unit in clipped.values())


def test_matched_fprop_is_the_product_quantised_at_the_bound() -> None:
    x, w, b = _data()
    bound = float(x.detach().abs().max()) * 1.5
    y = nvfp4_linear(x, w, b, "matched", x_amax=bound)
    expected = fake_quantize(x.detach(), per_tensor=False, amax=bound) @ fake_quantize(
        w.detach(), block_2d=True).t() + b.detach()
    assert torch.equal(y.detach(), expected)
    assert torch.equal(nvfp4_linear(x, w, b, "te", x_amax=bound), nvfp4_linear(x, w, b, "te"))


@needs_hf
def test_hf_gpt2_report_lists_every_gemm() -> None:
    from unitcheck.hf import build as hf_build

    model, _ = hf_build("gpt2")
    report = substitute_nvfp4(model, "te")
    replaced = {r["name"]: r["kind"] for r in report.replaced}
    convs = [n for n, m in model.named_modules() if type(m).__name__ == "NVFP4Conv1D"]
    assert len(convs) == 8 and all(replaced[c] == "Conv1D (addmm)" for c in convs)
    kept = {k["name"]: k["reason"] for k in report.kept}
    assert "lm_head" not in replaced and "output head" in kept["lm_head"]  # get_output_embeddings()
    assert set(kept) == {"transformer.wpe.weight", "lm_head"} and "embedding" in kept["transformer.wpe.weight"]
    matrices = {n for n, p in model.named_parameters() if p.dim() >= 2}
    explained = {f"{r['name']}.weight" for r in report.replaced} | set(kept) | {"transformer.wte.weight"}
    assert matrices <= explained  # wte is the tied head's weight
    assert report.backend == "emulated" and "emulation" in report.backend_reason
    json.dumps(report.to_json())


def test_keep_last_fraction() -> None:
    model, _ = build("llama", n_layer=4)
    report = substitute_nvfp4(model, "te", keep_last=0.25)
    kept = [k["name"] for k in report.kept]
    assert all(n.startswith("layers.3.") for n in kept if n.startswith("layers."))
    assert len([n for n in kept if n.startswith("layers.3.")]) == 7


def test_bundled_model_trains_in_nvfp4(tmp_path: Path) -> None:
    from unitcheck.train import TrainConfig, train

    cfg = TrainConfig(model="gpt", n_layer=2, n_embd=32, n_head=2, seq_len=32, batch_size=16, steps=40,
                      lr=3e-3, warmup=5, eval_interval=40, eval_batches=2, precision="nvfp4",
                      out_dir=str(tmp_path), seed=1)
    res = train(cfg)
    first = sum(h["train_loss"] for h in res.history[:5]) / 5
    last = sum(h["train_loss"] for h in res.history[-5:]) / 5
    assert last < first - 0.5
    assert any("nvfp4_linear" in repr(m) or type(m).__name__ == "NVFP4Linear" for m in res.model.modules())


def test_weight_cache_never_serves_a_freed_tensor() -> None:
    from unitcheck.quant.gemm import RECIPES, _weight

    r = RECIPES["te"]
    for i in range(100):  # a freed weight's id and storage are soon reused by a new tensor
        w = torch.randn(64, 48)
        _weight(w, r)
        del w
        w2 = torch.randn(32 if i % 2 else 64, 48)
        q = _weight(w2, r)
        assert q.shape == w2.shape and torch.equal(q, _weight(w2.clone(), r))
    w = torch.randn(32, 48)
    q1 = _weight(w, r)
    with torch.no_grad():
        w.mul_(2)  # an optimizer step bumps the version: quantised again
    assert torch.equal(_weight(w, r), 2 * q1)
