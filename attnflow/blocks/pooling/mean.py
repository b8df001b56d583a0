"""Mean pooling over valid positions (HN-AVE in Yang et al. 2016).

    s = (1 / |valid|) Σ_{t valid} h_t

The returned weights are 1/|valid| at valid positions and 0 at padding (what the mean "attends"
to); a row with no valid position pools to zeros.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import nn

from attnflow.config.registry import POOLINGS


@POOLINGS.register("mean")
class MeanPooling(nn.Module):
    """s = mean of h_t over the valid positions.

    Args:
        input_dim: size D of the vectors (context).
    Shape:
        h (B, T, D), mask (B, T) bool -> pooled (B, D), weights (B, T).
    """

    output_weights = True

    def __init__(self, input_dim: int):
        super().__init__()
        self.input_dim = self.output_dim = input_dim

    def forward(self, h: torch.Tensor, mask: Optional[torch.Tensor] = None
                ) -> Tuple[torch.Tensor, torch.Tensor]:
        if mask is None:
            mask = torch.ones(h.shape[:2], dtype=torch.bool, device=h.device)
        m = mask.to(h.dtype)
        weights = m / m.sum(-1, keepdim=True).clamp_min(1.0)
        return (weights.unsqueeze(-1) * h).sum(1), weights
