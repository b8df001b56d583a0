"""Concatenation followed by a projection: c = [c¹ … cᴶ] W.

Source: Vaswani et al. 2017, §3.2.2 (W^O projects the concatenated heads back to the model size).
"""

from typing import Optional

import torch
from torch import nn

from attnflow.blocks.aggregators.concat import ConcatAggregator
from attnflow.config.registry import AGGREGATORS, PositiveInt


@AGGREGATORS.register("concat_proj")
class ConcatProjAggregator(ConcatAggregator):
    """c = [c¹ … cᴶ] W + b, W of size J·D × D′.

    Args:
        out_dim: D′ (default None: the parent's ``model_dim``).
        bias: bias b (default True).
    Shape: (..., J, T, D) -> (..., T, D′).
    """

    def __init__(self, heads: int, head_dim: int, model_dim: int, *,
                 out_dim: Optional[PositiveInt] = None,
                 bias: bool = True):
        super().__init__(heads, head_dim, model_dim)
        self.proj = nn.Linear(heads * head_dim, out_dim or model_dim, bias=bias)
        self.output_dim = self.proj.out_features

    def forward(self, heads: torch.Tensor) -> torch.Tensor:
        return self.proj(super().forward(heads))
