"""Cosine (content-based) scorer: a(k, q) = kᵀq / (‖k‖‖q‖).

Source: Graves, Wayne & Danihelka 2014 (Neural Turing Machines), §3.3.1 (focusing by content).
An optional learnable sharpness β multiplies the cosine (NTM's key strength); β = 1 by default
and is fixed unless ``learn_scale`` is set.
"""

import torch
import torch.nn.functional as F
from torch import nn

from attnflow.blocks.scorers.base import Scorer
from attnflow.config.registry import SCORERS


@SCORERS.register("cosine")
class CosineScorer(Scorer):
    """a(k, q) = β · kᵀq / (‖k‖‖q‖).

    Args:
        query_dim, key_dim: sizes of q and k (context; must be equal).
        scale: β, the factor on the cosine (default 1.0).
        learn_scale: learn β (default False).
        eps: floor on the norms (default 1e-8).
    Shape: query (..., Tq, D), keys (..., Tk, D) -> (..., Tq, Tk).
    """

    requires_equal_dims = True
    dot_product = True

    def __init__(self, query_dim: int, key_dim: int, *, scale: float = 1.0, learn_scale: bool = False,
                 eps: float = 1e-8):
        super().__init__(query_dim, key_dim)
        self.eps = eps
        self.scale = nn.Parameter(torch.tensor(float(scale)), requires_grad=learn_scale)

    def prepare_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return F.normalize(keys, dim=-1, eps=self.eps)

    def dot_query(self, query: torch.Tensor) -> torch.Tensor:
        return self.scale * F.normalize(query, dim=-1, eps=self.eps)
