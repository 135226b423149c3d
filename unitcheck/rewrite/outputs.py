"""How a model's outputs flatten, the same way for the original and the generated module.

transformers' ``ModelOutput`` keeps its fields in the order they were set, and rebuilding one
(pytree unflattening, as a capture may do) puts them in declaration order: the same model can
return ``(last_hidden_state, hidden_states, pooler_output)`` eagerly and ``(last_hidden_state,
pooler_output, hidden_states)`` from a capture. Outputs are therefore compared, and generated code
returns them, with every ``ModelOutput`` in declaration order.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from torch.utils import _pytree as pytree

__all__ = ["declared", "declared_order"]


def _is_model_output(x: Any) -> bool:
    return dataclasses.is_dataclass(x) and not isinstance(x, type) and hasattr(x, "to_tuple") and hasattr(x, "keys")


def declared(out: Any) -> Any:
    """``out`` with every ``ModelOutput`` replaced by the tuple of its set fields in declaration
    order (recursively); tuples, lists and dicts keep their structure."""
    if _is_model_output(out):
        keys = set(out.keys())
        return tuple(declared(out[f.name]) for f in dataclasses.fields(out) if f.name in keys)
    if isinstance(out, (tuple, list)):
        return type(out)(declared(v) for v in out) if type(out) in (tuple, list) else tuple(declared(v) for v in out)
    if isinstance(out, dict):
        return {k: declared(v) for k, v in out.items()}
    return out


def declared_order(spec: pytree.TreeSpec) -> list[int]:
    """The positions of ``spec``'s leaves in declaration order (identity when the structure cannot
    be rebuilt with placeholder leaves)."""
    n = spec.num_leaves
    try:
        order = pytree.tree_leaves(declared(pytree.tree_unflatten(list(range(n)), spec)))
    except Exception:  # a container that insists on tensors: keep the capture's order
        return list(range(n))
    return order if sorted(order) == list(range(n)) else list(range(n))
