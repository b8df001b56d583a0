"""Single-head attention: c = Σ_i v_i norm_i a(k_i, q).

Bahdanau, Cho & Bengio 2015, eq. (5)–(6), in the c = Attn(q, K, V) form of Vaswani et al. 2017,
§3.2. No projections beyond the scorer's (``multihead`` with ``heads: 1`` projects). ``backend``:
the path (SDPA, FlexAttention, explicit; :mod:`attnflow.blocks.attention.functional`).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from attnflow.blocks.attention.base import AttentionBlock
from attnflow.blocks.attention.functional import Backend, attend, check_backend
from attnflow.config.registry import (ATTENTIONS, NORMALIZERS, SCORERS, BlockSpec, ConfigError,
                               PositiveInt, Probability)


@ATTENTIONS.register("single")
class Attention(AttentionBlock):
    """c = Σ_i v_i norm_i a(k_i, q): query (B, Tq, Dq) -> context (B, Tq, Dv), α (B, Tq, Tk)."""

    plain = True

    def __init__(self, query_dim: int, key_dim: int, value_dim: int, self_attention: bool = False,
                 relative_distance: Optional[PositiveInt] = None, *,
                 scorer: BlockSpec["scorer"] = {"name": "additive"},
                 normalizer: BlockSpec["normalizer"] = {"name": "softmax"},
                 dropout: Probability = 0.0, backend: Backend = "auto"):
        super().__init__()
        if relative_distance is not None:
            raise ConfigError("attention 'single' has no relative-position terms; use "
                              "attention=multihead with positional=relative")
        self.scorer = SCORERS.build(scorer, query_dim, key_dim)
        self.normalizer = NORMALIZERS.build(normalizer)
        self.dropout, self.backend = dropout, backend
        check_backend("attention", backend, self.scorer, self.normalizer, dropout)
        self.output_dim = value_dim
        self.heads = 1

    def attend(self, query: torch.Tensor, memory, mask: Optional[torch.Tensor] = None, *,
               causal: bool = False, need_weights: bool = False, query_offset: int = 0
               ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        keys, values = memory
        return attend(self.scorer, self.normalizer, query, keys, values, mask, causal=causal,
                      dropout=self.dropout if self.training else 0.0, need_weights=need_weights,
                      backend=self.backend)
