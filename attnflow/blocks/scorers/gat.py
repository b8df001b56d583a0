"""GAT scorer: a(k, q) = LeakyReLU(uᵀk + vᵀq).

Source: seed 000 (graph attention: a(Wʲh_i, Wʲh_t) = LeakyReLU(uʲWʲh_i + vʲWʲh_t));
Veličković et al. 2018, "Graph attention networks". In a GAT layer the inputs are already the
projected Wh, so by default the scorer has only u and v; ``hidden_dim`` adds a shared projection W
for use on raw vectors (then query_dim must equal key_dim, as in the paper where k and q are node
features of one space). Negative slope 0.2 as in the paper.
"""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from attnflow.blocks.scorers.base import Scorer
from attnflow.registry import SCORERS


@SCORERS.register("gat")
class GATScorer(Scorer):
    """a(k, q) = LeakyReLU(uᵀWk + vᵀWq), W = I unless ``hidden_dim`` is set.

    Args:
        query_dim, key_dim: sizes of q and k (context).
        negative_slope: LeakyReLU slope (default 0.2).
        hidden_dim: if set, a shared projection W (hidden_dim × d) before u, v (default None).
    Shape: query (..., Tq, Dq), keys (..., Tk, Dk) -> (..., Tq, Tk).
    """

    def __init__(self, query_dim: int, key_dim: int, *, negative_slope: float = 0.2,
                 hidden_dim: Optional[int] = None):
        super().__init__(query_dim, key_dim)
        self.negative_slope = negative_slope
        self.W = None
        if hidden_dim is not None:
            self._require_equal_dims()
            self.W = nn.Linear(key_dim, hidden_dim, bias=False)
            query_dim = key_dim = hidden_dim
        self.u = nn.Parameter(torch.empty(key_dim))
        self.v = nn.Parameter(torch.empty(query_dim))
        bound = 1.0 / key_dim ** 0.5
        nn.init.uniform_(self.u, -bound, bound)
        nn.init.uniform_(self.v, -bound, bound)

    def _project(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.W is None else self.W(x)

    def prepare_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return self._project(keys) @ self.u  # (..., Tk)

    def score_prepared(self, query: torch.Tensor, prepared: torch.Tensor) -> torch.Tensor:
        q = self._project(query) @ self.v  # (..., Tq)
        return F.leaky_relu(q.unsqueeze(-1) + prepared.unsqueeze(-2), self.negative_slope)
