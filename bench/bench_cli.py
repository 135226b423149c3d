"""Command-line costs (issues 3 and 16): start-up without torch, lint of the bundled gpt against the
cost of importing torch, hf:llama at Llama-2-7B's and Llama-2-70B's shapes linted on the meta
device and `explain` of the 70B shape's first UC201, interleaved in one run (time, peak memory,
the 70B/7B and explain/lint ratios), and the cost of grouping, rendering (text, github, html with
its provenance trees) and explaining the 70B report's findings.

    python bench/bench_cli.py [--skip-7b] [--skip-70b] [--rounds 2]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

LLAMA_7B = {"hidden_size": 4096, "num_hidden_layers": 32, "intermediate_size": 11008, "vocab_size": 32000,
            "num_attention_heads": 32}
LLAMA_70B = {"hidden_size": 8192, "num_hidden_layers": 80, "intermediate_size": 28672, "vocab_size": 32000,
             "num_attention_heads": 64, "num_key_value_heads": 8}
RATIO_BUDGET = 2.8  # 70B lint time over 7B lint time, same run (issue 16)
RSS_BUDGET_MB = 1024
EXPLAIN_BUDGET = 1.5  # explain of one finding over lint, 70B shape, same run (issue 16)
EXPLAIN_FINDING = "UC201"  # its first finding: the attention logits of layer 0


def sets(shape: dict[str, int]) -> list[str]:
    return [arg for k, v in shape.items() for arg in ("--set", f"{k}={v}")]


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
    ap.add_argument("--skip-70b", action="store_true")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved lint runs per shape (median)")
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
    jobs: dict[str, list[str]] = {}
    if not args.skip_7b:
        jobs["lint 7B"] = uc + ["lint", "hf:llama", *sets(LLAMA_7B)]
    if not args.skip_70b:
        jobs["lint 70B"] = uc + ["lint", "hf:llama", *sets(LLAMA_70B)]
        jobs["explain 70B"] = uc + ["explain", "hf:llama", *sets(LLAMA_70B), EXPLAIN_FINDING]
    runs: dict[str, list[tuple[float, float, int]]] = {name: [] for name in jobs}
    for _ in range(args.rounds):  # interleaved, so every command sees the same machine load
        for name, cmd in jobs.items():
            runs[name].append(peak_child_mb(cmd))
    for name, got in runs.items():
        wall = statistics.median(w for w, _, _ in got)
        peak = max(p for _, p, _ in got)
        codes = sorted({c for _, _, c in got})
        what, shape = name.split()
        label = f"unitcheck {what} hf:llama (Llama-2-{shape} shape)"
        print(f"{label:<44} {wall:>8.1f}  {','.join(map(str, codes))}"
              f"   peak RSS {peak:.0f} MB   (runs: {', '.join(f'{w:.1f}' for w, _, _ in got)} s)")

    def median(name: str) -> float:
        return statistics.median(w for w, _, _ in runs[name])

    if "lint 7B" in runs and "lint 70B" in runs:
        ratio = median("lint 70B") / median("lint 7B")
        peak70 = max(p for _, p, _ in runs["lint 70B"])
        print(f"70B / 7B lint time: {ratio:.2f}x; budget (<= {RATIO_BUDGET}x, 70B peak < {RSS_BUDGET_MB} MB): "
              + ("met" if ratio <= RATIO_BUDGET and peak70 < RSS_BUDGET_MB else "NOT met"))
    if "explain 70B" in runs:
        ratio = median("explain 70B") / median("lint 70B")
        print(f"70B explain {EXPLAIN_FINDING} / 70B lint time: {ratio:.2f}x; budget (<= {EXPLAIN_BUDGET}x): "
              + ("met" if ratio <= EXPLAIN_BUDGET else "NOT met"))
    if not args.skip_70b:
        grouping_row(LLAMA_70B)


def grouping_row(shape: dict[str, int], repeat: int = 5) -> None:
    """Grouping plus rendering, in process, on the 70B report (lint is not counted)."""
    from unitcheck.linter import lint
    from unitcheck.loader import load_model
    from unitcheck.report import render
    from unitcheck.report.group import group_findings

    loaded = load_model("hf:llama", shape, None, device="meta")
    report = lint(loaded.model, loaded.inputs, name=loaded.name)
    n, groups = len(report.violations), len(group_findings(report.violations))
    for fmt in ("text", "github", "html"):
        times, size = [], 0
        for _ in range(repeat):
            t0 = time.perf_counter()
            size = len(render(report, fmt))
            times.append(time.perf_counter() - t0)
        print(f"{'group + render ' + fmt + ' (70B report)':<44} {statistics.median(times) * 1000:>8.1f}  ms"
              f"   {n} findings in {groups} groups, {size / 1024:.0f} KiB")
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        group_findings(report.violations)
        times.append(time.perf_counter() - t0)
    print(f"{'group_findings alone (70B report)':<44} {statistics.median(times) * 1000:>8.1f}  ms")
    explain_rows(report)


def explain_rows(report: object) -> None:
    """The provenance pass on a fresh graph, then the tree of every finding built and printed
    (what the HTML report's folded blocks cost), in process; lint is not counted."""
    from unitcheck.explain import KEY, explain_finding, provenance, render_text
    from unitcheck.report.group import finding_keys

    ug = report.unit_graph  # type: ignore[attr-defined]
    for n in ug.graph.nodes:
        n.meta.pop(KEY, None)
    t0 = time.perf_counter()
    provenance(ug)
    t_pass = time.perf_counter() - t0
    print(f"{'provenance pass (70B graph, ' + str(len(ug.graph.nodes)) + ' nodes)':<44} {t_pass * 1000:>8.1f}  ms")
    violations = report.violations  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    lines = 0
    for v, k in zip(violations, finding_keys(violations), strict=True):
        lines += len(render_text(explain_finding(ug, v, k)).splitlines())
    t_all = time.perf_counter() - t0
    print(f"{'explain every finding (70B report)':<44} {t_all * 1000:>8.1f}  ms"
          f"   {len(violations)} trees, {lines} lines")


if __name__ == "__main__":
    main()
