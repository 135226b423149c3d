"""Factories used by the CLI tests (``tests/cli_models.py:<name>``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from unitcheck.models import build
from unitcheck.models.gpt import GPT


def good():  # type: ignore[no-untyped-def]
    return build("gpt")


def module_only() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 16), nn.GELU())


def raises():  # type: ignore[no-untyped-def]
    raise RuntimeError("factory exploded on purpose")


class Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        if h.sum() > 0:
            return h
        return -h


def untraceable():  # type: ignore[no-untyped-def]
    return Branchy(), (torch.randn(2, 4),)


class GPTPlusOne(GPT):
    """The bundled GPT with one more violating op: a literal added to the logits."""

    def forward(self, idx, targets=None):  # type: ignore[no-untyped-def,override]
        logits = super().forward(idx) + 1.0
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def gpt_plus_one():  # type: ignore[no-untyped-def]
    model, inputs = build("gpt")
    plus = GPTPlusOne(model.config)
    plus.load_state_dict(model.state_dict())
    return plus, inputs


class Suppressed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.fc(x))  # unitcheck: ignore[UC202]


def suppressed():  # type: ignore[no-untyped-def]
    return Suppressed(), (torch.randn(2, 8),)



def small_vocab():  # type: ignore[no-untyped-def]
    """A user's GPT with 20 tokens: fewer than the char corpus has."""
    model, (x, y) = build("gpt", vocab_size=20, block_size=32, n_layer=1, n_embd=16, n_head=2)
    return model, (x % 20, y % 20)


def char_sized():  # type: ignore[no-untyped-def]
    """A user's GPT with 100 tokens: enough for characters, not for bytes."""
    return build("gpt", vocab_size=100, block_size=32, n_layer=1, n_embd=16, n_head=2)


def short_block():  # type: ignore[no-untyped-def]
    """A user's GPT that accepts at most 16 tokens."""
    model, (x, y) = build("gpt", vocab_size=256, block_size=16, n_layer=1, n_embd=16, n_head=2)
    return model, (x[:, :16], y[:, :16])


def compiled():  # type: ignore[no-untyped-def]
    model, inputs = build("gpt", n_layer=1)
    return torch.compile(model), inputs
