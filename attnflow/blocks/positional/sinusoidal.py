"""Sinusoidal positional encoding: PE(pos, 2i) = sin(pos / 10000^{2i/d}), PE(pos, 2i+1) = cos(…).

Vaswani et al. 2017, §3.5, sine and cosine interleaved; positions from 0. The table is cached and
grown on demand, so the length is unbounded.
"""

from __future__ import annotations

import math

import torch

from attnflow.blocks.positional.base import Positional
from attnflow.config.registry import POSITIONALS


def sinusoid_table(length: int, dim: int, offset: int = 0) -> torch.Tensor:
    """(length, dim) float32: row t is PE(offset + t)."""
    pos = torch.arange(offset, offset + length, dtype=torch.float64).unsqueeze(1)
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float64) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq[: dim // 2])
    return table.float()


@POSITIONALS.register("sinusoidal")
class SinusoidalPositional(Positional):
    """x_t + scale · PE(offset + t)."""

    def __init__(self, dim: int, *, scale: float = 1.0):
        super().__init__(dim)
        self.scale = scale
        self.register_buffer("table", sinusoid_table(512, dim), persistent=False)

    def encoding(self, length: int, offset: int = 0, device=None, dtype=None) -> torch.Tensor:
        if offset + length > self.table.shape[0]:
            size = max(offset + length, 2 * self.table.shape[0])
            self.table = sinusoid_table(size, self.dim).to(self.table.device)
        p = self.table[offset: offset + length]
        if self.scale != 1.0:
            p = p * self.scale
        return p.to(device=device, dtype=dtype) if dtype is not None else p
