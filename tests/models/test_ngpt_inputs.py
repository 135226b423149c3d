"""nGPT as seed 001 runs it: every GEMM input row on the unit sphere (issue 17, item 1)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from unitcheck.models import build


def _input_norms(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> dict[str, torch.Tensor]:
    """Row norms of the input of every linear layer, by module path, from forward hooks."""
    seen: dict[str, torch.Tensor] = {}
    hooks = []
    for name, mod in model.named_modules():
        if isinstance(mod, nn.Linear):
            def hook(_m: nn.Module, args: tuple[torch.Tensor, ...], name: str = name) -> None:
                seen[name] = args[0].detach().norm(dim=-1).flatten()
            hooks.append(mod.register_forward_pre_hook(hook))
    with torch.no_grad():
        model(*inputs)
    for h in hooks:
        h.remove()
    return seen


def _perturbed(model: nn.Module) -> nn.Module:
    """Weights and scalers away from their initial values (a trained-looking model)."""
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5 * p.abs().mean() * torch.randn(p.shape, generator=g))
    model.normalize_weights()  # type: ignore[operator]
    return model


@pytest.mark.parametrize("project", [False, True])
def test_every_gemm_input_has_unit_rows(project: bool) -> None:
    model, inputs = build("ngpt", n_layer=3, n_embd=64, project=project)
    norms = _input_norms(_perturbed(model), inputs)
    blocks = [n for n in norms if n.startswith("transformer.h.")]
    assert len(blocks) == 3 * 6 and "lm_head" in norms  # q, k, v, out, fc, fc2 per block
    for name, n in norms.items():
        assert torch.allclose(n, torch.ones_like(n), atol=1e-5), (name, float((n - 1).abs().max()))


def test_official_variant_leaves_the_output_projections_raw() -> None:
    model, inputs = build("ngpt", n_layer=2, gemm_inputs="official")
    norms = _input_norms(_perturbed(model), inputs)
    raw = {n for n, v in norms.items() if not torch.allclose(v, torch.ones_like(v), atol=1e-3)}
    assert raw == {f"transformer.h.{i}.{p}" for i in range(2) for p in ("att_c_proj", "mlp_c_proj")}


def test_normalising_the_inputs_changes_nothing_in_full_precision() -> None:
    """The projection is linear and its output is renormalised: a per-row scale cancels."""
    official, inputs = build("ngpt", n_layer=2, gemm_inputs="official")
    official = _perturbed(official).double()
    normalised, _ = build("ngpt", n_layer=2)
    normalised = normalised.double()
    normalised.load_state_dict(official.state_dict())
    with torch.no_grad():
        a, b = official(*inputs), normalised(*inputs)
    assert float((a[0] - b[0]).abs().max()) < 1e-9


def test_unknown_variant_is_refused() -> None:
    with pytest.raises(ValueError, match="gemm_inputs"):
        build("ngpt", gemm_inputs="some")
