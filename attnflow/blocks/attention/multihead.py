"""Multi-head attention: cʲ = Attn(W_qʲ q, W_kʲ H, W_vʲ H), j = 1..J, then an aggregator.

Source: seed 000 ("Многомерное внимание": J heads, each its own W_qʲ, W_kʲ, W_vʲ; aggregation by
mean, concat, or concat + W), seed 001; Vaswani et al. 2017. Projected q/k/v (seed 000):
a = (W_k h)ᵀ(W_q h′)/√d with value W_v h, and the option W_k ≡ W_v (``shared_kv``).

The J projections are one matrix each for q, k and v (J·d rows), split into heads by a reshape, so
no Python loop runs over heads. The scorer acts on each head's d-dimensional vectors (its own
parameters, if any, are shared by the heads). With scaled_dot/dot, softmax and no maps requested
the heads go through ``scaled_dot_product_attention`` together.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from attnflow.blocks.attention.functional import attend
from attnflow.registry import AGGREGATORS, ATTENTIONS, NORMALIZERS, SCORERS, BlockSpec


@ATTENTIONS.register("multihead")
class MultiHeadAttention(nn.Module):
    """J projected heads and an aggregator.

    Args:
        query_dim, key_dim, value_dim: sizes of q, k, v (context).
        heads: J (default 8).
        head_dim: d, the size of each head's q, k, v (default None: query_dim // heads).
        scorer: the scorer's config (default scaled_dot).
        normalizer: the normaliser's config (default softmax).
        aggregator: how heads combine (default concat_proj back to query_dim).
        dropout: attention dropout on α (default 0.0).
        bias: biases in the q, k, v projections (default True).
        shared_kv: W_k ≡ W_v, one matrix for keys and values (default False).
    Shape:
        query (B, Tq, Dq), keys (B, Tk, Dk), values (B, Tk, Dv), mask bool broadcastable to
        (B, Tq, Tk) -> context (B, Tq, output_dim), weights (B, J, Tq, Tk) or None.
    """

    def __init__(self, query_dim: int, key_dim: int, value_dim: int, *, heads: int = 8,
                 head_dim: Optional[int] = None,
                 scorer: BlockSpec["scorer"] = {"name": "scaled_dot"},
                 normalizer: BlockSpec["normalizer"] = {"name": "softmax"},
                 aggregator: BlockSpec["aggregator"] = {"name": "concat_proj"},
                 dropout: float = 0.0, bias: bool = True, shared_kv: bool = False):
        super().__init__()
        if heads < 1:
            raise ValueError(f"attention 'multihead': heads must be >= 1, got {heads}")
        if head_dim is None:
            if query_dim % heads:
                raise ValueError(
                    f"attention 'multihead': query_dim {query_dim} is not divisible by heads "
                    f"{heads}; set head_dim")
            head_dim = query_dim // heads
        if shared_kv and key_dim != value_dim:
            raise ValueError("attention 'multihead': shared_kv needs key_dim == value_dim")
        self.heads, self.head_dim, self.dropout, self.shared_kv = heads, head_dim, dropout, shared_kv
        inner = heads * head_dim
        self.q_proj = nn.Linear(query_dim, inner, bias=bias)
        self.k_proj = nn.Linear(key_dim, inner, bias=bias)
        self.v_proj = None if shared_kv else nn.Linear(value_dim, inner, bias=bias)
        self.scorer = SCORERS.build(scorer, head_dim, head_dim)
        self.normalizer = NORMALIZERS.build(normalizer)
        self.aggregator = AGGREGATORS.build(aggregator, heads, head_dim, query_dim)
        self.output_dim = self.aggregator.output_dim

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        # (B, T, J·d) -> (B, J, T, d)
        return x.unflatten(-1, (self.heads, self.head_dim)).transpose(-3, -2)

    def _project_kv(self, keys: torch.Tensor, values: torch.Tensor):
        if self.shared_kv:
            if values is keys:
                k = self.k_proj(keys)
                return k, k
            return self.k_proj(keys), self.k_proj(values)
        if values is keys and self.k_proj.bias is not None and self.v_proj.bias is not None:
            # one matmul for both projections when keys and values are one tensor
            w = torch.cat([self.k_proj.weight, self.v_proj.weight])
            b = torch.cat([self.k_proj.bias, self.v_proj.bias])
            return F.linear(keys, w, b).chunk(2, dim=-1)
        return self.k_proj(keys), self.v_proj(values)

    def project(self, keys: torch.Tensor, values: torch.Tensor):
        """Per-head keys and values (B, J, T, d), before the scorer prepares the keys."""
        k, v = self._project_kv(keys, values)
        return self._split(k), self._split(v)

    def prepare(self, keys: torch.Tensor, values: torch.Tensor):
        k, v = self.project(keys, values)
        return self.scorer.prepare_keys(k), v

    def attend(self, query: torch.Tensor, memory, mask: Optional[torch.Tensor] = None, *,
               causal: bool = False, need_weights: bool = False
               ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        keys, values = memory
        q = self._split(self.q_proj(query))
        if mask is not None:
            mask = mask.unsqueeze(-3)  # the head dimension
        context, weights = attend(self.scorer, self.normalizer, q, keys, values, mask,
                                  causal=causal, dropout=self.dropout if self.training else 0.0,
                                  need_weights=need_weights)
        return self.aggregator(context), weights

    def forward(self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                mask: Optional[torch.Tensor] = None, *, causal: bool = False,
                need_weights: bool = False) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        if query is keys and keys is values and self._fusable():
            return self._self_attention(query, mask, causal, need_weights)
        return self.attend(query, self.prepare(keys, values), mask, causal=causal,
                           need_weights=need_weights)

    def _fusable(self) -> bool:
        return (self.v_proj is not None and self.q_proj.bias is not None
                and self.q_proj.in_features == self.k_proj.in_features == self.v_proj.in_features)

    def _qkv(self, x: torch.Tensor):
        """Per-head q, k, v (B, J, T, d) of x from one matmul (needs ``_fusable()``)."""
        w = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])
        b = torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])
        return tuple(self._split(t) for t in F.linear(x, w, b).chunk(3, dim=-1))

    def _self_attention(self, x: torch.Tensor, mask: Optional[torch.Tensor], causal: bool,
                        need_weights: bool) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Self-attention with one matmul for the q, k and v projections (as torch's MHA)."""
        q, k, v = self._qkv(x)
        if mask is not None:
            mask = mask.unsqueeze(-3)
        context, weights = attend(self.scorer, self.normalizer, q, self.scorer.prepare_keys(k), v,
                                  mask, causal=causal,
                                  dropout=self.dropout if self.training else 0.0,
                                  need_weights=need_weights)
        return self.aggregator(context), weights
