"""Dot-product scorer: a(k, q) = kᵀq.

Source: Luong, Pham & Manning 2015, §3.1, eq. (8) (the "dot" score h_tᵀh̄_s).
Needs query_dim == key_dim.
"""

import torch

from attnflow.blocks.scorers.base import Scorer
from attnflow.config.registry import SCORERS


@SCORERS.register("dot")
class DotScorer(Scorer):
    """a(k, q) = kᵀq.

    Args:
        query_dim, key_dim: sizes of q and k (context; must be equal).
    Shape: query (..., Tq, D), keys (..., Tk, D) -> (..., Tq, Tk).
    """

    sdpa_scale = 1.0
    requires_equal_dims = True
    dot_product = True

    def __init__(self, query_dim: int, key_dim: int):
        super().__init__(query_dim, key_dim)

    def dot_query(self, query: torch.Tensor) -> torch.Tensor:
        return query
