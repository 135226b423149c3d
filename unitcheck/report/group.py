"""Grouping of findings that repeat per layer (issue 16), for the human-facing formats.

A 32-layer model repeats the same few findings in every block; reading 129 near-identical blocks
hides the four facts behind them. Findings fall in one group when they share the rule, the op, the
source line and the unit pattern *up to the layer index*: numeric components of dotted names
(``model.layers.3.mlp`` -> ``model.layers.{i}.mlp``) and the counter FX appends to node names in
opaque generators (``v:add_12`` -> ``v:add_{n}``) are normalised away.

>>> pattern("p:model.layers.3.mlp.up_proj.weight · v:silu_3")
'p:model.layers.{i}.mlp.up_proj.weight · v:silu_{n}'
>>> index_span(["model.layers.0", "model.layers.1", "model.layers.2", "model.layers.5"])
'model.layers.{0..2,5}'

Grouping is presentation only: JSON, JUnit and baselines keep every finding, SARIF keeps every
finding and links a group's members through ``relatedLocations``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ..diagnostics import Violation

__all__ = ["Group", "group_findings", "singletons", "pattern", "index_span", "finding_keys", "layer_index",
           "compact_names"]

_DOTTED = re.compile(r"\b[A-Za-z_]\w*(?:\.\w+)+")
_NUMERIC_PART = re.compile(r"(?<=\.)\d+(?=\.|$)")
_OPAQUE = re.compile(r"\bv:([A-Za-z_]\w*?)(?:_\d+)?\b")
INDEX = "{i}"


def _dotted(match: re.Match[str]) -> str:
    return _NUMERIC_PART.sub(INDEX, match.group(0))


def pattern(text: str) -> str:
    """``text`` with layer indices in dotted names and FX counters in ``v:`` names normalised."""
    return _DOTTED.sub(_dotted, _OPAQUE.sub(r"v:\1_{n}", text))


def _unit_pattern(unit: Any) -> tuple[tuple[str, Fraction], ...] | str:
    """A unit's generators normalised and re-sorted (``layers.10`` sorts before ``layers.9``)."""
    items = getattr(unit, "items", None)
    if items is None:
        return pattern(str(unit))
    acc: dict[str, Fraction] = {}
    for gen, exp in items():
        key = pattern(gen)
        acc[key] = acc.get(key, Fraction(0)) + exp
    return tuple(sorted(acc.items()))


