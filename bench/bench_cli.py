"""Command-line costs (issue 3): start-up without torch, lint of the bundled gpt against the cost of
importing torch, and a Llama-2-7B-shaped hf:llama linted on the meta device (time, peak memory).

    python bench/bench_cli.py [--skip-7b]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

LLAMA_7B = ["--set", "hidden_size=4096", "--set", "num_hidden_layers=32", "--set", "intermediate_size=11008",
            "--set", "vocab_size=32000", "--set", "num_attention_heads=32"]


def timed(cmd: list[str], repeat: int = 3) -> tuple[float, int]:
    times = []
    rc = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        rc = subprocess.run(cmd, capture_output=True, text=True).returncode
        times.append(time.perf_counter() - t0)
    return statistics.median(times), rc


def peak_child_mb(cmd: list[str]) -> tuple[float, float, int]:
    """Wall time and peak RSS of one child process (ru_maxrss of RUSAGE_CHILDREN, in a fresh
    interpreter so earlier children do not count)."""
    probe = (
        "import resource, subprocess, sys, time\n"
        f"t = time.perf_counter(); rc = subprocess.run({cmd!r}, capture_output=True).returncode\n"
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, rc)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.split()
    return float(out[0]), float(out[1]), int(out[2])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-7b", action="store_true")
    args = ap.parse_args()
    uc = [sys.executable, "-m", "unitcheck"]
    print(f"{'command':<44} {'wall s':>8}  exit")
    for argv in (["--help"], ["rules"], ["rule", "UC201"]):
        t, rc = timed(uc + argv, repeat=5)
        print(f"{'unitcheck ' + ' '.join(argv):<44} {t:>8.3f}  {rc}")
    t_torch, _ = timed([sys.executable, "-c", "import torch"], repeat=5)
    t_lint, rc = timed(uc + ["lint", "gpt"], repeat=3)
    label = 'python -c "import torch"'
    print(f"{label:<44} {t_torch:>8.3f}")
    print(f"{'unitcheck lint gpt':<44} {t_lint:>8.3f}  {rc}")
    print(f"lint gpt / import torch: {t_lint / t_torch:.2f}x")
    if not args.skip_7b:
        wall, peak, rc = peak_child_mb(uc + ["lint", "hf:llama", *LLAMA_7B])
        print(f"{'unitcheck lint hf:llama (Llama-2-7B shape)':<44} {wall:>8.1f}  {rc}   peak RSS {peak:.0f} MB")
        print("budget (<120 s, <3 GB): " + ("met" if wall < 120 and peak < 3072 else "NOT met"))


if __name__ == "__main__":
    main()
