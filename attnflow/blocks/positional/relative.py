"""Relative positions (Shaw, Uszkoreit & Vaswani 2018, eq. (3)–(4)): no absolute encoding;
every self-attention of the parent gets relative-position terms,

    c_j = Σ_i (v_i + wᵛ_{i⊟j}) SoftMax_i a(k_i + wᵏ_{i⊟j}, q_j),  i⊟j = clip(i − j, −δ, δ)

This block carries δ (``max_distance``, 16 as Shaw et al.); wᵏ, wᵛ live in each attention layer.
"""

from __future__ import annotations

import torch

from attnflow.blocks.positional.base import Positional
from attnflow.config.registry import POSITIONALS, PositiveInt


@POSITIONALS.register("relative")
class RelativePositional(Positional):
    """x unchanged; self-attention uses clipped relative distances i⊟j ∈ [−δ, δ]."""

    relative = True

    def __init__(self, dim: int, *, max_distance: PositiveInt = 16):
        super().__init__(dim)
        self.max_distance = max_distance

    def encoding(self, length: int, offset: int = 0, device=None, dtype=None) -> torch.Tensor:
        return torch.zeros(length, self.dim, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return x
