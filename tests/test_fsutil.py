"""Atomic writes keep the permissions a plain write would give, and leave nothing half-written."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from unitcheck.fsutil import atomic_write, atomic_write_text


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_new_file_gets_the_umask_mode(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "report.json", "{}")
        (tmp_path / "plain.json").write_text("{}")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "report.json") == _mode(tmp_path / "plain.json") == 0o644


def test_replacing_keeps_the_existing_mode(tmp_path: Path) -> None:
    target = tmp_path / "baseline.json"
    target.write_text("old")
    target.chmod(0o640)
    atomic_write_text(target, "new")
    assert target.read_text() == "new" and _mode(target) == 0o640


def test_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "ckpt.bin"
    target.write_bytes(b"good")

    def boom(fh: object) -> None:
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(target, boom, binary=True)
    assert target.read_bytes() == b"good"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.bin"]
