"""Attention pooling with a learned query (a "context vector").

Source: Yang et al. 2016, "Hierarchical attention networks for document classification", §2.2,
eq. (5)–(7):

    u_t = tanh(W h_t + b)            — a learned transformation of the keys
    α_t = SoftMax_t a(u_t, q)        — q is a learned query, a(·,·) a scorer (default dot: u_tᵀq),
                                       SoftMax any normaliser of the registry (default softmax)
    s   = Σ_t α_t h_t                — the pooled vector

Padded positions (mask False) get weight exactly 0. A row with no valid position (an empty
sentence or document) pools to the zero vector with all-zero weights instead of NaN.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import nn

from attnflow.config.registry import NORMALIZERS, POOLINGS, SCORERS, BlockSpec, PositiveFloat, PositiveInt


@POOLINGS.register("attention")
class AttentionPooling(nn.Module):
    """s = Σ_t h_t SoftMax_t a(tanh(W h_t + b), q).

    Args:
        input_dim: size D of the vectors h_t (context).
        dim: size of u_t and of the learned query q (default 100, as in Yang et al.).
        scorer: the scorer a(k, q) (default dot: uᵀq), built as ``scorer(dim, dim)``.
        normalizer: scores -> weights over the valid positions (default softmax).
        init_std: standard deviation of q's normal initialisation (default 0.1).
    Shape:
        h (B, T, D), mask (B, T) bool -> pooled (B, D), weights (B, T) (rows sum to 1, or to 0
        when a row has no valid position).
    """

    output_weights = True

    def __init__(self, input_dim: int, *, dim: PositiveInt = 100,
                 scorer: BlockSpec["scorer"] = {"name": "dot"},
                 normalizer: BlockSpec["normalizer"] = {"name": "softmax"},
                 init_std: PositiveFloat = 0.1):
        super().__init__()
        self.input_dim, self.output_dim = input_dim, input_dim
        self.proj = nn.Linear(input_dim, dim)
        self.query = nn.Parameter(torch.randn(dim) * init_std)
        self.scorer = SCORERS.build(scorer, dim, dim, path="pooling.scorer")
        self.normalizer = NORMALIZERS.build(normalizer, path="pooling.normalizer")

    def forward(self, h: torch.Tensor, mask: Optional[torch.Tensor] = None
                ) -> Tuple[torch.Tensor, torch.Tensor]:
        B, T, _ = h.shape
        if mask is None:
            mask = torch.ones(B, T, dtype=torch.bool, device=h.device)
        u = torch.tanh(self.proj(h))                                      # (B, T, dim)
        q = self.query.view(1, 1, -1).expand(B, 1, -1)                    # (B, 1, dim)
        scores = self.scorer.score(q, u).squeeze(1)                       # (B, T)
        weights = self.normalizer(scores, mask)
        pooled = (weights.unsqueeze(-1) * h).sum(1)
        return pooled, weights

    def extra_repr(self) -> str:
        return f"input_dim={self.input_dim}, dim={self.proj.out_features}"
