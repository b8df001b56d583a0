"""General (multiplicative, bilinear) scorer: a(k, q) = kᵀWq.

Source: Luong, Pham & Manning 2015, "Effective approaches to attention-based neural machine
translation", §3.1, eq. (8) (the "general" score h_tᵀW_a h̄_s).
W is key_dim × query_dim, so q and k may have different sizes.
"""

import torch
from torch import nn

from attnflow.blocks.scorers.base import Scorer
from attnflow.config.registry import SCORERS


@SCORERS.register("general")
class GeneralScorer(Scorer):
    """a(k, q) = kᵀWq.

    Args:
        query_dim, key_dim: sizes of q and k (context).
        bias: add a learned bias to Wq, i.e. kᵀ(Wq + b) (default False).
    Shape: query (..., Tq, Dq), keys (..., Tk, Dk) -> (..., Tq, Tk).
    """

    dot_product = True

    def __init__(self, query_dim: int, key_dim: int, *, bias: bool = False):
        super().__init__(query_dim, key_dim)
        self.W = nn.Linear(query_dim, key_dim, bias=bias)

    def dot_query(self, query: torch.Tensor) -> torch.Tensor:
        return self.W(query)
