"""Single-head attention: c = Σ_i v_i norm_i a(k_i, q).

Source: seed 000 ("Формула внимания": c = Attn(q, K, V)), Bahdanau et al. 2015 (the decoder's
context c_t = Σ_i α_ti h_i), seed 001. No projections of q, k, v beyond those of the scorer; for
projected q/k/v use ``multihead`` (with ``heads: 1`` for a single projected head).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import nn

from attnflow.blocks.attention.functional import attend
from attnflow.registry import NORMALIZERS, SCORERS, BlockSpec, ATTENTIONS


@ATTENTIONS.register("single")
class Attention(nn.Module):
    """c = Σ_i v_i norm_i a(k_i, q) with a pluggable scorer and normaliser.

    Args:
        query_dim, key_dim, value_dim: sizes of q, k, v (context).
        scorer: the scorer's config (default additive).
        normalizer: the normaliser's config (default softmax).
        dropout: attention dropout on α (default 0.0).
    Shape:
        query (B, Tq, Dq), keys (B, Tk, Dk), values (B, Tk, Dv), mask bool broadcastable to
        (B, Tq, Tk) -> context (B, Tq, Dv), weights (B, Tq, Tk) or None.
    """

    def __init__(self, query_dim: int, key_dim: int, value_dim: int, *,
                 scorer: BlockSpec["scorer"] = {"name": "additive"},
                 normalizer: BlockSpec["normalizer"] = {"name": "softmax"},
                 dropout: float = 0.0):
        super().__init__()
        self.scorer = SCORERS.build(scorer, query_dim, key_dim)
        self.normalizer = NORMALIZERS.build(normalizer)
        self.dropout = dropout
        self.output_dim = value_dim
        self.heads = 1

    def prepare(self, keys: torch.Tensor, values: torch.Tensor):
        """Work on the keys that does not depend on the query (done once per sequence)."""
        return self.scorer.prepare_keys(keys), values

    def attend(self, query: torch.Tensor, memory, mask: Optional[torch.Tensor] = None, *,
               causal: bool = False, need_weights: bool = False
               ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        keys, values = memory
        return attend(self.scorer, self.normalizer, query, keys, values, mask, causal=causal,
                      dropout=self.dropout if self.training else 0.0, need_weights=need_weights)

    def forward(self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                mask: Optional[torch.Tensor] = None, *, causal: bool = False,
                need_weights: bool = False) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        return self.attend(query, self.prepare(keys, values), mask, causal=causal,
                           need_weights=need_weights)
