"""Per-node inference cost of this checkout, for side-by-side comparison with another one.

Run it in two checkouts alternately (the refactor of issue 12 was judged this way):

    PYTHONPATH=/path/to/old/checkout python bench/bench_infer_compare.py 30   # old engine
    python bench/bench_infer_compare.py 30                                     # this one

Prints microseconds per node (the minimum over N fresh walks, garbage collection off) for the
bundled gpt at 12 and 48 layers. The minimum is the figure least disturbed by a shared machine.
"""

import gc
import json
import sys
import time

import torch
torch.set_num_threads(1)
from unitcheck.models import build
try:
    from unitcheck.infer import run_inference, trace_for_inference as tr
    from unitcheck.record import KEY
    keys = [KEY]
except ImportError:
    from unitcheck.infer import run_inference
    from unitcheck.tracer import trace as tr
    keys = ["unit", "unit_violation", "grad_unit", "unit_floors", "_floor_noted", "unit_interface", "unit_unknown", "unitcheck_location"]
out: dict[int, float] = {}
for depth in (12, 48):
    model, inputs = build("gpt", n_layer=depth, n_embd=64, n_head=4)
    traced = tr(model, inputs)
    ts = []
    for _ in range(int(sys.argv[1])):
        for n in traced.graph.nodes:
            for k in keys:
                n.meta.pop(k, None)
        gc.disable()
        t0 = time.perf_counter(); run_inference(traced); ts.append(time.perf_counter() - t0)
        gc.enable()
    out[depth] = 1e6 * min(ts) / len(traced.graph.nodes)
print(json.dumps(out))
