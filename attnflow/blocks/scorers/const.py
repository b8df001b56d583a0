"""Constant scorer: a(k, q) = 0 for every pair, so SoftMax gives uniform weights.

Source: the Const-GAT ablation (Veličković et al. 2018, §3.3 compare with a constant attention
mechanism; Brody et al. 2022 "How attentive are graph attention networks?" use the same baseline).
Over a neighbourhood N(t) SoftMax of a constant is 1/|N(t)|: mean aggregation (GCN-like); over a
sequence it is the mean of the keys. It has no parameters and works with any query/key sizes.
It is decomposable with zero terms, so a graph attention layer scores its edges with no per-edge
feature work.
"""

import torch

from attnflow.blocks.scorers.base import Scorer
from attnflow.config.registry import SCORERS


@SCORERS.register("const")
class ConstScorer(Scorer):
    """a(k, q) = 0 (uniform attention after SoftMax).

    Args:
        query_dim, key_dim: sizes of q and k (context; unused).
    Shape: query (..., Tq, Dq), keys (..., Tk, Dk) -> (..., Tq, Tk), all zeros.
    """

    decomposable = True

    def score_prepared(self, query: torch.Tensor, prepared: torch.Tensor) -> torch.Tensor:
        lead = torch.broadcast_shapes(query.shape[:-2], prepared.shape[:-2])
        return query.new_zeros(*lead, query.shape[-2], prepared.shape[-2])

    def key_terms(self, keys: torch.Tensor) -> torch.Tensor:
        return keys.new_zeros(keys.shape[:-1])

    def query_terms(self, query: torch.Tensor) -> torch.Tensor:
        return query.new_zeros(query.shape[:-1])

    def prepared_terms(self, prepared: torch.Tensor) -> torch.Tensor:
        return prepared.new_zeros(prepared.shape[:-1])

    def combine_terms(self, key_term: torch.Tensor, query_term: torch.Tensor) -> torch.Tensor:
        return key_term + query_term
