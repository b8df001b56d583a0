"""Scaled dot-product scorer: a(k, q) = kᵀq / √d.

Source: Vaswani et al. 2017, "Attention is all you need", §3.2.1, eq. (1). d is the key size.
With softmax and no maps requested, attention runs it through the fused
``torch.nn.functional.scaled_dot_product_attention``.
"""

import math

import torch

from attnflow.blocks.scorers.base import Scorer
from attnflow.config.registry import SCORERS


@SCORERS.register("scaled_dot")
class ScaledDotScorer(Scorer):
    """a(k, q) = kᵀq / √d.

    Args:
        query_dim, key_dim: sizes of q and k (context; must be equal, d = key_dim).
    Shape: query (..., Tq, D), keys (..., Tk, D) -> (..., Tq, Tk).
    """

    requires_equal_dims = True
    dot_product = True

    def __init__(self, query_dim: int, key_dim: int):
        super().__init__(query_dim, key_dim)
        self.sdpa_scale = 1.0 / math.sqrt(key_dim)

    def dot_query(self, query: torch.Tensor) -> torch.Tensor:
        # scale the (Tq, D) query rather than the (Tq, Tk) scores: one pass over the smaller tensor
        return query * self.sdpa_scale
