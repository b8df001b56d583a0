"""Max pooling over valid positions (HN-MAX in Yang et al. 2016).

    s_d = max_{t valid} h_{t,d}

Padding never wins the max; a row with no valid position pools to zeros. There are no attention
weights, so ``weights`` is None.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import nn

from attnflow.config.registry import POOLINGS


@POOLINGS.register("max")
class MaxPooling(nn.Module):
    """s = element-wise max of h_t over the valid positions.

    Args:
        input_dim: size D of the vectors (context).
    Shape:
        h (B, T, D), mask (B, T) bool -> pooled (B, D), None.
    """

    output_weights = False

    def __init__(self, input_dim: int):
        super().__init__()
        self.input_dim = self.output_dim = input_dim

    def forward(self, h: torch.Tensor, mask: Optional[torch.Tensor] = None
                ) -> Tuple[torch.Tensor, None]:
        if mask is None:
            return h.max(1).values, None
        filled = h.masked_fill(~mask.unsqueeze(-1), float("-inf"))
        pooled = filled.max(1).values
        pooled = torch.where(mask.any(-1, keepdim=True), pooled, torch.zeros_like(pooled))
        return pooled, None
