"""Relative positions (Shaw, Uszkoreit & Vaswani 2018; seed 000): no absolute encoding; the
parent's self-attention becomes ``relative_multihead``:

    c_j = Σ_i (v_i + wᵛ_{i⊟j}) SoftMax_i a(k_i + wᵏ_{i⊟j}, q_j),  i⊟j = clip(i − j, −δ, δ)

This block only carries δ (``max_distance``) and the flag ``relative = True``; the embeddings
wᵏ, wᵛ live in each attention layer (:mod:`attnflow.blocks.attention.relative_multihead`). A
parent without self-attention (an RNN) refuses it with a ConfigError saying why.
"""

from __future__ import annotations

import torch

from attnflow.blocks.positional.base import Positional
from attnflow.registry import POSITIONALS


@POSITIONALS.register("relative")
class RelativePositional(Positional):
    """x unchanged; self-attention uses clipped relative distances i⊟j ∈ [−δ, δ].

    Args:
        dim: the model size (context).
        max_distance: δ, the clipping distance (default 16; Shaw et al. use 16, seed 000: 5..16).
    Shape: x (B, T, d) -> (B, T, d).
    """

    relative = True

    def __init__(self, dim: int, *, max_distance: int = 16):
        super().__init__(dim)
        if max_distance < 0:
            raise ValueError(f"positional 'relative': max_distance must be >= 0, got {max_distance}")
        self.max_distance = max_distance

    def encoding(self, length: int, offset: int = 0, device=None, dtype=None) -> torch.Tensor:
        return torch.zeros(length, self.dim, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return x
