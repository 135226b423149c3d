"""Run every experiment (resumable) and write docs/results.md from their JSON files.

    python bench/experiments/run_all.py            # full sizes (many hours of runs on 2 cores)
    python bench/experiments/run_all.py --reduced  # the same protocol at reduced sizes (results/reduced/)
    python bench/experiments/run_all.py --quick    # tiny sizes in minutes (a slow test runs this)
    python bench/experiments/run_all.py --only pinn vision
    python bench/experiments/run_all.py --device cuda   # one GPU: bf16 in place of fp32, NVFP4
                                                        # through Transformer Engine where available
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

EXPERIMENTS = ["lr_robustness", "ptq", "depth", "fingerprint_exp", "snr_width", "pinn", "vision", "rewrite_train"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reduced", action="store_true", help="reduced sizes, results under docs/results/reduced/; "
                    "the page marks every section drawn from them")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (bf16 autocast for the fp32 rows; NVFP4 "
                    "through Transformer Engine where it is installed and supports the GPU)")
    ap.add_argument("--only", nargs="+", choices=EXPERIMENTS)
    ap.add_argument("--render-only", action="store_true", help="only regenerate the page from existing results")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (two 1-thread runs of different "
                    "experiments use 2 cores better than one 2-thread run)")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(max(1, args.threads))
    import common

    if args.reduced:
        common.set_budget("reduced")
    common.set_device(args.device)
    if not args.render_only:
        for name in args.only or EXPERIMENTS:
            print(f"== {name}", flush=True)
            importlib.import_module(name).run(args.quick)
    from render import render

    path = render(common.budget(args.quick))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
