"""GATv2 scorer: a(k, q) = aᵀ LeakyReLU(Uk + Vq).

Brody, Alon & Yahav 2022: applying the non-linearity before the dot product with a makes the
ranking of neighbours depend on the query ("dynamic" attention). U = V = I by default (PyG's
``GATv2Conv(share_weights=True)`` on Wh); ``hidden_dim`` adds the projections U, V.
"""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from attnflow.blocks.scorers.base import Scorer
from attnflow.config.registry import SCORERS, NonNegativeFloat, PositiveInt


@SCORERS.register("gatv2")
class GATv2Scorer(Scorer):
    """a(k, q) = aᵀ LeakyReLU(Uk + Vq), U = V = I unless ``hidden_dim`` is set."""

    def __init__(self, query_dim: int, key_dim: int, *, negative_slope: NonNegativeFloat = 0.2,
                 hidden_dim: Optional[PositiveInt] = None):
        super().__init__(query_dim, key_dim)
        self.negative_slope = negative_slope
        self.U = self.V = None
        if hidden_dim is None:
            self._require_equal_dims()
            dim = key_dim
        else:
            self.U = nn.Linear(key_dim, hidden_dim, bias=False)
            self.V = nn.Linear(query_dim, hidden_dim, bias=False)
            dim = hidden_dim
        self.a = nn.Parameter(torch.empty(dim))
        nn.init.uniform_(self.a, -dim ** -0.5, dim ** -0.5)

    def prepare_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return keys if self.U is None else self.U(keys)

    def score_prepared(self, query: torch.Tensor, prepared: torch.Tensor) -> torch.Tensor:
        q = query if self.V is None else self.V(query)
        # (..., Tq, 1, H) + (..., 1, Tk, H) -> (..., Tq, Tk, H) -> (..., Tq, Tk)
        return F.leaky_relu(q.unsqueeze(-2) + prepared.unsqueeze(-3), self.negative_slope) @ self.a
