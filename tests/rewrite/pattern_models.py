"""Small models with the patterns of issue 15 that the HF zoo shows only at full cost: residual
adds in a wrapper module beside each block (x-transformers style) and a parallel block."""

from __future__ import annotations

import torch
from torch import nn
from unitcheck.models.gpt import MLP, CausalSelfAttention, GPTConfig
from unitcheck.models.layers import lm_output


class Residual(nn.Module):
    """The residual add as a module of its own, called beside the block it adds."""

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return x + residual


class WrapperLM(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.layers = nn.ModuleList()
        for _ in range(cfg.n_layer):
            for block in (CausalSelfAttention(cfg), MLP(cfg)):
                self.layers.append(nn.ModuleList([nn.LayerNorm(cfg.n_embd), block, Residual()]))
        self.norm = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):  # type: ignore[no-untyped-def]
        x = self.wte(idx)
        for norm, block, residual in self.layers:  # type: ignore[misc]
            x = residual(block(norm(x)), x)
        return lm_output(self.head(self.norm(x)), targets)


def wrapper_lm():  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=32, block_size=16, n_layer=1, n_embd=16, n_head=2)
    idx = torch.randint(0, 32, (2, 8))
    return WrapperLM(cfg), (idx, idx.roll(1, 1))


class SquaredHead(WrapperLM):
    """Logits squared before the loss: no rule makes them dimensionless."""

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):  # type: ignore[no-untyped-def]
        x = self.wte(idx)
        for norm, block, residual in self.layers:  # type: ignore[misc]
            x = residual(block(norm(x)), x)
        return lm_output(self.head(self.norm(x)).pow(2), targets)


def squared_head():  # type: ignore[no-untyped-def]
    model, inputs = wrapper_lm()
    squared = SquaredHead(GPTConfig(vocab_size=32, block_size=16, n_layer=1, n_embd=16, n_head=2))
    squared.load_state_dict(model.state_dict())
    return squared, inputs
