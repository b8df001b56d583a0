"""The positional-encoding contract: add position information to a sequence of vectors.

Source: Vaswani et al. 2017, §3.5 (h_i = x_i + p_i: encodings added to the embeddings); Shaw et al.
2018.

``forward(x (B, T, D), offset=0) -> (B, T, D)``: x_t + p_{offset+t}. ``offset`` is the position of
the first row (a decoder generating token by token passes the step number). Absolute encodings
(``sinusoidal``, ``learned``) add a vector; ``none`` and ``relative`` return x unchanged. A block
with ``relative = True`` asks its parent to give its self-attention relative-position terms with
clipping distance ``max_distance`` instead (the ``relative_distance`` context of attention blocks,
:mod:`attnflow.blocks.attention.base`). Only models whose config consumes the ``positional`` group
take one; for any other, ``positional=…`` is refused before any work (:mod:`attnflow.config.groups`).
"""

from __future__ import annotations

import torch
from torch import nn



class Positional(nn.Module):
    """Base class: ``forward(x, offset=0) -> x + p``; ``relative`` says whether attention must
    carry the positions instead."""

    relative: bool = False
    max_distance: int = 0

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def encoding(self, length: int, offset: int = 0, device=None, dtype=None) -> torch.Tensor:
        """(length, D): p_offset … p_{offset+length−1} (zeros for blocks that add nothing)."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return x + self.encoding(x.shape[-2], offset, x.device, x.dtype)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"
