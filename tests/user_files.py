"""Files a user might hand to unitcheck, good and bad, shared by the bad-input and damage tests:
a factory module, a rewrite directory and a training run (built once per session), and a
snapshot of a directory tree to prove that a refused command changed nothing."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

FACTORIES = '''
import sys

import torch
from torch import nn


def tiny():
    return nn.Sequential(nn.Linear(4, 4), nn.GELU()), (torch.randn(2, 4),)


def module_only():
    return nn.Sequential(nn.Linear(4, 4), nn.GELU())


class Doubler(nn.Module):
    def forward(self, x):
        return x * 2


def no_params():
    return Doubler(), (torch.randn(2, 4),)


def not_tensor():
    return nn.Linear(4, 4), "not a tensor"


def no_tensor():
    return nn.Linear(4, 4), ("a", 1)


def exits():
    sys.exit(0)


def raises_exit():
    raise SystemExit(1)


def three():
    return nn.Linear(4, 4), (torch.randn(2, 4),), 5


def nothing():
    return None


def oom():
    raise MemoryError()


class ExitsInForward(nn.Module):
    def forward(self, x):
        sys.exit(0)


def forward_exits():
    return ExitsInForward(), (torch.randn(2, 4),)
'''

TINY_TRAIN = ["--model", "gpt", "--n-layer", "1", "--n-embd", "16", "--n-head", "2", "--seq-len", "16",
              "--batch-size", "4", "--eval-interval", "2", "--eval-batches", "1",
              "--checkpoint-interval", "1", "--seed", "3"]
"""A training run small enough to take a second; ``--steps`` and ``--out-dir`` are added."""


def snapshot(root: Path) -> dict[str, str]:
    """Every file and directory under ``root`` with a hash of its bytes (bytecode caches, which
    Python writes when it imports a user's module, are not the user's files)."""
    out: dict[str, str] = {}
    for p in sorted(root.rglob("*")):
        if "__pycache__" in p.parts:
            continue
        rel = str(p.relative_to(root))
        out[rel] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
    return dst
