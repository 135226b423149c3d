"""Baselines for CI ratchets: record violations by stable fingerprint, fail only on new ones.

A fingerprint is (rule, module path, op, role), not node numbers, so it survives retracing and
unrelated edits; the file stores a multiset (two residual adds in one block are two entries).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from typing import Any

from .errors import UnitcheckError
from .fsutil import atomic_write_text
from .validate import InputError, read_json

__all__ = ["BaselineError", "write_baseline", "read_baseline", "apply_baseline", "BASELINE_VERSION"]

BASELINE_VERSION = 1


class BaselineError(UnitcheckError, ValueError):
    """A baseline file that is missing, not JSON, or not a unitcheck baseline."""


def _entry(v: Any) -> dict[str, Any]:
    return {"fingerprint": v.fingerprint, "rule": v.rule, "module": v.module, "op": v.op, "message": v.message}


def write_baseline(report: Any, path: str) -> None:
    data = {
        "unitcheck_baseline": BASELINE_VERSION,
        "model": report.model,
        "violations": sorted((_entry(v) for v in report.violations), key=lambda e: (e["rule"], e["module"], e["fingerprint"])),
    }
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")


def read_baseline(path: str) -> list[dict[str, Any]]:
    try:
        data = read_json(path, "a unitcheck baseline (unitcheck lint --write-baseline)")
    except InputError as err:
        raise BaselineError(f"baseline {err}") from None
    if not isinstance(data, dict) or data.get("unitcheck_baseline") != BASELINE_VERSION:
        raise BaselineError(f"{path} is not a unitcheck baseline (version {BASELINE_VERSION})")
    entries = data.get("violations")
    if not isinstance(entries, list) or not all(isinstance(e, dict) and isinstance(e.get("fingerprint"), str) for e in entries):
        raise BaselineError(f"baseline {path}: 'violations' must be a list of entries with a fingerprint")
    return entries


def apply_baseline(report: Any, path: str) -> tuple[Any, list[str]]:
    """The report restricted to new violations, and descriptions of the fixed ones."""
    entries = read_baseline(path)
    remaining = Counter(e["fingerprint"] for e in entries)
    new = []
    for v in report.violations:
        if remaining[v.fingerprint] > 0:
            remaining[v.fingerprint] -= 1
        else:
            new.append(v)
    fixed: list[str] = []
    for e in entries:
        if remaining[e["fingerprint"]] > 0:
            remaining[e["fingerprint"]] -= 1
            fixed.append(f"{e.get('rule')} {e.get('module') or '<root>'} {e.get('op')}")
    return replace(report, violations=new), fixed
