"""docs/results.md from the experiments' JSON files: our numbers beside the seeds' claims, and a
plain statement of whether the direction of each effect is reproduced at this scale."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from typing import Any

from common import BUDGETS, REDUCED, RESULTS

from unitcheck.fsutil import atomic_write_text


def _dir(budget: str) -> str:
    base = os.path.abspath(RESULTS)
    return base if budget == "full" else os.path.join(base, budget)


def _where(name: str, budget: str) -> str | None:
    """The budget whose results/<name>.json the page draws on: the page's own budget, else (for a
    reduced page) the full-size file of an experiment that was not rerun."""
    for b in ([budget, "full"] if budget == "reduced" else [budget]):
        if os.path.exists(os.path.join(_dir(b), f"{name}.json")):
            return b
    return None


def _load(name: str, budget: str) -> dict[str, Any] | None:
    b = _where(name, budget)
    if b is None:
        return None
    with open(os.path.join(_dir(b), f"{name}.json")) as fh:
        return json.load(fh)  # type: ignore[no-any-return]


def _img(name: str, budget: str) -> str:
    """Relative to the page: docs/results.md (full and reduced), or results/quick/results.md
    beside its plots."""
    if budget == "quick":
        return f"{name}.png"
    b = _where(name, budget)
    return f"results/{name}.png" if b == "full" else f"results/{b}/{name}.png"


def _verdict(ok: bool, yes: str, no: str) -> str:
    return f"**Reproduced (direction):** {yes}" if ok else f"**Not reproduced:** {no}"


def _before(key: str) -> list[str]:
    """The verdict this section gave before issue 17 and, when one is written, why it changed."""
    path = os.path.join(os.path.abspath(RESULTS), "before_issue17", "verdicts.json")
    if not os.path.exists(path):
        return []
    with open(path) as fh:
        old = json.load(fh)
    if key not in old:
        return []
    lines = ["", f"> Before issue 17 (full size, old protocol): {old[key]}"]
    why = old.get("why", {}).get(key)
    if why:
        lines.append(f"> Change: {why}")
    return lines


SECTIONS: list[Callable[[str], list[str]]] = []  # in page order
PAGES: list[str] = []  # the JSON files behind them


def section(name: str, title: str, needs: str = "entries") -> Callable[[Callable[[dict[str, Any], str], list[str]]], Callable[[str], list[str]]]:
    """Register a page section drawn from results/<name>.json; until that file holds ``needs``
    the section says so instead. A section of a reduced page says which budget its numbers
    come from."""
    def wrap(body: Callable[[dict[str, Any], str], list[str]]) -> Callable[[str], list[str]]:
        def draw(budget: str) -> list[str]:
            d = _load(name, budget)
            if not (d and needs in d):
                return [title, "", "Not run yet.", ""]
            lines = body(d, budget)
            if budget == "reduced":
                lines[1:1] = ["", _budget_note(name, _where(name, budget) or budget)]
            return lines
        SECTIONS.append(draw)
        PAGES.append(name)
        return draw
    return wrap


def _budget_note(name: str, b: str) -> str:
    if b == "full":
        return ("*Budget: full size (4 layers, width 128, 300 steps); this experiment is unaffected by "
                "issue 17 and was not rerun.*")
    if name == "snr_width":
        return ("*Budget: reduced: 2 layers, widths 64-1024, batch 8 x 64 characters, 60 steps per model "
                "(not the full-size protocol).*")
    if name == "rewrite_train":
        s = REDUCED
        return (f"*Budget: transformers' small default sizes (2 layers, width 64, 4 heads, vocabulary 128), batch "
                f"{s.batch_size} x {s.seq_len} characters, 300 steps (the issue's count), one seed, CPU, one thread.*")
    s = REDUCED
    return (f"*Budget: reduced: {s.n_layer} layers, width {s.n_embd}, {s.n_head} heads, batch {s.batch_size} x "
            f"{s.seq_len} characters, {s.steps} steps ({s.steps * s.batch_size * s.seq_len / 1e6:.2f}M characters "
            "per run), not the full-size protocol (4 layers, width 128, 300 steps of 32 x 128).*")


def _num(x: float | None, fmt: str = ".3f") -> str:
    return "-" if x is None else format(x, fmt)


def _pct(x: float | None) -> str:
    return f"{100 * x:+.2f}%" if x is not None else "-"


RECIPES_TEXT = ("NVFP4 recipes: gpt, llama, qknorm use Transformer Engine's (`te`: random Hadamard transform "
                "on the wgrad operands, per-tensor scaling, stochastic rounding of gradients); ngpt and every gct "
                "variant use `matched` (no Hadamard transform; a fixed scale matched to each operand's known norm: "
                "amax 1 for nGPT's unit-norm rows and weights, sqrt(K) for GCT's RMS-1 canonical inputs; per-tensor "
                "scaling for operands without a known norm: GCT's weights, its attention output and gated product; "
                "stochastic rounding of gradients). Embeddings and the output head stay in high precision in every "
                "model (seed 001). The swapped recipe is seed 001's `ngpt` (fixed unit scale everywhere) for the "
                "baselines and `te` for the normalised models.")

RECIPE_TEXT = ("Optimisation recipe, the same for every model: AdamW (0.9, 0.95), gradient clip 1, linear warm-up "
               "over the first 5% of the steps, cosine decay to 0.1x, no weight decay (nGPT renormalises its "
               "matrices and GCT's feed canonicalisers, so decay is not one knob across them; see "
               "bench/experiments/common.py). nGPT's matrices are renormalised after every step; gct's scalars "
               "(alpha_l, head gains, logit gain) use nGPT's effective-rate form s * init / scale unless the row "
               "says `gct-plain`.")


@section("lr_robustness", "## 1-2. Learning-rate robustness and NVFP4 relative error", needs="summary")
def lr_section(d: dict[str, Any], budget: str) -> list[str]:
    s = d["summary"]
    e = d["entries"]
    models = [m for m in s if m in ("gpt", "llama", "qknorm", "ngpt", "gct")]
    lrs = sorted({v["lr"] for v in e.values() if v["precision"] in ("fp32", "nvfp4")})
    lines = ["## 1. Learning-rate robustness (seed 000; seed 001 section 5.3)", "",
             "Seed claim: GCT and nGPT stay stable across a 16x learning-rate range; Pre-LN and LLaMA-style "
             "stop early at the highest rates (UVI threshold); QK-Norm ends 0.197 nats above its best.", "",
             RECIPE_TEXT, "",
             "Protocol: the grid starts at 5 rates over 16x (5e-4 to 8e-3) and is extended by factors of 2 until "
             "each model's best fp32 rate, with and without the UVI stop, lies strictly inside it. Every run goes to "
             "its last step with UVI measured every tenth of the budget; the seed's stopped version of a run is its "
             "validation loss at the step where |UVI_res| first stays above 3 for two measurements (the same "
             "trajectory a stopped run follows). Final validation loss, every run to its last step (`div`: the "
             "loss became NaN; `*`: the UVI stop would have ended the run earlier):", "",
             "| model | precision | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " | best rate | inside |",
             "| --- | --- | " + " | ".join("---:" for _ in lrs) + " | ---: | --- |"]
    br = d.get("brackets", {})
    for model in s:
        for prec in ("fp32", "nvfp4"):
            vals = {v["lr"]: v for v in e.values() if v["model"] == model and v["precision"] == prec}
            if not vals:
                continue

            def cell(v: dict[str, Any]) -> str:
                if v["final_val_loss"] is None:
                    return "div"
                return f"{v['final_val_loss']:.3f}" + ("*" if v["stopped_status"].startswith("uvi_stop") else "")

            cells = [cell(vals[lr]) if lr in vals else "" for lr in lrs]
            best = f"{s[model]['best_lr']:g}" if prec == "fp32" else ""
            inside = ("yes" if br.get(model, {}).get("inside") else "no") if prec == "fp32" else ""
            lines.append(f"| {model} | {prec} | " + " | ".join(cells) + f" | {best} | {inside} |")
    lines += ["", "The same grid under the seed's UVI stop (the loss where the stop would have ended the run, `*`):", "",
              "| model | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " | best rate |",
              "| --- | " + " | ".join("---:" for _ in lrs) + " | ---: |"]
    for model in s:
        vals = {v["lr"]: v for v in e.values() if v["model"] == model and v["precision"] == "fp32"}
        cells = [("div" if vals[lr]["stopped_loss"] is None else f"{vals[lr]['stopped_loss']:.3f}"
                  + ("*" if vals[lr]["stopped_status"].startswith("uvi_stop") else "")) if lr in vals else "" for lr in lrs]
        lines.append(f"| {model} | " + " | ".join(cells) + f" | {_num(s[model]['best_lr_stopped'], 'g')} |")
    top = 8e-3  # the top of the seed's 16x range, run by every model
    stops = {m: [lr for lr in s[m]["uvi_stops"]] for m in models}
    lines += ["", "Runs the UVI stop would end early (fp32): " + "; ".join(
        f"{m} " + (", ".join(f"{x:g}" for x in xs) or "none") for m, xs in stops.items()) + ". Diverged (fp32): " + "; ".join(
        f"{m} " + (", ".join(f"{x:g}" for x in s[m]["diverged"]) or "none") for m in models) + "."]
    normalised = [m for m in ("gct", "ngpt") if m in s]
    baselines = [m for m in ("gpt", "llama", "qknorm") if m in s]
    stop_ok = bool(normalised and baselines) and not any(stops[m] for m in normalised) and all(top in stops[m] for m in baselines)
    lines += ["", _verdict(stop_ok, f"every baseline would be stopped by the UVI threshold at lr {top:g}; no normalised run would.",
                           f"the UVI stop at lr {top:g} does not separate the baselines from the normalised models at this budget "
                           f"(baselines stopped there: {', '.join(m for m in baselines if top in stops[m]) or 'none'}; "
                           f"normalised runs stopped anywhere: {', '.join(m for m in normalised if stops[m]) or 'none'})."),
              *_before("lr_stop"), ""]

    def penalty(model: str, stopped: bool) -> float | None:
        key = "stopped_loss" if stopped else "final_val_loss"
        fp = {v["lr"]: v[key] for v in e.values() if v["model"] == model and v["precision"] == "fp32"}
        finite = [x for x in fp.values() if x is not None]
        if top not in fp or not finite:
            return None
        return math.inf if fp[top] is None else fp[top] - min(finite)

    pen = {m: penalty(m, False) for m in normalised + baselines}
    pen_st = {m: penalty(m, True) for m in normalised + baselines}

    def show(p: dict[str, float | None]) -> str:
        return ", ".join(f"{m} " + ("diverged" if x == math.inf else _num(x)) for m, x in p.items())

    ok = all(pen[m] is not None for m in pen) and bool(normalised and baselines) and \
        max(pen[m] for m in normalised) <= min(pen[m] for m in baselines)  # type: ignore[type-var]
    ok_st = all(pen_st[m] is not None for m in pen_st) and bool(normalised and baselines) and \
        max(pen_st[m] for m in normalised) <= min(pen_st[m] for m in baselines)  # type: ignore[type-var]
    lines += [f"Penalty at lr {top:g} (loss there minus the model's best, fp32), every run to its end: {show(pen)}; "
              f"under the UVI stop: {show(pen_st)}.", "",
              _verdict(ok, "the normalised models lose least at the highest rate (every run to its end"
                       + ("; the same under the UVI stop)." if ok_st else "; under the UVI stop they do not)."),
                       "at this budget the highest rate does not hurt the baselines more than the normalised models "
                       "(every run to its end" + ("; under the UVI stop it does)." if ok_st else "; nor under the UVI stop).")),
              "", "This verdict rests on the runs taken to their end; the stopped version is beside it.",
              *_before("lr_penalty")]
    extra = [m for m in s if m not in models]
    if extra:
        lines += ["", "Ablation and architecture parity (fp32 grid; NVFP4 at the best rate, `matched` recipe):", "",
                  "| model | what differs | best rate | best fp32 loss | NVFP4 at that rate | relative error |",
                  "| --- | --- | ---: | ---: | ---: | ---: |"]
        what = {"gct": "scalars in nGPT's effective-rate form (the compared gct)",
                "gct-plain": "scalars as plain parameters (ablation)",
                "gct-rope-swiglu": "RoPE, normalised SwiGLU gate, no biases (parity with ngpt)",
                "ngpt": "reference"}
        for m in ["gct", *extra, "ngpt"]:
            if m in s:
                v = s[m]
                lines.append(f"| {m} | {what.get(m, '')} | {v['best_lr']:g} | {v['best_fp32']:.3f} | "
                             f"{_num(v['nvfp4_at_best'])} | {_pct(v['relative_error'])} |")
        if "gct-plain" in s and "gct" in s:
            g, p = s["gct"]["best_fp32"], s["gct-plain"]["best_fp32"]
            lines += ["", f"**Ablation:** the effective-rate scalars change GCT's best loss by {g - p:+.3f} nats "
                      f"({p:.3f} plain -> {g:.3f})."]
        if "gct-rope-swiglu" in s and "ngpt" in s:
            g, n = s["gct-rope-swiglu"]["best_fp32"], s["ngpt"]["best_fp32"]
            lines += ["", f"**Parity:** with RoPE and a normalised SwiGLU gate GCT's best loss is {g:.3f} against "
                      f"nGPT's {n:.3f} ({g - n:+.3f}); with learned positions and GELU it is {s['gct']['best_fp32']:.3f}."]
    lines += ["", f"![learning-rate robustness]({_img('lr_robustness', budget)})", "",
              "## 2. NVFP4 relative error (seed 001 Fig. 5)", "",
              *([_budget_note("lr_robustness", budget) + " The runs are section 1's.", ""] if budget == "reduced" else []),
              "Seed claim: nGPT in NVFP4 without Hadamard transform or per-tensor scaling has a lower relative "
              "error than GPT with both (1.2B dense; ~0% for the 3B/30B hybrid).", "", RECIPES_TEXT, "",
              "Compared at each model's best fp32 rate (every run to its end), and there again with the other recipe.", "",
              "| model | rate | fp32 loss | NVFP4 loss (own recipe) | relative error | other recipe | its loss | its relative error |",
              "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |"]
    for m in models:
        v = s[m]
        lines.append(f"| {m} | {v['best_lr']:g} | {v['best_fp32']:.3f} | {_num(v['nvfp4_at_best'])} ({v['nvfp4_recipe']}) | "
                     f"{_pct(v['relative_error'])} | {v['swap_recipe'] or '-'} | {_num(v['swap_loss'])} | {_pct(v['swap_relative_error'])} |")
    rel = {m: s[m]["relative_error"] for m in models if s[m]["relative_error"] is not None}
    if "ngpt" in rel and "gpt" in rel:
        more = f" GCT: {_pct(rel.get('gct'))}." if "gct" in rel else ""
        lines += ["", _verdict(abs(rel["ngpt"]) < abs(rel["gpt"]),
                                f"nGPT's relative error ({_pct(rel['ngpt'])}) is below GPT's ({_pct(rel['gpt'])}).{more}",
                                f"nGPT {_pct(rel['ngpt'])} vs GPT {_pct(rel['gpt'])}; with each other's recipe "
                                f"nGPT {_pct(s['ngpt']['swap_relative_error'])}, GPT {_pct(s['gpt']['swap_relative_error'])}.{more} "
                                "Section 6 measures the dot-product SNR behind this."),
                  *_before("nvfp4_rel")]
    return lines + [""]


@section("ptq", "## 3. Post-training quantisation")
def ptq_section(d: dict[str, Any], budget: str) -> list[str]:
    e = d["entries"]
    lines = ["## 3. Post-training quantisation (seed 000)", "",
             "Seed claim: GCT loses +0.009 nats under per-tensor int8 at 1B, baselines up to +5.51; the GCT stream "
             "fixes kappa_scale = 1 (log2 kappa bits consumed by cross-token scale spread).", "",
             "Models trained at lr 2e-3 under the shared recipe; the output head stays in high precision under NVFP4.", "",
             "| model | fp32 loss | int8 increase | NVFP4 increase (te) | NVFP4 increase (own recipe) | kappa_scale | bits |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for m, v in e.items():
        own = f"{v['nvfp4_own_increase']:+.4f} ({v['own_recipe']})" if "nvfp4_own_increase" in v else "-"
        lines.append(f"| {m} | {v['fp32']:.3f} | {v['int8_increase']:+.4f} | {v['nvfp4_increase']:+.4f} | {own} | "
                     f"{v['kappa_scale']:.3f} | {math.log2(v['kappa_scale']):.2f} |")
    if "gct" in e and "gpt" in e:
        ok = e["gct"]["kappa_scale"] < 1.01 and e["gct"]["int8_increase"] <= e["gpt"]["int8_increase"]
        worst = max(v["int8_increase"] for v in e.values())
        lines += ["", _verdict(ok, f"GCT keeps kappa_scale at {e['gct']['kappa_scale']:.4f} and loses {e['gct']['int8_increase']:+.4f} under int8 "
                                   f"vs GPT {e['gpt']['int8_increase']:+.4f}; the size of the effect is not: at this scale per-tensor int8 costs "
                                   f"every model at most {worst:+.4f} nats (the seed's baselines lose up to +5.51 at 1B).",
                               f"GCT int8 {e['gct']['int8_increase']:+.4f} (kappa {e['gct']['kappa_scale']:.3f}) vs GPT {e['gpt']['int8_increase']:+.4f}; at this size per-tensor int8 barely hurts any model."),
                  *_before("ptq")]
    return lines + ["", f"![post-training quantisation]({_img('ptq', budget)})", ""]


@section("depth", "## 4. Depth transfer", needs="own_lr")
def depth_section(d: dict[str, Any], budget: str) -> list[str]:
    e = d["entries"]
    tuned, own = d.get("tuned_lr", {}), d.get("own_lr", {})
    depths = sorted({v["depth"] for v in e.values()})
    labels = list(tuned)

    def loss(lab: str, depth: int, lr: float | None) -> float | None:
        v = e.get(f"{lab}|{depth}|{lr:g}") if lr is not None else None
        return v["final_val_loss"] if v else None

    lines = ["## 4. Depth transfer (seed 000)", "",
             "Seed claim: at a fixed budget (400M tokens) GCT beats nGPT at L=48 (3.903 vs 4.243 nats); adding the "
             "GCT projection to nGPT gains 0.275 nats at L=48.", "", RECIPE_TEXT, "",
             f"Each depth at the rate tuned at L={depths[0]} (the seed's protocol), and at its own best rate; both "
             "tunings extend the grid until the best rate lies strictly inside the rates tried.", "",
             f"| model | rate tuned at L={depths[0]} | " + " | ".join(f"L={x}" for x in depths) + " | "
             + " | ".join(f"L={x} own rate: loss" for x in depths) + " |",
             "| --- | ---: | " + " | ".join("---:" for _ in depths) + " | " + " | ".join("---:" for _ in depths) + " |"]
    for lab in labels:
        at_tuned = [_num(loss(lab, x, tuned[lab])) for x in depths]
        at_own = []
        for x in depths:
            o = own.get(lab, {}).get(str(x))
            at_own.append(f"{o['best']:g}{'' if o['inside'] else ' (edge)'}: {_num(loss(lab, x, o['best']))}" if o else "")
        lines.append(f"| {lab} | {tuned[lab]:g} | " + " | ".join(at_tuned) + " | " + " | ".join(at_own) + " |")
    edge = [f"{lab} L={x}" for lab in labels for x, o in own.get(lab, {}).items() if not o["inside"]]
    lines += ["", ("Every best rate lies strictly inside the rates tried." if not edge else
                   f"Best rate still at the edge of the grid after the allowed extensions: {', '.join(edge)}.")]
    deep = depths[-1]
    if all(m in tuned for m in ("gct", "ngpt", "ngpt+proj")):
        def both(m: str) -> tuple[float | None, float | None]:
            o = own.get(m, {}).get(str(deep))
            return loss(m, deep, tuned[m]), (loss(m, deep, o["best"]) if o else None)

        (g, g_own), (n, n_own), (p, p_own) = both("gct"), both("ngpt"), both("ngpt+proj")
        if None not in (g, n, p, g_own, n_own, p_own):
            lines += ["", _verdict(g < n, f"at L={deep}, at the L={depths[0]}-tuned rates, GCT {g:.3f} is below nGPT {n:.3f} "  # type: ignore[operator]
                                   f"(each at its own best rate: GCT {g_own:.3f}, nGPT {n_own:.3f}).",
                                   f"at L={deep}, at the L={depths[0]}-tuned rates, GCT {g:.3f} vs nGPT {n:.3f} (each at its own "
                                   f"best rate: GCT {g_own:.3f}, nGPT {n_own:.3f})."),
                      *_before("depth_gct"),
                      "", _verdict(p < n - 0.01, f"the GCT projection improves nGPT at L={deep}: {n:.3f} -> {p:.3f} ({p - n:+.3f}; "  # type: ignore[operator]
                                   f"at each one's own best rate {n_own:.3f} -> {p_own:.3f}).",
                                   f"the GCT projection does not improve nGPT at L={deep}: {n:.3f} -> {p:.3f} ({p - n:+.3f}; at each "  # type: ignore[operator]
                                   f"one's own best rate {n_own:.3f} -> {p_own:.3f}; a gain of at least 0.01 nats counts)."),
                      *_before("depth_proj")]
    return lines + ["", f"![depth transfer]({_img('depth', budget)})", ""]


@section("fingerprint", "## 5. Fingerprint")
def fingerprint_section(d: dict[str, Any], budget: str) -> list[str]:
    lines = ["## 5. Radial fingerprint (seed 000, Prop. 6)", "",
             "Seed claim: 54 of 54 architecture-by-role predictions match across eight trained 124M models.", "",
             "| model | state | generators | gauge predicted | matches |", "| --- | --- | ---: | ---: | ---: |"]
    for v in d["entries"].values():
        lines.append(f"| {v['model']} | {v['state']} | {v['generators']} | {v['gauge']} | {v['matches']} |")
    s = d.get("summary", {})
    lines += ["", _verdict(s.get("matches") == s.get("generators"),
                            f"{s.get('matches')} of {s.get('generators')} predictions match, at initialisation and trained.",
                            f"{s.get('matches')} of {s.get('generators')} match."), *_before("fingerprint")]
    return lines + ["", f"![fingerprint]({_img('fingerprint', budget)})", ""]


def _rates(entries: dict[str, Any]) -> dict[str, float]:
    """The learning rate each model's SNR runs trained at (2e-3 in entries older than the field)."""
    return {v["model"]: v.get("lr", 2e-3) for v in entries.values()}


