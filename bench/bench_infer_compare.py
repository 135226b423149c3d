"""Per-node inference cost of this checkout, for side-by-side comparison with another one.

Run it in two checkouts alternately (the refactor of issue 12 was judged this way):

    PYTHONPATH=/path/to/old/checkout python bench/bench_infer_compare.py 30   # old engine
    python bench/bench_infer_compare.py 30                                     # this one

Prints microseconds per node (the minimum over N fresh walks, garbage collection off) for the
bundled gpt at 12 and 48 layers. The minimum is the figure least disturbed by a shared machine.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from typing import Any

import torch
from unitcheck.models import build

from unitcheck.infer import run_inference

try:  # the restructured engine: one record per node
    from unitcheck.infer import trace_for_inference as trace
    from unitcheck.record import KEY

    KEYS = [KEY]
except ImportError:  # the engine before it: eight meta keys
    from unitcheck.tracer import trace  # type: ignore[no-redef]

    KEYS = ["unit", "unit_violation", "grad_unit", "unit_floors", "_floor_noted", "unit_interface",
            "unit_unknown", "unitcheck_location"]


def per_node_us(depth: int, repeat: int) -> float:
    model, inputs = build("gpt", n_layer=depth, n_embd=64, n_head=4)
    traced: Any = trace(model, inputs)
    times = []
    for _ in range(repeat):
        for n in traced.graph.nodes:
            for k in KEYS:
                n.meta.pop(k, None)
        gc.disable()
        t0 = time.perf_counter()
        run_inference(traced)
        times.append(time.perf_counter() - t0)
        gc.enable()
    return 1e6 * min(times) / len(traced.graph.nodes)


if __name__ == "__main__":
    torch.set_num_threads(1)
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    print(json.dumps({depth: round(per_node_us(depth, n), 2) for depth in (12, 48)}))