def _compress(values: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0..2,5``."""
    runs: list[str] = []
    start = prev = values[0]
    for v in [*values[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        runs.append(str(start) if start == prev else f"{start}..{prev}")
        if v is not None:
            start = prev = v
    return ",".join(runs)


def index_span(paths: Sequence[str]) -> str:
    """One dotted path standing for all of ``paths`` (which share a pattern): each numeric
    component that varies becomes the range of its values, e.g. ``model.layers.{0..31}``."""
    if not paths:
        return ""
    first = paths[0]
    numbers = [[int(m) for m in _NUMERIC_PART.findall(p)] for p in paths]
    if len({len(n) for n in numbers}) != 1 or len(set(map(pattern, paths))) != 1:
        return pattern(first)
    columns = list(zip(*numbers, strict=True))
    pieces = iter(columns)

    def fill(_: re.Match[str]) -> str:
        col = sorted(set(next(pieces)))
        return str(col[0]) if len(col) == 1 else "{" + _compress(col) + "}"

    return _NUMERIC_PART.sub(fill, first)


_COUNTER = re.compile(r"^(?P<base>.*?)_(?P<n>\d+)$")


def _progressions(nums: Sequence[int]) -> list[str]:
    """Maximal arithmetic runs of three or more: ``[14, 20, 26, 31]`` -> ``14..26 step 6, 31``."""
    out: list[str] = []
    i = 0
    while i < len(nums):
        step = nums[i + 1] - nums[i] if i + 1 < len(nums) else 0
        j = i + 1
        while step > 0 and j + 1 < len(nums) and nums[j + 1] - nums[j] == step:
            j += 1
        if step > 0 and j - i >= 2:
            out.append(f"{nums[i]}..{nums[j]}" + (f" step {step}" if step > 1 else ""))
            i = j + 1
        else:
            out.append(str(nums[i]))
            i += 1
    return out


def compact_names(names: Sequence[str]) -> str:
    """Node names with FX counters folded into ranges, exactly and in order:
    ``add_14, add_20, add_26`` -> ``add_{14..26 step 6}``.

    >>> compact_names(["silu", "silu_1", "silu_2", "silu_3", "gelu_7"])
    'silu, silu_{1..3}, gelu_7'
    """
    runs: list[tuple[str, list[int]]] = []
    plain: list[str | None] = []
    for name in names:
        m = _COUNTER.match(name)
        if m and runs and plain[-1] is None and runs[-1][0] == m["base"]:
            runs[-1][1].append(int(m["n"]))
        elif m:
            runs.append((m["base"], [int(m["n"])]))
            plain.append(None)
        else:
            runs.append((name, []))
            plain.append(name)
    out: list[str] = []
    for (base, nums), literal in zip(runs, plain, strict=True):
        if literal is not None:
            out.append(literal)
            continue
        parts = _progressions(nums)
        out.append(f"{base}_{parts[0]}" if len(nums) == 1 else f"{base}_{{{', '.join(parts)}}}")
    return ", ".join(out)


def layer_index(module: str) -> int | None:
    """The first numeric component of a module path (``model.layers.3.mlp`` -> 3), else None."""
    m = _NUMERIC_PART.search(module)
    return int(m.group(0)) if m else None


def finding_keys(violations: Iterable[Violation]) -> list[str]:
    """A key per finding, unique in a report and stable across traces: the fingerprint plus its
    occurrence number (two residual adds in one block share a fingerprint). SARIF's
    ``partialFingerprints`` and the HTML report's anchors and explanation hook use it."""
    seen: dict[str, int] = {}
    out = []
    for v in violations:
        n = seen[v.fingerprint] = seen.get(v.fingerprint, 0) + 1
        out.append(f"{v.fingerprint}:{n}")
    return out


@dataclass(frozen=True)
class Group:
    """Findings that differ only in their layer; ``members[0]`` is the example shown in full."""

    members: tuple[Violation, ...]
    keys: tuple[str, ...]  # finding_keys of the members, in the same order

    @property
    def example(self) -> Violation:
        return self.members[0]

    @property
    def rule(self) -> str:
        return self.example.rule

    @property
    def severity(self) -> str:
        return self.example.severity

    @property
    def count(self) -> int:
        return len(self.members)

    @property
    def span(self) -> str:
        """The module paths of all members as one path with index ranges."""
        if self.count == 1:
            return self.example.module or "<root>"
        return index_span([v.module for v in self.members]) or "<root>"

    @property
    def message(self) -> str:
        """The example's message, with layer indices normalised when the group has several."""
        return self.example.message if self.count == 1 else pattern(self.example.message)


def _key(v: Violation) -> tuple[Any, ...]:
    loc = v.location
    units = tuple((role, _unit_pattern(u)) for role, u in v.units.items())
    return (v.rule, v.op, loc.file if loc else None, loc.line if loc else None, pattern(v.module), units)


def group_findings(violations: Sequence[Violation]) -> list[Group]:
    """Groups in the order of their first member (topological order of the graph)."""
    keys = finding_keys(violations)
    buckets: dict[tuple[Any, ...], list[int]] = {}
    for i, v in enumerate(violations):
        buckets.setdefault(_key(v), []).append(i)
    return [Group(tuple(violations[i] for i in idx), tuple(keys[i] for i in idx)) for idx in buckets.values()]


def singletons(violations: Sequence[Violation]) -> list[Group]:
    """One group per finding (``--no-group``)."""
    return [Group((v,), (k,)) for v, k in zip(violations, finding_keys(violations), strict=True)]
