"""Dynamic diagnostics: UVI and stream scale, the SNR analysis on planted correlations, the UVI
monitor in training, and the command line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from unitcheck.models import build

from unitcheck.cli import main
from unitcheck.diagnose import diagnose
from unitcheck.diagnose.capture import capture
from unitcheck.diagnose.flatness import flatness
from unitcheck.diagnose.snr import db, product_stats
from unitcheck.diagnose.uvi import kappa_scale, uvi_attn, uvi_res


def test_fresh_gct_sits_at_the_targets_and_gpt_does_not() -> None:
    for layers in (2, 6):
        cap = capture(*build("gct", n_layer=layers))
        res = uvi_res(cap)
        assert len(res) == 2 * layers and all(abs(r["uvi"]) < 0.1 for r in res)
        assert all(abs(r["kappa"] - 1) < 1e-3 for r in kappa_scale(cap))
    gpt = capture(*build("gpt"))
    assert all(r["kappa"] > 1.01 for r in kappa_scale(gpt))
    assert len(uvi_attn(gpt)) == 2 * 4  # layers x heads


def test_every_bundled_model_shows_its_residual_adds() -> None:
    """Two residual adds per block in every bundled LM, nGPT included: its update
    ``justnorm(a + alpha * (b - a))`` adds to ``a = justnorm(h)`` a branch whose attention reads
    ``h``, the stream before its inline normalisation."""
    for name in ("gpt", "ngpt", "gct", "llama"):
        model, inputs = build(name, n_layer=3)
        assert len(capture(model, inputs).residuals) == 6, name


def test_attention_uvi_reads_the_logit_variance() -> None:
    cap = capture(*build("gpt"))
    # random N(0, 0.02) weights give tiny logits: their variance is far below 1
    assert all(r["vbar"] < 0.01 and r["uvi"] < -3 for r in uvi_attn(cap))


def _planted(rho: float, tokens: int = 4000, units: int = 8, d: int = 256, noise: float = 0.05, seed: int = 0):  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(seed)
    common = torch.randn(tokens, units, 1, generator=g, dtype=torch.float64)
    own = torch.randn(tokens, units, d, generator=g, dtype=torch.float64)
    s = math.sqrt(rho) * common + math.sqrt(1 - rho) * own  # pairwise correlation rho
    n = noise * torch.randn(tokens, units, d, generator=g, dtype=torch.float64)
    return s, n


def test_snr_analysis_recovers_a_planted_correlation() -> None:
    for rho in (0.002, 0.01, 0.05):
        s, n = _planted(rho)
        st = product_stats(s, n)
        assert abs(st["rho_s"] - rho) <= 0.1 * rho, (rho, st["rho_s"])
        assert abs(st["rho_n"]) < 0.1 * rho
        assert abs(st["snr_eq4_db"] - st["snr_dot_db"]) <= 0.5
        # the averaging gain grows with the correlation: 10 log10(1 + (D-1) rho) over products
        expected_gain = 10 * math.log10(1 + (s.shape[-1] - 1) * rho)
        assert abs(st["snr_dot_db"] - st["snr_products_db"] - expected_gain) < 0.6
    assert db(10.0, 1.0) == 10.0


def test_flatness_restores_the_weights() -> None:
    model, inputs = build("gpt")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rows = flatness(model, inputs, alphas=(0.05, 0.5), draws=2)
    assert [r["alpha"] for r in rows] == [0.0, 0.05, 0.5] and rows[0]["increase"] == 0.0
    assert rows[2]["increase"] != rows[1]["increase"]
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_diagnose_report_has_every_section() -> None:
    d = diagnose(*build("gct"))
    for key in ("uvi_res", "uvi_attn", "kappa", "primal_dual", "snr", "flatness", "fingerprint"):
        assert d[key], key
    assert len(d["snr"]) == 8 and all(r["D"] == 64 or r["D"] == 256 for r in d["snr"])
    json.dumps(d)


def test_uvi_monitor_logs_and_stops(tmp_path: Path) -> None:
    from unitcheck.train import TrainConfig, train

    cfg = TrainConfig(model="gpt", n_layer=2, n_embd=32, n_head=2, seq_len=32, batch_size=8, steps=12,
                      eval_interval=12, eval_batches=1, uvi_interval=2, uvi_stop=0.2, uvi_patience=2,
                      out_dir=str(tmp_path))
    res = train(cfg)
    assert res.stopped.startswith("uvi_stop") and res.steps == 4
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[1]["uvi_max"] > 0.2 and rows[1]["uvi_attn_max"] > rows[1]["uvi_max"]
    cfg.uvi_stop, cfg.out_dir = 0.0, str(tmp_path / "b")
    assert train(cfg).stopped == "completed"


def test_cli_writes_json_and_plots(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    code = main(["diagnose", "gct", "--batch", "2", "--seq", "32", "--compare", "gpt", "--out", str(tmp_path),
                 "--no-fingerprint"])
    out = capsys.readouterr().out
    assert code == 0 and "kappa_scale" in out and "UVI_res" in out
    data = json.loads((tmp_path / "diagnostics.json").read_text())
    assert set(data) == {"gct", "gpt"}
    assert {p.name for p in tmp_path.glob("*.png")} >= {"uvi_gct.png", "uvi_gpt.png", "snr.png", "flatness.png"}
