"""MLP scorer: a(k, q) = MLP([k; q]).

Source: Bahdanau, Cho & Bengio 2015, §3.1, eq. (6): the alignment model a(s_{i−1}, h_j) is a
feed-forward network trained jointly with the rest. The first layer acts on the concatenation
[k; q]; since W[k; q] = W_k k + W_q q, it is computed as two projections broadcast over all
(query, key) pairs instead of materialising Tq·Tk concatenations. With one hidden layer, tanh and
no biases this is the additive scorer.
"""

from typing import Literal

import torch
from torch import nn

from attnflow.blocks.scorers.base import Scorer
from attnflow.config.registry import SCORERS, PositiveInt

_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU}


@SCORERS.register("mlp")
class MLPScorer(Scorer):
    """a(k, q) = W_L σ(… σ(W_1 [k; q] + b_1) …) + b_L, ``layers`` hidden layers."""

    def __init__(self, query_dim: int, key_dim: int, *, hidden_dim: PositiveInt = 128,
                 layers: PositiveInt = 1,
                 activation: Literal["tanh", "relu", "gelu"] = "tanh"):
        super().__init__(query_dim, key_dim)
        self.first_k = nn.Linear(key_dim, hidden_dim, bias=True)
        self.first_q = nn.Linear(query_dim, hidden_dim, bias=False)
        act = _ACTIVATIONS[activation]
        rest = [act()]
        for _ in range(layers - 1):
            rest += [nn.Linear(hidden_dim, hidden_dim), act()]
        rest.append(nn.Linear(hidden_dim, 1))
        self.rest = nn.Sequential(*rest)

    def prepare_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return self.first_k(keys)

    def score_prepared(self, query: torch.Tensor, prepared: torch.Tensor) -> torch.Tensor:
        h = self.first_q(query).unsqueeze(-2) + prepared.unsqueeze(-3)
        return self.rest(h).squeeze(-1)
