"""Experiment 3: post-training quantisation (seed 000): per-tensor int8 of weights and
activations, and NVFP4 (Transformer Engine's recipe for every model, and each model's own recipe:
``matched`` for the normalised ones), applied to trained models with the output head in high
precision; loss increase per model, kappa_scale beside it (cross-token scale spread consumes
log2(kappa) bits).

    python bench/experiments/ptq.py [--quick | --reduced]
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from common import Store, main, nvfp4_recipe, plt, save_fig, sizes_for, trained, val_batch
from torch import nn

MODELS = ["gpt", "llama", "qknorm", "ngpt", "gct"]
PROTOCOL = "issue17"


def _int8(t: torch.Tensor) -> torch.Tensor:
    s = t.abs().amax().clamp(min=1e-12) / 127.0
    return torch.round(t / s).clamp(-127, 127) * s


def int8_ptq(model: nn.Module) -> nn.Module:
    """Per-tensor symmetric int8 of every block linear's weight and (dynamically) its input."""
    m = copy.deepcopy(model)
    for name, mod in m.named_modules():
        if isinstance(mod, nn.Linear) and "lm_head" not in name:
            with torch.no_grad():
                mod.weight.copy_(_int8(mod.weight))
            mod.register_forward_pre_hook(lambda _m, args: (_int8(args[0]),) + tuple(args[1:]))
    return m


def nvfp4_ptq(model: nn.Module, recipe: str = "te") -> nn.Module:
    """Every weight GEMM but the output head in NVFP4 (seed 001 keeps the head in high precision)."""
    from unitcheck.quant.substitute import substitute_nvfp4

    m = copy.deepcopy(model)
    substitute_nvfp4(m, recipe)
    return m


@torch.no_grad()
def val_loss(model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    model.eval()
    return sum(float(model(x, y)[1]) for x, y in batches) / len(batches)


def run(quick: bool) -> dict[str, Any]:
    from unitcheck.diagnose.capture import capture
    from unitcheck.diagnose.uvi import kappa_scale

    sizes = sizes_for(quick)
    store = Store("ptq", quick)
    batches = [val_batch(sizes, seed=s) for s in range(2 if quick else 5)]
    for name in MODELS:
        def job(name: str = name) -> dict[str, Any]:
            model = trained(name, sizes, quick)
            base = val_loss(model, batches)
            kappa = max(r["kappa"] for r in kappa_scale(capture(model, batches[0])))
            i8, f4 = val_loss(int8_ptq(model), batches), val_loss(nvfp4_ptq(model), batches)
            own = nvfp4_recipe(name)
            f4_own = val_loss(nvfp4_ptq(model, own), batches)
            return {"model": name, "fp32": base, "int8": i8, "nvfp4": f4, "int8_increase": i8 - base,
                    "nvfp4_increase": f4 - base, "own_recipe": own, "nvfp4_own_increase": f4_own - base,
                    "kappa_scale": kappa, "protocol": PROTOCOL}

        store.get_or_run(name, job, protocol=PROTOCOL)
    plot(store)
    return store.data["entries"]


def plot(store: Store) -> str:
    e = store.data["entries"]
    names = list(e)
    fig, ax = plt().subplots(figsize=(6.5, 3.8))
    xs = range(len(names))
    ax.bar([x - 0.27 for x in xs], [e[n]["int8_increase"] for n in names], 0.27, label="per-tensor int8")
    ax.bar(list(xs), [e[n]["nvfp4_increase"] for n in names], 0.27, label="NVFP4 (te recipe)")
    ax.bar([x + 0.27 for x in xs], [e[n].get("nvfp4_own_increase", 0.0) for n in names], 0.27,
           label="NVFP4 (own recipe)")
    ax.set_xticks(list(xs), [f"{n}\nkappa {e[n]['kappa_scale']:.2f}" for n in names])
    ax.axhline(0, color="k", lw=0.8)
    ax.set_ylabel("validation loss increase (nats)")
    ax.set_title("post-training quantisation of the trained models")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    return save_fig(fig, store.png("ptq"))


if __name__ == "__main__":
    main(run)
