"""Run by torchrun in tests: trains, then each rank saves its parameters for comparison."""

import os
import sys

import torch

from unitcheck.train import TrainConfig, train

out = sys.argv[1]
cfg = TrainConfig(model="gpt", n_layer=2, n_embd=32, n_head=2, seq_len=32, batch_size=8, steps=6,
                  eval_interval=3, eval_batches=2, checkpoint_interval=100, out_dir=out, seed=7)
res = train(cfg)
rank = int(os.environ.get("RANK", "0"))
torch.save({k: v.detach().clone() for k, v in res.model.state_dict().items()}, os.path.join(out, f"rank{rank}.pt"))
