"""The positional-encoding contract: h_i = x_i + p_i (Vaswani et al. 2017, §3.5; Shaw et al. 2018).

``forward(x (B, T, D), offset=0)`` adds p_{offset+t} (``offset``: a decoder's step). ``none`` and
``relative`` add nothing; ``relative = True`` asks the parent's self-attention for relative terms
with clipping distance ``max_distance``.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn


class Positional(nn.Module):
    """Base class: ``forward(x, offset=0) -> x + p``; ``relative`` says whether attention must
    carry the positions instead."""

    relative: bool = False
    max_distance: int = 0
    #: the most positions it covers (a learned table's rows); None: any number
    max_len: Optional[int] = None

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
