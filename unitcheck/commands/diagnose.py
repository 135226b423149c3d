"""``unitcheck diagnose MODEL|RUN_DIR [--batch N] [--seq T] [--out DIR] [--compare MODEL]``."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from ._common import UsageError, write_output


def _batch(model_spec: str, sets: dict[str, Any], batch: int, seq: int) -> tuple[Any, Any, str]:
    """(model, inputs, label): bundled models get the corpus vocabulary and the window length;
    a run directory is rebuilt from its config and checkpoint."""
    import torch

    from ..train.data import Batcher, load_corpus

    if os.path.isdir(model_spec) and os.path.isfile(os.path.join(model_spec, "ckpt.pt")):
        from ..train.checkpoint import CheckpointError
        from ..train.loop import build_model
        from ..train.rundir import checkpoint_for, read_run_config
        from ..validate import state_dict_mismatch

        if sets:
            raise UsageError(f"{model_spec} is a training run: its config.json fixes the model, --set does not apply")
        cfg = read_run_config(model_spec)
        state = checkpoint_for(model_spec, cfg)
        corpus = load_corpus(cfg.tokenizer, cfg.corpus, data=cfg.data or None)
        model = build_model(cfg, corpus.vocab_size)
        mismatch = state_dict_mismatch(model.state_dict(), state["model"])
        if mismatch:
            raise CheckpointError(f"{os.path.join(model_spec, 'ckpt.pt')} does not fit the model of its "
                                  f"config.json: {mismatch}")
        model.load_state_dict(state["model"])
        seq = min(seq, cfg.seq_len)
        x, y = Batcher(corpus.val, seq, batch, seed=0).next()
        return model, (x, y), os.path.basename(os.path.normpath(model_spec))
    from ..loader import load_model
    from ..models import MODELS

    if model_spec in MODELS:
        corpus = load_corpus("char")
        sets = {"vocab_size": corpus.vocab_size, "block_size": max(seq, 8), **sets}
        loaded = load_model(model_spec, sets)
        x, y = Batcher(corpus.val, seq, batch, seed=0).next()
        return loaded.model, (x, y), model_spec
    loaded = load_model(model_spec, sets)
    del torch
    return loaded.model, loaded.inputs, model_spec


def run(args: argparse.Namespace) -> int:
    from ..diagnose import diagnose
    from ..loader import parse_sets
    from ..resources import check_fits

    check_fits(args.batch * args.seq * 8 * 2 * 4, f"--batch {args.batch} --seq {args.seq}",
               "measure on a smaller batch")

    sets = parse_sets(args.set)
    specs = [args.model] + ([args.compare] if args.compare else [])
    results: dict[str, Any] = {}
    for spec in specs:
        model, inputs, label = _batch(spec, sets, args.batch, args.seq)
        results[label] = diagnose(model, inputs, recipe=args.recipe, fingerprint=not args.no_fingerprint)
    if args.out:
        from ..fsutil import atomic_write_text

        os.makedirs(args.out, exist_ok=True)
        atomic_write_text(os.path.join(args.out, "diagnostics.json"), json.dumps(results, indent=2) + "\n")
        if not args.no_plots:
            from ..diagnose.plots import plot_all

            try:
                plot_all(results, args.out)
            except ImportError as err:
                raise UsageError(str(err)) from None
    write_output(render(results, args.uvi_threshold), args.output)
    return 0


def render(results: dict[str, Any], threshold: float) -> str:
    lines = []
    for name, d in results.items():
        lines.append(f"== {name}: loss {d['loss']:.4f}, {d['seconds']:.1f} s")
        for r in d["uvi_res"]:
            flag = "  <-- |UVI| above threshold" if abs(r["uvi"]) > threshold else ""
            lines.append(f"  UVI_res {r['index']:>2} {r['module']:<28} alpha {r['alpha']:.4f} (target {r['alpha_star']:.4f}) UVI {r['uvi']:+.3f}{flag}")
        by_layer: dict[int, list[float]] = {}
        for r in d["uvi_attn"]:
            by_layer.setdefault(r["layer"], []).append(r["uvi"])
        for layer, vals in by_layer.items():
            lines.append(f"  UVI_attn layer {layer:>2}: " + " ".join(f"{v:+.2f}" for v in vals))
        for r in d["kappa"]:
            lines.append(f"  kappa_scale {r['index']:>2} {r['module']:<28} {r['kappa']:.6f} ({r['bits']:.3f} bits)")
        if d["snr"]:
            lines.append(f"  {'linear':<30} {'w dB':>6} {'x dB':>6} {'prod':>6} {'dot':>6} {'gain':>6} {'Eq.4':>6} {'rho_s':>9} {'rho_n':>9}")
            for r in d["snr"]:
                lines.append(f"  {r['module'][:30]:<30} {r['snr_weights_db']:>6.1f} {r['snr_activations_db']:>6.1f} {r['snr_products_db']:>6.1f} {r['snr_dot_db']:>6.1f} {r['averaging_gain_db']:>6.1f} {r['snr_eq4_db']:>6.1f} {r['rho_s']:>9.2e} {r['rho_n']:>9.2e}")
        if d.get("flatness"):
            lines.append("  flatness: " + ", ".join(f"a={r['alpha']:g}: +{r['increase']:.4f}" for r in d["flatness"][1:]))
        if d.get("fingerprint") is not None:
            m = sum(r["match"] for r in d["fingerprint"])
            lines.append(f"  fingerprint: {m}/{len(d['fingerprint'])} generators match the static prediction")
    return "\n".join(lines) + "\n"
