"""Unit declarations for leaves (SPEC 2).

Precedence, lowest first: the default policy (every weight a unit variable, bound lazily), glob
patterns from ``[tool.unitcheck.declare]``, a module's ``__units__`` class attribute (names
relative to the module, globs allowed), ``declare(module, ...)``, ``declare(parameter, ...)``.

>>> class Block(nn.Module):                       # doctest: +SKIP
...     __units__ = {"alpha": "1", "attn.gain": "1"}   # dimensionless by design
>>> unitcheck.declare(model.lm_head.weight, "1")  # doctest: +SKIP
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.weak import WeakIdKeyDictionary

from .units import Unit, UnitParseError

__all__ = ["declare", "undeclare", "resolve_declarations", "as_unit"]

_PARAM_DECLS: WeakIdKeyDictionary = WeakIdKeyDictionary()
_MODULE_DECLS: WeakIdKeyDictionary = WeakIdKeyDictionary()


def as_unit(value: str | Unit, what: str = "unit") -> Unit:
    """A Unit from a Unit or a unit string; a clear ValueError otherwise."""
    if isinstance(value, Unit):
        return value
    if isinstance(value, (int, float)) and value == 1:
        return Unit()
    if not isinstance(value, str):
        raise UnitParseError(f"{what}: expected a unit string such as '1' or 'p:w^-1/2 * in:x', got {value!r}")
    try:
        return Unit.parse(value)
    except UnitParseError as err:
        raise UnitParseError(f"{what}: {err}") from None


def declare(target: nn.Module | torch.Tensor, unit: str | Unit | Mapping[str, str | Unit]) -> Any:
    """Declare the unit of a parameter/buffer, of every parameter under a module, or of named
    parameters of a module (a mapping of relative names or globs to units). Returns ``target``."""
    if isinstance(target, nn.Module):
        if isinstance(unit, Mapping):
            decl = {str(k): as_unit(v, f"declaration {k!r}") for k, v in unit.items()}
        else:
            decl = {"*": as_unit(unit, "declaration")}
        merged = dict(_MODULE_DECLS.get(target, {}))
        merged.update(decl)
        _MODULE_DECLS[target] = merged
    elif isinstance(target, torch.Tensor):
        if isinstance(unit, Mapping):
            raise ValueError("a tensor takes one unit, not a mapping")
        _PARAM_DECLS[target] = as_unit(unit, "declaration")
    else:
        raise ValueError(f"declare() takes a module or a tensor, got {type(target).__name__}")
    return target


def undeclare(target: nn.Module | torch.Tensor) -> None:
    _PARAM_DECLS.pop(target, None)
    _MODULE_DECLS.pop(target, None)


def _match(pattern: str, name: str) -> bool:
    return name == pattern or fnmatch.fnmatchcase(name, pattern)


def resolve_declarations(
    model: nn.Module, globs: Mapping[str, str | Unit] | None = None
) -> dict[str, Unit]:
    """Qualified parameter/buffer name -> declared unit, after applying the precedence order."""
    named: dict[str, torch.Tensor] = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        named[n] = p
    for n, b in model.named_buffers(remove_duplicate=False):
        named[n] = b
    out: dict[str, Unit] = {}
    if globs:
        parsed = [(pat, as_unit(u, f"[tool.unitcheck.declare] {pat!r}")) for pat, u in globs.items()]
        for name in named:
            for pat, u in parsed:
                if _match(pat, name):
                    out[name] = u
    modules = list(model.named_modules(remove_duplicate=False))
    for source in ("class", "call"):
        for prefix, mod in modules:
            if source == "class":
                raw = getattr(type(mod), "__units__", None)
                if not raw:
                    continue
                decl = {k: as_unit(v, f"{type(mod).__name__}.__units__[{k!r}]") for k, v in raw.items()}
            else:
                decl = _MODULE_DECLS.get(mod)
                if not decl:
                    continue
            base = prefix + "." if prefix else ""
            for name in named:
                if not name.startswith(base):
                    continue
                rel = name[len(base):]
                for pat, u in decl.items():
                    if _match(pat, rel):
                        out[name] = u
    for name, t in named.items():
        if t in _PARAM_DECLS:
            out[name] = _PARAM_DECLS[t]
    return out
