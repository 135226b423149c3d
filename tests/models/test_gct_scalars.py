"""GCT's scalars in nGPT's effective-rate form (issue 17, item 3)."""

from __future__ import annotations

import math

import pytest
import torch
from unitcheck.models import build


def _scalars(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The values the forward pass applies: alpha_l, the per-head gains, the logit gain."""
    out: dict[str, torch.Tensor] = {}
    for i, b in enumerate(model.transformer.h):
        a_attn, a_mlp = b.alphas()
        out[f"{i}.alpha_attn"], out[f"{i}.alpha_mlp"] = a_attn.detach().clone(), a_mlp.detach().clone()
        gain = b.attn.gain if b.attn.scale == 1.0 else b.attn.gain / b.attn.scale
        out[f"{i}.gain"] = gain.detach().clone()
    gain = model.logit_gain if model.scale == 1.0 else model.logit_gain / model.scale
    out["logit_gain"] = gain.detach().clone()
    return out


def test_scaled_form_is_the_same_function_at_initialisation() -> None:
    plain, (x, y) = build("gct", n_layer=3)
    scaled, _ = build("gct", n_layer=3, scalars="scaled")
    with torch.no_grad():
        assert torch.allclose(plain(x, y)[1], scaled(x, y)[1], atol=1e-6)
    for k, v in _scalars(plain).items():
        assert torch.allclose(v, _scalars(scaled)[k])


def test_scaled_scalars_move_init_over_scale_times_faster() -> None:
    """One AdamW step moves every parameter by about the learning rate; in the scaled form the
    applied value moves init / scale times as far: sqrt(d) for a gain, alpha0 sqrt(d) for alpha."""
    d, n_layer, lr = 64, 2, 1e-3
    moved = {}
    for form in ("plain", "scaled"):
        model, (x, y) = build("gct", n_layer=n_layer, n_embd=d, scalars=form)
        before = _scalars(model)
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
        model(x, y)[1].backward()
        opt.step()
        after = _scalars(model)
        moved[form] = {k: float((after[k] - before[k]).abs().max()) for k in before}
    alpha0 = 1 / math.sqrt(2 * n_layer)
    for k, step in moved["plain"].items():
        assert step == pytest.approx(lr, rel=0.05)
        factor = alpha0 * math.sqrt(d) if "alpha" in k else math.sqrt(d)
        assert moved["scaled"][k] == pytest.approx(factor * lr, rel=0.05), k


def test_scaled_gct_lints_clean() -> None:
    from unitcheck.infer import infer_units

    model, inputs = build("gct", n_layer=2, scalars="scaled", pos="rope", mlp="swiglu", bias=False)
    assert infer_units(model, inputs).violations == []
