"""Single-head attention: c = Σ_i v_i norm_i a(k_i, q).

Source: Bahdanau, Cho & Bengio 2015, eq. (5)–(6) (the decoder's context c_t = Σ_i α_ti h_i), in the
query/key/value form c = Attn(q, K, V) of Vaswani et al. 2017, §3.2. No projections of q, k, v
beyond those of the scorer; for projected q/k/v use ``multihead`` (with ``heads: 1`` for a single
projected head).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from attnflow.blocks.attention.base import AttentionBlock
from attnflow.blocks.attention.functional import attend
from attnflow.config.registry import (ATTENTIONS, NORMALIZERS, SCORERS, BlockSpec, ConfigError,
                               PositiveInt, Probability)


@ATTENTIONS.register("single")
class Attention(AttentionBlock):
    """c = Σ_i v_i norm_i a(k_i, q) with a pluggable scorer and normaliser.

    Args:
        query_dim, key_dim, value_dim: sizes of q, k, v (context).
        self_attention: queries and keys are one sequence (context; unused).
        relative_distance: δ of relative positions (context); this block has no relative terms,
            so anything but None is a ConfigError.
        scorer: the scorer's config (default additive).
        normalizer: the normaliser's config (default softmax).
        dropout: attention dropout on α (default 0.0).
    Shape:
        query (B, Tq, Dq), keys (B, Tk, Dk), values (B, Tk, Dv), mask bool broadcastable to
        (B, Tq, Tk) -> context (B, Tq, Dv), weights (B, Tq, Tk) or None.
    """

    plain = True

    def __init__(self, query_dim: int, key_dim: int, value_dim: int, self_attention: bool = False,
                 relative_distance: Optional[PositiveInt] = None, *,
                 scorer: BlockSpec["scorer"] = {"name": "additive"},
                 normalizer: BlockSpec["normalizer"] = {"name": "softmax"},
                 dropout: Probability = 0.0):
        super().__init__()
        if relative_distance is not None:
            raise ConfigError(
                "attention 'single' has no relative-position terms (no per-head wᵏ, wᵛ of Shaw et "
                "al. 2018), so positional=relative would do nothing with it; use attention=multihead "
                "or attention=relative_multihead")
        self.scorer = SCORERS.build(scorer, query_dim, key_dim)
        self.normalizer = NORMALIZERS.build(normalizer)
        self.dropout = dropout
        self.output_dim = value_dim
        self.heads = 1

    def attend(self, query: torch.Tensor, memory, mask: Optional[torch.Tensor] = None, *,
               causal: bool = False, need_weights: bool = False, query_offset: int = 0
               ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        keys, values = memory
        return attend(self.scorer, self.normalizer, query, keys, values, mask, causal=causal,
                      dropout=self.dropout if self.training else 0.0, need_weights=need_weights)