@section("snr_width", "## 6. SNR with width", needs="ratios")
def snr_section(d: dict[str, Any], budget: str) -> list[str]:
    e = d["entries"]
    lines = ["## 6. Dot-product SNR with width (seed 001, section 3.4)", "",
             "Seed claim (D = 4096, 3.6B): nGPT's dot-product SNR is ~7 dB above GPT's with rho_s 14x larger "
             "(1.32e-3 vs 9.31e-5); Eq. 5 predicts the ratio from rho_s with regimes at D ~ 1/rho (the advantage "
             "appears for D >> 1/rho, about 755 in the seed's measurements).", "",
             "Short-trained models (shared recipe, the same steps at every width), each at its best rate from the "
             "learning-rate experiment (" + ", ".join(f"{m} {lr:g}" for m, lr in _rates(e).items()) + "), one "
             "quantiser for all (`te` forward scaling, round-to-nearest). fprop: the GEMMs whose inputs have the "
             "model width; dgrad: dy . W over the GEMMs whose outputs have it.", "",
             "| model | width | fprop dot SNR dB | product SNR dB | gain dB | rho_s | rho_n | dgrad dot SNR dB | dgrad rho_s |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for v in e.values():
        lines.append(f"| {v['model']} | {v['width']} | {v['snr_dot_db']:.2f} | {v['snr_products_db']:.2f} | {v['gain_db']:.2f} | "
                     f"{v['rho_s']:.2e} | {v['rho_n']:.2e} | {_num(v.get('bwd_snr_dot_db'), '.2f')} | {_num(v.get('bwd_rho_s'), '.2e')} |")
    lines += ["", "| model | width | measured fprop SNR ratio vs gpt | Eq. 5 ratio | dgrad SNR ratio vs gpt | 1/rho_s (model) | 1/rho_s (gpt) |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    rows = d.get("ratios", [])
    for r in rows:
        lines.append(f"| {r['model']} | {r['width']} | {r['measured_ratio']:.3f} | {r['eq5_ratio']:.3f} | "
                     f"{_num(r.get('bwd_measured_ratio'))} | {r['1/rho_model']:.0f} | {r['1/rho_gpt']:.0f} |")
    if rows:
        above = sum(r["measured_ratio"] > 1 for r in rows)
        premise = [r for r in rows if r["1/rho_model"] < r["1/rho_gpt"]]  # rho_model > rho_gpt
        wide = [r for r in rows if r["width"] >= 512]
        premise_wide = [r for r in wide if r["1/rho_model"] < r["1/rho_gpt"]]
        gap_db = max(abs(10 * math.log10(r["measured_ratio"] / r["eq5_ratio"])) for r in rows)
        by_model = {m: [r["measured_ratio"] for r in rows if r["model"] == m] for m in dict.fromkeys(r["model"] for r in rows)}
        grows = all(xs[-1] > xs[0] for xs in by_model.values())
        trend = ", ".join(f"{m} {xs[0]:.2f} -> {xs[-1]:.2f}" for m, xs in by_model.items())
        bwd_above = sum(1 for r in rows if (r.get("bwd_measured_ratio") or 0) > 1)
        lines += ["", _verdict(above == len(rows), "the normalised models' dot products have the higher SNR at every width.",
                               f"the normalised models' fprop dot-product SNR is above gpt's in {above} of {len(rows)} (model, width) "
                               f"pairs (dgrad: {bwd_above} of {len(rows)}).")
                  + f" The seed's premise rho_GPT << rho_model holds (rho_model > rho_gpt) in {len(premise)} of {len(rows)} "
                  f"pairs, {len(premise_wide)} of {len(wide)} at widths 512 and above, where Eq. 5 would turn a correlation "
                  "gap into an SNR gap.",
                  *_before("snr_above"),
                  "", _verdict(gap_db < 2.0 and grows, f"Eq. 5 with the measured rho_s alone predicts the measured SNR ratio to within {gap_db:.2f} dB "
                               f"(largest gap; 2 dB allowed), and the ratio grows with width ({trend}).",
                               f"Eq. 5 misses the measured ratio by up to {gap_db:.2f} dB (2 dB allowed); ratio with width: {trend}."),
                  *_before("snr_eq5")]
    return lines + ["", f"![SNR with width]({_img('snr_width', budget)})", ""]


@section("pinn", "## 7. PINN units")
def pinn_section(d: dict[str, Any], budget: str) -> list[str]:
    w = d.get("worst", {})
    lines = ["## 7. PINN units (seed 000)", "",
             "Seed claim: across a 10^4 unit sweep, unit-aware loss weights with a scaled output head keep the worst "
             "relative L2 error at 0.015; equal or adaptive weights degrade for at least one rescaling.", "",
             "| method | " + " | ".join(f"X={v['X']:g}" for k, v in d["entries"].items() if k.startswith("equal")) + " | worst |",
             "| --- | " + " | ".join("---:" for k in d["entries"] if k.startswith("equal")) + " | ---: |"]
    for m in ("equal", "adaptive", "unit-aware"):
        vals = [v["rel_l2"] for k, v in d["entries"].items() if k.startswith(m + "|")]
        lines.append(f"| {m} | " + " | ".join(f"{x:.3g}" for x in vals) + f" | {w.get(m, float('nan')):.3g} |")
    lint = d.get("lint", {})
    lines += ["", f"The linter on the two aggregations: plain sum -> {lint.get('equal')}, unit-aware -> {lint.get('unit-aware') or 'no violation'}.", ""]
    ok = w.get("unit-aware", 1) < min(w.get("equal", 0), w.get("adaptive", 0))
    lines.append(_verdict(ok, f"unit-aware worst error {w.get('unit-aware', float('nan')):.3g} vs equal {w.get('equal', float('nan')):.3g} and adaptive {w.get('adaptive', float('nan')):.3g}.",
                          f"unit-aware worst error {w.get('unit-aware', float('nan')):.3g} vs equal {w.get('equal', float('nan')):.3g} and adaptive {w.get('adaptive', float('nan')):.3g}."))
    return lines + ["", f"![PINN]({_img('pinn', budget)})", ""]


@section("vision", "## 8. Vision")
def vision_section(d: dict[str, Any], budget: str) -> list[str]:
    lines = ["## 8. Vision", "", "The bundled ViT (patch embedding, learned positions, pre-LN) on generated bar images "
             "(four orientations in noise), linted, rewritten to GCT by the same pass as the language models, and trained.", "",
             "| model | violations | rules | test loss | test accuracy | last step with training loss above 0.01 |",
             "| --- | ---: | --- | ---: | ---: | ---: |"]
    for v in d["entries"].values():
        lines.append(f"| {v['model']} | {v['violations']} | {', '.join(v['rules']) or '-'} | {v['test_loss']:.3g} | "
                     f"{v['test_accuracy']:.3f} | {_settled(v['train_curve'], 0.01) if v.get('train_curve') else '-'} |")
    e = d["entries"]
    if "vit" in e and "gct" in e:
        vit, gct = e["vit"], e["gct"]
        ok = vit["violations"] > 0 and gct["violations"] == 0 and gct["test_accuracy"] >= vit["test_accuracy"] - 0.02
        said = (f"the linter flags {vit['violations']} interfaces of the ViT ({', '.join(vit['rules'])}), its rewrite "
                f"has {gct['violations']}, and the rewrite reaches test accuracy {gct['test_accuracy']:.3f} "
                f"(ViT {vit['test_accuracy']:.3f}).")
        if min(vit["test_accuracy"], gct["test_accuracy"]) == 1.0:
            said += " Both solve the task completely: it shows the path works, not that one model is better."
        if vit.get("train_curve") and gct.get("train_curve"):
            sv, sg = _settled(vit["train_curve"], 0.01), _settled(gct["train_curve"], 0.01)
            said += (f" In training, the rewrite stays below a loss of 0.01 from step {sg}, the ViT only from step {sv} "
                     "(see the plot).")
        lines += ["", f"**Shown:** {said}" if ok else f"**Not shown:** {said}"]
    return lines + ["", f"![vision]({_img('vision', budget)})", ""]


@section("rewrite_train", "## 9. Rewritten transformers models in training")
def rewrite_train_section(d: dict[str, Any], budget: str) -> list[str]:
    e = d["entries"]
    first = next(iter(e.values()))
    lines = ["## 9. Rewritten transformers models in training (issue 15)", "",
             "Three transformers architectures whose rewrites use different patterns, each built as `hf:<type>` with "
             "random weights from one seed and trained twice with the same recipe on the bundled Shakespeare "
             "characters: as it is, and after `unitcheck rewrite --to gct` (which keeps the weights and adds its "
             "dimensionless gains). BERT is built as a decoder (`is_decoder=true`: causal attention), so predicting "
             f"the next character does not see it. Learning rate {first['lr']:g}, otherwise the recipe below; "
             "validation loss is the mean over the same held-out windows for both runs.", "",
             "| architecture | pattern | model | parameters | rewrite exit | violations | val loss @50 | @150 | "
             "@300 (final) | train loss (final) | ms/step |",
             "| --- | --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for v in e.values():
        curve = dict((int(s), x) for s, x in v.get("val_curve", []))
        viol = (f"{v['violations_before']} → {v['violations_after']}" if "violations_after" in v else "")
        lines.append(
            f"| {v['arch']} | {v['pattern']} | {'rewritten (gct)' if v['form'] == 'gct' else 'original'} | "
            f"{v['parameters']:,} | {v.get('rewrite_exit', '')} | {viol} | {_num(curve.get(50))} | "
            f"{_num(curve.get(150))} | {_num(v['final_val_loss'])} | {_num(v['final_train_loss'])} | "
            f"{_num(v['ms_per_step'], '.0f')} |")
    pairs = [(a, e.get(f"{a}|original"), e.get(f"{a}|gct")) for a in dict.fromkeys(v["arch"] for v in e.values())]
    diffs = [f"{a} {g['final_val_loss'] - o['final_val_loss']:+.3f}" for a, o, g in pairs
             if o and g and o.get("final_val_loss") is not None and g.get("final_val_loss") is not None]
    lines += ["", "Final validation loss, rewritten minus original: " + ", ".join(diffs) + ". "
              "One seed per architecture and form at a tiny size: how much another seed would move each "
              "difference was not measured, and no claim about larger models follows. The violations column is "
              "the lint of the original and of the rewrite, from the rewrite's `unitcheck.json`; ms/step is wall "
              "time on the shared machine with other jobs running.", "",
              "Optimisation recipe, the same for both runs of an architecture: AdamW (0.9, 0.95), gradient clip 1, "
              "linear warm-up over the first 5% of the steps, cosine decay to 0.1x, no weight decay; the gains the "
              "rewrite adds are plain parameters trained like the others (`bench/experiments/rewrite_train.py`).", ""]
    return lines


def compute_seconds(budget: str) -> float:
    """Training and measurement time summed over every stored entry: a resumed run's wall clock
    would count only its last part."""
    total = 0.0
    for name in PAGES:
        d = _load(name, budget) or {"entries": {}}
        total += sum(float(v.get("seconds", 0.0)) for v in d["entries"].values())
    return total


def _settled(curve: list[float], level: float, window: int = 12) -> int:
    """The last step whose moving-average training loss is above ``level``: how long a run keeps
    spiking back, not just when it first gets there."""
    k = min(window, len(curve))
    means = [sum(curve[i:i + k]) / k for i in range(len(curve) - k + 1)]
    above = [i + k for i, m in enumerate(means) if m > level]
    return above[-1] if above else 0


def render(quick: bool | str) -> str:
    """Write the page for a budget (``quick``/``reduced``/``full``; a bool means quick or full).
    A reduced page is docs/results.md itself, each section marked with the budget it comes from."""
    budget = ("quick" if quick else "full") if isinstance(quick, bool) else quick
    sizes = BUDGETS[budget]
    spent = compute_seconds(budget)
    flag = {"quick": " --quick", "reduced": " --reduced", "full": ""}[budget]
    head = [
        "# Results: the seeds' headline effects at CPU scale",
        "",
        f"Generated by `python bench/experiments/run_all.py{flag}` (`make results`) from the "
        "JSON files under `docs/results/`; every number comes from the committed scripts at the committed sizes.",
        "",
    ]
    if budget == "reduced":
        head += [
            "**Reduced budget.** After issue 17 changed the protocol (one optimisation recipe for every model, "
            "bracketed learning rates, runs taken to their end beside the UVI-stopped version, nGPT with every GEMM "
            "input normalised, NVFP4 recipes matched to each model with the head in high precision, GCT's scalars in "
            "nGPT's effective-rate form, SNR to width 1024), the affected experiments were rerun at reduced sizes, "
            "which is what the shared 2-core machine allowed. Each section says which budget its numbers come from; "
            "no section below is a full-size result unless it says so. The verdicts before issue 17 (full size, old "
            "protocol) are quoted under each new one with the reason for any change; their data are in "
            "`docs/results/before_issue17/`. `make results` reruns everything at full size (many hours on 2 cores).",
            "",
        ]
    head += [
        f"Compute: one shared 2-core CPU machine, no GPU; language models at {sizes.n_layer} layers, width {sizes.n_embd}, "
        f"{sizes.n_head} heads, batch {sizes.batch_size} x {sizes.seq_len} characters, {sizes.steps} steps "
        f"({sizes.steps * sizes.batch_size * sizes.seq_len / 1e6:.2f}M characters per run) on the bundled "
        "Shakespeare text, seed 1337, unless a section says otherwise. NVFP4 is emulated. The seeds train "
        "51M-3.6B parameter models on hundreds of billions of tokens: these runs can show the direction of an "
        "effect, not its size."
        + (f" Time spent in the stored runs (summed over entries): {spent / 60:.0f} min." if spent else ""),
        "",
    ]
    body = [line for draw in SECTIONS for line in draw(budget)]
    text = "\n".join(head + body) + "\n"
    base = os.path.abspath(RESULTS)
    path = os.path.join(base, "quick", "results.md") if budget == "quick" else os.path.join(os.path.dirname(base), "results.md")
    atomic_write_text(path, text)
    return path
