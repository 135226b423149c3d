"""``[tool.unitcheck]`` in the user's pyproject.toml, found by walking up from the cwd.

Keys: ``select``, ``ignore`` (lists of codes or prefixes), ``per-module-ignores`` (module glob ->
codes), ``fail-on``, ``floor-eps``, and the ``declare`` table (parameter glob -> unit string).
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from .errors import UnitcheckError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["Config", "ConfigError", "find_pyproject", "load_config"]


class ConfigError(UnitcheckError, ValueError):
    """A malformed pyproject.toml or [tool.unitcheck] table."""


@dataclass
class Config:
    path: str | None = None
    select: list[str] | None = None
    ignore: list[str] = field(default_factory=list)
    per_module_ignores: dict[str, list[str]] = field(default_factory=dict)
    fail_on: str = "error"
    floor_eps: float | None = None
    declare: dict[str, str] = field(default_factory=dict)


def find_pyproject(start: str | None = None) -> str | None:
    d = os.path.abspath(start or os.getcwd())
    while True:
        cand = os.path.join(d, "pyproject.toml")
        if os.path.isfile(cand):
            return cand
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


def _codes(value: Any, key: str, path: str) -> list[str]:
    """A non-empty list of known rule codes or prefixes (``UC2`` selects UC201..UC204)."""
    from .codes import CODES

    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{path}: [tool.unitcheck] {key} must be a list of rule codes such as [\"UC201\"]")
    codes = [v.strip().upper() for v in value if v.strip()]
    if not codes:
        raise ConfigError(f"{path}: [tool.unitcheck] {key} names no rule code: list codes such as "
                          "[\"UC201\"] or remove the key")
    for c in codes:
        if c != "ALL" and not any(k.startswith(c) for k in CODES):
            raise ConfigError(f"{path}: [tool.unitcheck] {key}: unknown rule code or prefix {c!r}; "
                              "`unitcheck rules` lists them")
    return codes


def _table(data: Any, path: str) -> dict[str, Any]:
    """``[tool.unitcheck]``; ``tool`` and the table itself must be tables when present."""
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(f"{path}: 'tool' must be a table ([tool.unitcheck]), not {type(tool).__name__}")
    table = tool.get("unitcheck", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.unitcheck] must be a table, not {type(table).__name__}")
    return table


def load_config(path: str | None = None, search: bool = True) -> Config:
    """Read [tool.unitcheck]; ``path`` overrides the search. A missing table is the defaults."""
    if path is None and search:
        path = find_pyproject()
    if path is None:
        return Config()
    if not os.path.isfile(path):
        raise ConfigError(f"config file not found: {path}")
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: malformed TOML: {err}") from None
    table = _table(data, path)
    known = {"select", "ignore", "per-module-ignores", "fail-on", "floor-eps", "declare"}
    unknown = set(table) - known
    if unknown:
        raise ConfigError(f"{path}: unknown [tool.unitcheck] key(s): {', '.join(sorted(unknown))}")
    cfg = Config(path=path)
    if "select" in table:
        cfg.select = _codes(table["select"], "select", path)
    if "ignore" in table:
        cfg.ignore = _codes(table["ignore"], "ignore", path)
    pmi = table.get("per-module-ignores", {})
    if not isinstance(pmi, dict):
        raise ConfigError(f"{path}: per-module-ignores must map module globs to code lists")
    cfg.per_module_ignores = {k: _codes(v, f"per-module-ignores.{k}", path) for k, v in pmi.items()}
    fail_on = table.get("fail-on", "error")
    if not isinstance(fail_on, str) or fail_on not in ("error", "warning", "never"):
        raise ConfigError(f"{path}: fail-on must be error, warning or never, not {fail_on!r}")
    cfg.fail_on = fail_on
    if "floor-eps" in table:
        eps = table["floor-eps"]
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
            raise ConfigError(f"{path}: floor-eps must be a finite non-negative number such as 1e-3, not {eps!r}")
        cfg.floor_eps = float(eps)
    decl = table.get("declare", {})
    if not isinstance(decl, dict) or not all(isinstance(v, str) for v in decl.values()):
        raise ConfigError(f"{path}: [tool.unitcheck.declare] must map parameter globs to unit strings")
    from .units import Unit, UnitParseError

    for k, v in decl.items():
        try:
            Unit.parse(v)
        except UnitParseError as err:
            raise ConfigError(f"{path}: [tool.unitcheck.declare] {k!r}: {err}") from None
    cfg.declare = dict(decl)
    return cfg
