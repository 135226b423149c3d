"""Experiment 9: rewritten transformers models train (issue 15). Three architectures whose
rewrites use different patterns (parallel attention + MLP blocks, an MoE router and experts, an
encoder with embedding sums, post-LN blocks and an MLM head) are trained as they are and after
``unitcheck rewrite --to gct``, with one recipe, on the bundled corpus; the losses go in a table.

    python bench/experiments/rewrite_train.py [--quick | --reduced]

Each model is ``hf:<type>`` at unitcheck's small default size (2 layers, width 64, 4 heads,
vocabulary 128, random weights from one seed); the rewrite keeps those weights, so both runs of
an architecture start from the same matrices. BERT is built as a decoder (``is_decoder=true``:
causal attention) so that next-character prediction does not see the character it predicts.
"""

from __future__ import annotations

import json
import os
from typing import Any

from common import RECIPE, Store, main, runs_dir, sizes_for, train_run

# type -> (the pattern its rewrite exercises, extra config fields)
ARCHS: dict[str, tuple[str, str]] = {
    "falcon": ("parallel attention + MLP blocks", ""),
    "mixtral": ("MoE router and experts", ""),
    "bert": ("encoder: embedding sum, post-LN, MLM head", "is_decoder=true"),
}
STEPS = 300  # the budget, at every size but quick
QUICK_STEPS = 4
PROTOCOL = "issue15"


def rewrite_dir(arch: str, sets: str, out: str) -> dict[str, Any]:
    """``unitcheck rewrite hf:<arch> --out OUT`` as a user runs it: its exit code and the lint
    before and after from the unitcheck.json it writes."""
    import contextlib
    import io

    from unitcheck.cli import main as cli

    args = ["rewrite", f"hf:{arch}", "--out", out, "--partial"]
    for kv in filter(None, sets.split(",")):
        args += ["--set", kv]
    with contextlib.redirect_stdout(io.StringIO()):
        code = cli(args)
    with open(os.path.join(out, "unitcheck.json")) as fh:
        manifest = json.load(fh)
    return {"rewrite_exit": code, "violations_before": manifest["lint"]["before"]["violations"],
            "violations_after": manifest["lint"]["after"]["violations"]}


def _params(model: Any) -> int:
    return sum(p.numel() for p in model.parameters()) if model is not None else 0


def run(quick: bool) -> dict[str, Any]:
    import shutil

    sizes = sizes_for(quick)
    steps = QUICK_STEPS if quick else STEPS
    store = Store("rewrite_train", quick)
    base = os.path.join(runs_dir(quick), "rewrite_train")
    for arch, (pattern, sets) in ARCHS.items():
        for form in ("original", "gct"):
            def job(arch: str = arch, pattern: str = pattern, sets: str = sets, form: str = form) -> dict[str, Any]:
                out = os.path.join(base, f"{arch}_{form}")
                info: dict[str, Any] = {}
                model = f"hf:{arch}"
                if form == "gct":
                    model = os.path.join(base, f"{arch}_rewrite")
                    shutil.rmtree(model, ignore_errors=True)
                    info = rewrite_dir(arch, sets, model)
                metrics, trained = train_run(model, sizes, out, steps=steps, eval_interval=max(1, steps // 6),
                                             checkpoint_interval=steps, model_set=sets if form == "original" else "")
                metrics.pop("uvi_curve", None)
                return {"arch": arch, "pattern": pattern, "form": form, "set": sets, "parameters": _params(trained),
                        "steps_planned": steps, "seq_len": sizes.seq_len, "batch_size": sizes.batch_size,
                        "lr": 2e-3, "recipe": RECIPE, "protocol": PROTOCOL, **info, **metrics}

            store.get_or_run(f"{arch}|{form}", job, protocol=PROTOCOL, steps_planned=steps)
    return store.data["entries"]  # type: ignore[no-any-return]


if __name__ == "__main__":
    main(run)
