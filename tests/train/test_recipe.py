"""The shared optimisation recipe (issue 17, item 3): one warm-up and weight decay for every
compared model, nGPT's weights still renormalised."""

from __future__ import annotations

from pathlib import Path

import torch

from unitcheck.train import TrainConfig, train


def test_shared_recipe_keeps_the_settings_and_renormalises_ngpt(tmp_path: Path) -> None:
    cfg = TrainConfig(model="ngpt", recipe="shared", warmup=3, weight_decay=0.05, n_layer=1, n_embd=32,
                      n_head=2, seq_len=16, batch_size=2, steps=4, eval_interval=4, eval_batches=1,
                      out_dir=str(tmp_path / "shared"), seed=1)
    eff = cfg.effective()
    assert (eff.warmup, eff.weight_decay) == (3, 0.05)  # not nGPT's own (0, 0)
    assert TrainConfig(model="ngpt").effective().warmup == 0
    res = train(cfg)
    assert [round(h["lr"] / cfg.lr, 3) for h in res.history[:3]] == [0.333, 0.667, 1.0]  # the warm-up ran
    w = res.model.transformer.h[0].query.weight  # type: ignore[union-attr]
    assert torch.allclose(w.norm(dim=1), torch.ones(w.shape[0]), atol=1e-5)  # renormalised
    standard = train(TrainConfig(**{**cfg.to_json(), "recipe": "standard", "out_dir": str(tmp_path / "std")}))
    w = standard.model.transformer.h[0].query.weight  # type: ignore[union-attr]
    assert not torch.allclose(w.norm(dim=1), torch.ones(w.shape[0]), atol=1e-5)
