"""A small Vision Transformer: patch embedding, learned positions, pre-LayerNorm blocks with
bidirectional attention, mean-pooled classification head.

References: Dosovitskiy et al. 2021 (ViT); nanoGPT's layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .layers import check_config


@dataclass
class ViTConfig:
    image_size: int = 16
    patch_size: int = 4
    channels: int = 1
    n_classes: int = 4
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    bias: bool = True

    def __post_init__(self) -> None:
        check_config(self)
        if self.image_size % self.patch_size:
            raise ValueError(f"image_size ({self.image_size}) must be a multiple of patch_size ({self.patch_size})")

    @property
    def n_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2


class Attention(nn.Module):
    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v)  # bidirectional
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(), nn.Linear(4 * cfg.n_embd, cfg.n_embd))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class ViT(nn.Module):
    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.config = cfg
        self.patch = nn.Linear(cfg.channels * cfg.patch_size**2, cfg.n_embd)
        self.pos = nn.Parameter(0.02 * torch.randn(cfg.n_patches, cfg.n_embd))
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.n_classes)

    def forward(self, images: torch.Tensor, labels: torch.Tensor | None = None):  # type: ignore[no-untyped-def]
        B, C, H, W = images.shape
        p = self.config.patch_size
        patches = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5).reshape(B, -1, C * p * p)
        x = self.patch(patches) + self.pos  # (B, T, C)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x).mean(1))  # (B, classes)
        if labels is None:
            return logits
        return logits, F.cross_entropy(logits, labels)


Config = ViTConfig
Model = ViT


def bars(n: int, size: int = 16, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A generated dataset (no download): noisy images of a bar at one of four orientations."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 4, (n,), generator=g)
    ys, xs = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    images = torch.zeros(n, 1, size, size)
    offset = torch.randint(-size // 3, size // 3 + 1, (n,), generator=g)
    for k, (a, b) in enumerate(((0, 1), (1, 0), (1, 1), (1, -1))):
        sel = labels == k
        dist = (a * (ys - size // 2) - b * (xs - size // 2))[None] - offset[sel, None, None]
        images[sel, 0] = (dist.abs() <= 1).float()
    images += 0.3 * torch.randn(images.shape, generator=g)
    return images, labels


def build(batch: int = 8, seq: int | None = None, seed: int = 0, **overrides: object):  # type: ignore[no-untyped-def]
    torch.manual_seed(seed)
    cfg = ViTConfig(**overrides)  # type: ignore[arg-type]
    images, labels = bars(batch, cfg.image_size, seed)
    return ViT(cfg), (images, labels)
