"""UVI during training: measured every N steps on a fixed validation batch, logged to
metrics.jsonl, and an early stop when |UVI| stays above a threshold (as the seed stops diverging
baselines). The graph is traced once; each measurement re-runs it on the live parameters."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .capture import Capture, capture
from .uvi import uvi_attn, uvi_res

__all__ = ["UVIMonitor"]


class UVIMonitor:
    def __init__(self, model: nn.Module, corpus: Any, cfg: Any, device: torch.device) -> None:
        from ..train.data import Batcher

        self.cfg = cfg
        batcher = Batcher(corpus.val, cfg.seq_len, min(cfg.batch_size, 8), seed=cfg.seed + 2)
        x, y = batcher.next()
        self.inputs = (x.to(device), y.to(device))
        self.model = model
        self.cap: Capture | None = None
        self.above = 0

    def measure(self) -> dict[str, Any]:
        from ..oracle.interp import leaf_values, run_graph

        was = self.model.training
        self.model.eval()
        try:
            if self.cap is None:
                self.cap = capture(self.model, self.inputs)
            else:
                with torch.no_grad():
                    self.cap.values = run_graph(self.cap.ug.traced, leaf_values(self.cap.ug.traced))
        finally:
            self.model.train(was)
        res = [abs(r["uvi"]) for r in uvi_res(self.cap)]
        att = [abs(r["uvi"]) for r in uvi_attn(self.cap)]
        # the stop reads the residual steps: attention logits of a fresh baseline are tiny (|UVI_attn|
        # large at step 0) without anything diverging, while a run that blows up shows in its steps
        worst = max(res) if res else 0.0
        self.above = self.above + 1 if self.cfg.uvi_stop > 0 and worst > self.cfg.uvi_stop else 0
        return {"uvi_res_max": worst, "uvi_attn_max": max(att) if att else None, "uvi_max": worst}

    def should_stop(self) -> bool:
        return self.cfg.uvi_stop > 0 and self.above >= self.cfg.uvi_patience
