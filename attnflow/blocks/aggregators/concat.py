"""Concatenation of heads: c = [c¹ … cᴶ].

Source: hidden layers of GAT (Veličković et al. 2018, eq. (5)); Vaswani et al. 2017, §3.2.2.
"""

import torch

from attnflow.blocks.aggregators.base import Aggregator
from attnflow.config.registry import AGGREGATORS


@AGGREGATORS.register("concat")
class ConcatAggregator(Aggregator):
    """c = [c¹ … cᴶ] (head j fills features j·D … (j+1)·D − 1).

    Shape: (..., J, T, D) -> (..., T, J·D).
    """

    def __init__(self, heads: int, head_dim: int, model_dim: int):
        super().__init__(heads, head_dim, model_dim)
        self.output_dim = heads * head_dim

    def forward(self, heads: torch.Tensor) -> torch.Tensor:
        *lead, J, T, D = heads.shape
        return heads.transpose(-3, -2).reshape(*lead, T, J * D)
