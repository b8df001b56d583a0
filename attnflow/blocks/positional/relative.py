"""Relative positions (Shaw, Uszkoreit & Vaswani 2018, eq. (3)–(4)): no absolute encoding; every
self-attention of the parent gets relative-position terms:

    c_j = Σ_i (v_i + wᵛ_{i⊟j}) SoftMax_i a(k_i + wᵏ_{i⊟j}, q_j),  i⊟j = clip(i − j, −δ, δ)

This block only carries δ (``max_distance``) and the flag ``relative = True``; the embeddings
wᵏ, wᵛ live in each attention layer (the relative path of :mod:`attnflow.blocks.attention.multihead`,
given δ as ``relative_distance``). Models without self-attention (RNNs) do not consume the
``positional`` group, so ``positional=relative`` there is refused before any work.
"""

from __future__ import annotations

import torch

from attnflow.blocks.positional.base import Positional
from attnflow.config.registry import POSITIONALS, PositiveInt


@POSITIONALS.register("relative")
class RelativePositional(Positional):
    """x unchanged; self-attention uses clipped relative distances i⊟j ∈ [−δ, δ].

    Args:
        dim: the model size (context).
        max_distance: δ, the clipping distance (default 16, as in Shaw et al. 2018, who
            report little change for δ ≥ 2).
    Shape: x (B, T, d) -> (B, T, d).
    """

    relative = True

    def __init__(self, dim: int, *, max_distance: PositiveInt = 16):
        super().__init__(dim)
        if max_distance < 0:
            raise ValueError(f"positional 'relative': max_distance must be >= 0, got {max_distance}")
        self.max_distance = max_distance

    def encoding(self, length: int, offset: int = 0, device=None, dtype=None) -> torch.Tensor:
        return torch.zeros(length, self.dim, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return x
