"""The aggregator contract: combine the J head outputs cʲ of multi-head attention.

Shape:
    heads: (..., J, T, D) -> (..., T, D′), with D′ = ``output_dim``.
Context a parent supplies: ``heads`` (J), ``head_dim`` (D), ``model_dim`` (the size the parent
would like back; only aggregators that project use it).
Source: Veličković et al. 2018, eq. (5)–(6) (concat, mean); Vaswani et al. 2017, §3.2.2 (concat + W^O).
"""

import torch
from torch import nn


class Aggregator(nn.Module):
    """Base class: ``forward(heads (..., J, T, D)) -> (..., T, output_dim)``."""

    def __init__(self, heads: int, head_dim: int, model_dim: int):
        super().__init__()
        self.heads, self.head_dim, self.model_dim = heads, head_dim, model_dim
        self.output_dim = head_dim

    def forward(self, heads: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError
