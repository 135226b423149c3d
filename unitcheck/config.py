"""``[tool.unitcheck]`` in the user's pyproject.toml, found by walking up from the cwd.

Keys: ``select``, ``ignore`` (lists of codes or prefixes), ``per-module-ignores`` (module glob ->
codes), ``fail-on``, ``floor-eps``, and the ``declare`` table (parameter glob -> unit string).
"""

from __future__ import annotations

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
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{path}: [tool.unitcheck] {key} must be a list of rule codes")
    return value


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
    table = data.get("tool", {}).get("unitcheck", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.unitcheck] must be a table")
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
    if fail_on not in ("error", "warning", "never"):
        raise ConfigError(f"{path}: fail-on must be error, warning or never, not {fail_on!r}")
    cfg.fail_on = fail_on
    if "floor-eps" in table:
        if not isinstance(table["floor-eps"], (int, float)) or table["floor-eps"] < 0:
            raise ConfigError(f"{path}: floor-eps must be a non-negative number")
        cfg.floor_eps = float(table["floor-eps"])
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
