"""GAT scorer: a(k, q) = LeakyReLU(uᵀk + vᵀq).

Veličković et al. 2018, §2.1, eq. (3): LeakyReLU(aᵀ[Wh_i ‖ Wh_t]) with a = [u; v], slope 0.2. In
a GAT layer k and q are already Wh; ``hidden_dim`` adds a shared projection W for raw vectors.
Decomposable: f(k) = uᵀWk, g(q) = vᵀWq, combine = LeakyReLU(f + g).

Following the authors' TensorFlow layer (PetarV-/GAT ``attn_head``): ``bias`` adds a learned
scalar inside the LeakyReLU (initialised 0), and ``init='per_head'`` draws each head's u, v with
glorot bound √(6 / (C + 1)) rather than GATConv's √(6 / (J + C)) over the stacked (J, C).
"""

import math
from typing import Literal, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from attnflow.blocks.scorers.base import Scorer
from attnflow.config.registry import SCORERS, NonNegativeFloat, PositiveInt


@SCORERS.register("gat")
class GATScorer(Scorer):
    """a(k, q) = LeakyReLU(uᵀWk + vᵀWq (+ b)), W = I unless ``hidden_dim`` is set."""

    decomposable = True

    def __init__(self, query_dim: int, key_dim: int, *, negative_slope: NonNegativeFloat = 0.2,
                 hidden_dim: Optional[PositiveInt] = None, bias: bool = False,
                 init: Literal["gatconv", "per_head"] = "gatconv"):
        super().__init__(query_dim, key_dim)
        self.negative_slope, self.init = negative_slope, init
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
        self.b = nn.Parameter(torch.zeros(())) if bias else None

    def _project(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.W is None else self.W(x)

    def _plus_bias(self, t: torch.Tensor) -> torch.Tensor:
        return t if self.b is None else t + self.b

    def prepare_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return self._plus_bias(self._project(keys) @ self.u)  # (..., Tk)

    def score_prepared(self, query: torch.Tensor, prepared: torch.Tensor) -> torch.Tensor:
        q = self._project(query) @ self.v  # (..., Tq)
        return self.combine_terms(prepared.unsqueeze(-2), q.unsqueeze(-1))

    # the decomposed score, per vector; written as GATConv writes it ((x · att).sum(-1)) so that
    # a graph layer over it gives GATConv's numbers
    def key_terms(self, keys: torch.Tensor) -> torch.Tensor:
        return self._plus_bias((self._project(keys) * self.u).sum(-1))  # (..., Tk)

    def query_terms(self, query: torch.Tensor) -> torch.Tensor:
        return (self._project(query) * self.v).sum(-1)  # (..., Tq)

    def prepared_terms(self, prepared: torch.Tensor) -> torch.Tensor:
        return prepared

    def combine_terms(self, key_term: torch.Tensor, query_term: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(key_term + query_term, self.negative_slope)

    @classmethod
    def stacked_terms(cls, scorers: Sequence["GATScorer"],
                      x: torch.Tensor) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
        """GATConv's (x · att_src).sum(-1), (x · att_dst).sum(-1) over u, v stacked to (J, C)
        (plus the heads' biases b, (J,), on the key terms)."""
        if any(s.W is not None for s in scorers):
            return None
        u = torch.stack([s.u for s in scorers])
        v = torch.stack([s.v for s in scorers])
        key = (x * u).sum(-1)
        if scorers[0].b is not None:
            key = key + torch.stack([s.b for s in scorers])
        return key, (x * v).sum(-1)

    def reset_parameters(self, heads: PositiveInt = 1) -> None:
        """u, v as GATConv's ``att_src`` / ``att_dst`` (1, J, C): glorot, bound √(6 / (J + C));
        with ``init='per_head'`` as one head's (C, 1) kernel: √(6 / (C + 1)). b (if any) = 0."""
        for t in (self.u, self.v):
            fan_out = 1 if self.init == "per_head" else heads
            bound = math.sqrt(6.0 / (fan_out + t.shape[-1]))
            with torch.no_grad():
                t.uniform_(-bound, bound)
        if self.b is not None:
            nn.init.zeros_(self.b)
