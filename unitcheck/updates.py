"""Update typing for optimizers (SPEC 6), opt-in: UC401 (learning rate), UC402 (weight decay).

SGD's step eta * grad has unit u(eta) - u(W): consistent iff u(eta) = 2 u(W). Adam-family steps
m / sqrt(v) are dimensionless: consistent iff u(eta) = u(W). Decoupled weight decay needs
eta * lambda dimensionless; coupled (L2) decay adds lambda W to a gradient of unit -u(W), so it
needs u(lambda) = -2 u(W). A param group may carry ``lr_unit`` / ``weight_decay_unit`` strings.
"""

from __future__ import annotations

import torch

from .codes import CODES
from .declarations import as_unit
from .diagnostics import Violation
from .record import unit_of
from .unitgraph import UnitGraph
from .units import DIMENSIONLESS, Unit

__all__ = ["check_updates", "step_kind"]

_SGD_LIKE = ("SGD", "ASGD")
_DECOUPLED = ("AdamW", "Lion", "SGDW")


def step_kind(optimizer: torch.optim.Optimizer) -> str:
    """'sgd' when the step is eta * grad, 'adam' when it is dimensionless (m / sqrt(v), sign)."""
    return "sgd" if type(optimizer).__name__ in _SGD_LIKE else "adam"


def check_updates(unit_graph: UnitGraph, optimizer: torch.optim.Optimizer) -> list[Violation]:
    model = unit_graph.traced.model
    names = {id(p): n for n, p in model.named_parameters(remove_duplicate=False)}
    units: dict[str, Unit] = {}
    for node in unit_graph.traced.leaf_nodes():
        leaf = unit_graph.traced.leaves[node.name]
        u = unit_of(node)
        if leaf.kind == "param" and isinstance(u, Unit):
            units[leaf.name] = u
    kind = step_kind(optimizer)
    opt_name = type(optimizer).__name__
    out: list[Violation] = []
    for group in optimizer.param_groups:
        lr_unit = as_unit(group.get("lr_unit", "1"), "lr_unit")
        wd = float(group.get("weight_decay", 0.0) or 0.0)
        wd_unit = as_unit(group.get("weight_decay_unit", "1"), "weight_decay_unit")
        for p in group["params"]:
            name = names.get(id(p))
            if name is None or name not in units:
                continue
            u = units[name]
            needed = u**2 if kind == "sgd" else u
            if lr_unit != needed:
                out.append(_violation(
                    "UC401", name, opt_name,
                    f"{opt_name} step for {name} has unit {(lr_unit / needed) * u} instead of {u}: "
                    f"the learning rate has unit {lr_unit}, the parameter needs {needed}",
                    {"parameter": u, "lr": lr_unit, "needed": needed},
                ))
            if wd:
                decoupled = opt_name in _DECOUPLED
                wd_needed = lr_unit.inverse() if decoupled else (u**2).inverse() if kind == "sgd" else DIMENSIONLESS
                if not decoupled and kind == "adam":
                    continue  # L2 inside an adaptive step is normalised away with the gradient
                if wd_unit != wd_needed:
                    out.append(_violation(
                        "UC402", name, opt_name,
                        f"weight decay on {name} has unit {wd_unit}; it needs {wd_needed}",
                        {"parameter": u, "weight_decay": wd_unit, "needed": wd_needed},
                    ))
    return out


def _violation(code: str, param: str, opt: str, message: str, units: dict[str, Unit]) -> Violation:
    module = param.rsplit(".", 1)[0] if "." in param else ""
    return Violation(code, message, param, f"optimizer.{opt}", module, units, CODES[code].fix,
                     extra={"role": param})


