"""The positional-encoding contract: add position information to a sequence of vectors.

Source: seed 000 (h_i = x_i + p_i), seed 001; Vaswani et al. 2017; Shaw et al. 2018.

``forward(x (B, T, D), offset=0) -> (B, T, D)``: x_t + p_{offset+t}. ``offset`` is the position of
the first row (a decoder generating token by token passes the step number). Absolute encodings
(``sinusoidal``, ``learned``) add a vector; ``none`` and ``relative`` return x unchanged. A block
with ``relative = True`` asks its parent to use relative-position attention
(``relative_multihead``) with clipping distance ``max_distance`` instead; a parent that has no
self-attention must refuse it (:func:`require_absolute`).
"""

from __future__ import annotations

import torch
from torch import nn

from attnflow.registry import ConfigError


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


def require_absolute(positional: Positional, where: str) -> None:
    """Raise a :class:`ConfigError` when a block that cannot use relative positions gets them."""
    if positional.relative:
        raise ConfigError(
            f"positional 'relative' (Shaw et al. 2018) changes self-attention scores by the distance "
            f"i − j between two positions of one sequence; {where} has no such self-attention, so "
            f"it cannot use it: choose positional=sinusoidal, learned or none")
