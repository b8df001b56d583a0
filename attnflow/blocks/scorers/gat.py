"""GAT scorer: a(k, q) = LeakyReLU(uᵀk + vᵀq).

Source: Veličković et al. 2018, "Graph attention networks", §2.1, eq. (3): LeakyReLU(aᵀ[Wh_i ‖ Wh_t])
with a = [u; v], i.e. a(Wʲh_i, Wʲh_t) = LeakyReLU(uʲWʲh_i + vʲWʲh_t).
In a GAT layer the inputs are already the
projected Wh, so by default the scorer has only u and v; ``hidden_dim`` adds a shared projection W
for use on raw vectors (then query_dim must equal key_dim, as in the paper where k and q are node
features of one space). Negative slope 0.2 as in the paper.

The score is decomposable (``decomposable``): f(k) = uᵀWk, g(q) = vᵀWq, combine = LeakyReLU(f + g),
so a graph attention layer computes f and g once per node and gathers them per edge (as PyG's
``GATConv``). As one head of a J-head layer, ``reset_parameters(J)`` draws u and v as ``GATConv``
draws its ``att_src`` / ``att_dst`` (glorot over (J, C)).

Two options follow the authors' released TensorFlow layer (Veličković et al. 2018, code
PetarV-/GAT ``utils/layers.py``, ``attn_head``), where each term is ``conv1d(seq_fts, 1, 1)``:

- ``bias``: that convolution has a bias, so the logit is LeakyReLU(uᵀk + b₁ + vᵀq + b₂). Only the
  sum b = b₁ + b₂ matters; it moves every logit of the head before the LeakyReLU (the kink), so it
  changes α even though SoftMax ignores a constant added *after* the LeakyReLU. One learned
  scalar per head, initialised to zero (TensorFlow's bias default), added to the key term.
- ``init='per_head'``: the kernel (1, C, 1) of each head's term is drawn with its own glorot bound
  √(6 / (C + 1)) (TensorFlow's default glorot_uniform), not GATConv's √(6 / (J + C)) over the
  stacked (J, C) — about 1.3× larger for C = J = 8.
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
    """a(k, q) = LeakyReLU(uᵀWk + vᵀWq), W = I unless ``hidden_dim`` is set.

    Args:
        query_dim, key_dim: sizes of q and k (context).
        negative_slope: LeakyReLU slope (default 0.2).
        hidden_dim: if set, a shared projection W (hidden_dim × d) before u, v (default None).
        bias: a learned scalar b inside the LeakyReLU, LeakyReLU(uᵀWk + vᵀWq + b), as the
            authors' code (default False: the paper's equation and GATConv).
        init: how ``reset_parameters(heads)`` draws u and v: 'gatconv' (glorot over the heads'
            stacked (J, C)) or 'per_head' (glorot over each head's (C, 1), the authors' TensorFlow
            code) (default 'gatconv').
    Shape: query (..., Tq, Dq), keys (..., Tk, Dk) -> (..., Tq, Tk).
    """

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
