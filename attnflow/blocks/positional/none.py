"""No positional encoding: x unchanged.

For ablations (a Transformer without positions sees its input as a bag of tokens, except for the
causal mask of the decoder) and for models that get order from elsewhere.
"""

from __future__ import annotations

import torch

from attnflow.blocks.positional.base import Positional
from attnflow.config.registry import POSITIONALS


@POSITIONALS.register("none")
class NoPositional(Positional):
    """x_t (no position information).

    Args:
        dim: the model size (context).
    Shape: x (B, T, d) -> (B, T, d).
    """

    def encoding(self, length: int, offset: int = 0, device=None, dtype=None) -> torch.Tensor:
        return torch.zeros(length, self.dim, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return x
