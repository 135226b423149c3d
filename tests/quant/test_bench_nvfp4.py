"""The NVFP4 benchmark's kernel table runs and times every kernel it names, warm and cold."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_nvfp4  # noqa: E402


def test_the_kernel_table_times_each_kernel_warm_and_cold(capsys: pytest.CaptureFixture[str]) -> None:
    bench_nvfp4.kernels(2)
    lines = capsys.readouterr().out.strip().splitlines()
    rows = [re.search(r"warm\s+([\d.]+) ms\s+cold\s+([\d.]+) ms", line) for line in lines[1:]]
    assert len(rows) == 6 and all(rows)
    assert all(float(m.group(1)) > 0 and float(m.group(2)) > 0 for m in rows if m)
    assert "rounding, stochastic" in lines[5] and "x.clone()" in lines[6]
