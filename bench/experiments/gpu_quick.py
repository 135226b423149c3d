"""The GPU check of issue 17: SNR with width and the NVFP4 comparison at widths 1024-4096 on one
GPU, sized to finish in about ten minutes on one H200 (not yet run on one: see docs/results.md).

For each width and model (gpt, ngpt, gct), one short bf16 run and one NVFP4 run with the model's
own recipe (Transformer Engine's kernels where it is installed and the GPU supports NVFP4, the
emulation otherwise), same data order; from the bf16 run, the fprop and dgrad dot-product SNR
and rho_s as snr_width measures them. Results go to docs/results/gpu/gpu_quick.json.

    bench/experiments/gpu_quick.sh                                   # the GPU run
    DEVICE=cpu WIDTHS="32 64" STEPS=3 bench/experiments/gpu_quick.sh --layers 1 --seq 16 --batch 2
                                                                     # the CPU smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

from common import Sizes, Store, nvfp4_recipe, set_device, train_run, val_batch

MODELS = ["gpt", "ngpt", "gct"]


def measure(label: str, sizes: Sizes, steps_dir: str, lr: float) -> dict[str, Any]:
    """bf16 (fp32 on a CPU) and NVFP4 runs of one model at one width, and the SNR of the first."""
    from snr_width import backward_rows

    from unitcheck.diagnose.capture import capture
    from unitcheck.diagnose.snr import layer_rows

    width = sizes.n_embd
    t0 = time.perf_counter()
    hp, model = train_run(label, sizes, os.path.join(steps_dir, f"{label}_{width}_hp"), lr=lr)
    t_hp = time.perf_counter() - t0
    t0 = time.perf_counter()
    nv, _ = train_run(label, sizes, os.path.join(steps_dir, f"{label}_{width}_nvfp4"), lr=lr,
                      precision="nvfp4", nvfp4_recipe=nvfp4_recipe(label))
    t_nv = time.perf_counter() - t0
    out: dict[str, Any] = {"model": label, "width": width, "lr": lr, "steps": sizes.steps,
                           "hp_loss": hp["final_val_loss"], "nvfp4_loss": nv["final_val_loss"],
                           "nvfp4_recipe": nvfp4_recipe(label), "hp_seconds": t_hp, "nvfp4_seconds": t_nv}
    if hp["final_val_loss"] and nv["final_val_loss"]:
        out["relative_error"] = (nv["final_val_loss"] - hp["final_val_loss"]) / hp["final_val_loss"]
    if model is not None:
        model = model.float()
        batch = tuple(t.to(next(model.parameters()).device) for t in val_batch(sizes, batch=4))
        cap = capture(model, batch)
        fwd = [r for r in layer_rows(cap.linears, cap.values, "te") if r["D"] == width]
        bwd = backward_rows(model, batch, width)
        out.update({"snr_dot_db": statistics.mean(r["snr_dot_db"] for r in fwd),
                    "rho_s": statistics.mean(r["rho_s"] for r in fwd),
                    "bwd_snr_dot_db": statistics.mean(r["snr_dot_db"] for r in bwd) if bwd else None})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--widths", type=int, nargs="+", default=[1024, 2048, 4096])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--models", nargs="+", default=MODELS)
    args = ap.parse_args()
    set_device(args.device)
    store = Store("gpu_quick", quick=False, subdir="gpu")
    store.set("settings", {**vars(args), "started": time.strftime("%Y-%m-%d %H:%M:%S")})
    t_start = time.perf_counter()
    for width in args.widths:
        sizes = Sizes(n_layer=args.layers, n_embd=width, n_head=max(2, width // 128), seq_len=args.seq,
                      batch_size=args.batch, steps=args.steps, eval_batches=2)
        for label in args.models:
            store.get_or_run(f"{label}|{width}", lambda label=label, sizes=sizes: measure(
                label, sizes, os.path.join("runs", "gpu_quick"), args.lr), steps=args.steps, device=args.device)
    store.set("wall_seconds", time.perf_counter() - t_start)
    print(f"{'model':<6} {'width':>6} {'hp loss':>8} {'nvfp4':>8} {'rel err':>8} {'SNR dB':>7} {'rho_s':>9}")
    def num(x: float | None, fmt: str) -> str:
        return "div" if x is None else format(x, fmt)  # a diverged run has no loss

    for v in store.data["entries"].values():
        rel = v.get("relative_error")
        print(f"{v['model']:<6} {v['width']:>6} {num(v['hp_loss'], '.3f'):>8} {num(v['nvfp4_loss'], '.3f'):>8} "
              f"{num(None if rel is None else 100 * rel, '.2f'):>7}% {num(v.get('snr_dot_db'), '.2f'):>7} "
              f"{num(v.get('rho_s'), '.2e'):>9}")
    print(json.dumps({"wall_seconds": round(store.data["wall_seconds"], 1), "json": store.path}))


if __name__ == "__main__":
    main()
