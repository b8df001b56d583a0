"""Mean of heads: c = 1/J Σ_j cʲ.

Source: the output layer of GAT (Veličković et al. 2018, eq. (6)) averages heads.
"""

import torch

from attnflow.blocks.aggregators.base import Aggregator
from attnflow.config.registry import AGGREGATORS


@AGGREGATORS.register("mean")
class MeanAggregator(Aggregator):
    """c = 1/J Σ_j cʲ.

    Shape: (..., J, T, D) -> (..., T, D).
    """

    def forward(self, heads: torch.Tensor) -> torch.Tensor:
        return heads.mean(dim=-3)
