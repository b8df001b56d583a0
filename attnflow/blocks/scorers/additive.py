"""Additive (concat, Bahdanau) scorer: a(k, q) = wᵀ tanh(Uk + Vq).

Source: Bahdanau, Cho & Bengio 2015, "Neural machine translation by jointly learning to align and
translate", eq. (6) and Appendix A.1.2 (a(s_{i−1}, h_j) = v_aᵀ tanh(W_a s_{i−1} + U_a h_j)); Luong et
al. 2015's "concat" score. Uk is computed once per key sequence (``prepare_keys``), as in the
paper's decoder.
"""

import torch
from torch import nn

from attnflow.blocks.scorers.base import Scorer
from attnflow.config.registry import SCORERS, PositiveInt


@SCORERS.register("additive")
class AdditiveScorer(Scorer):
    """a(k, q) = wᵀ tanh(Uk + Vq).

    Args:
        query_dim, key_dim: sizes of q and k (context).
        hidden_dim: rows of U and V (default 128).
        bias: bias in Uk (default True).
    Shape: query (..., Tq, Dq), keys (..., Tk, Dk) -> (..., Tq, Tk).
    """

    def __init__(self, query_dim: int, key_dim: int, *, hidden_dim: PositiveInt = 128,
                 bias: bool = True):
        super().__init__(query_dim, key_dim)
        self.U = nn.Linear(key_dim, hidden_dim, bias=bias)
        self.V = nn.Linear(query_dim, hidden_dim, bias=False)
        self.w = nn.Linear(hidden_dim, 1, bias=False)

    def prepare_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return self.U(keys)

    def score_prepared(self, query: torch.Tensor, prepared: torch.Tensor) -> torch.Tensor:
        # (..., Tq, 1, H) + (..., 1, Tk, H) -> (..., Tq, Tk, H) -> (..., Tq, Tk)
        return self.w(torch.tanh(self.V(query).unsqueeze(-2) + prepared.unsqueeze(-3))).squeeze(-1)
