"""Multi-head self-attention with relative position representations.

Source: Shaw, Uszkoreit & Vaswani 2018, "Self-attention with relative position representations";
seed 000 ("Более современный способ учёта относительных позиций"):

    c_j = Σ_i (v_i + wᵛ_{i⊟j}) SoftMax_i a(k_i + wᵏ_{i⊟j}, q_j),   i⊟j = clip(i − j, −δ, δ)

per head, with q_j, k_i, v_i the head's projections (W_q, W_k, W_v as in ``multihead``) and
wᵏ_r, wᵛ_r ∈ R^d, r = −δ..δ, learned and shared by the heads of the layer (as in the paper).

Computation (no loop over tokens or heads). With a dot-product scorer (dot, scaled_dot: s·qᵀk)
the score splits as s·(q_jᵀk_i + q_jᵀwᵏ_{i⊟j}): Q Kᵀ is one batched matmul and Q Wᵏᵀ is
(Tq × (2δ+1)), gathered by the relative index — the efficient form of Shaw et al. §3.3. Any other
scorer gets the keys k_i + wᵏ_{i⊟j} for every pair (a (Tq, Tk, d) tensor per head). The value
term Σ_i α_ji wᵛ_{i⊟j} sums the weights of each distance (a scatter-add into 2δ+1 bins) and
multiplies by Wᵛ.

Positions: query row t has position ``query_offset + t``, key row i has position i (a decoder
generating step t attends from position t to cached keys 0..t).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from attnflow.blocks.attention.functional import causal_mask
from attnflow.blocks.attention.multihead import MultiHeadAttention
from attnflow.registry import ATTENTIONS, BlockSpec, ConfigError


def relative_index(tq: int, tk: int, max_distance: int, query_offset: int = 0,
                   device=None) -> torch.Tensor:
    """(Tq, Tk) long: clip(i − j, −δ, δ) + δ for query position j = offset + t, key position i."""
    j = torch.arange(query_offset, query_offset + tq, device=device).unsqueeze(1)
    i = torch.arange(tk, device=device).unsqueeze(0)
    return (i - j).clamp(-max_distance, max_distance) + max_distance


@ATTENTIONS.register("relative_multihead")
class RelativeMultiHeadAttention(MultiHeadAttention):
    """``multihead`` whose scores and values carry clipped relative distances (Shaw et al. 2018).

    Args:
        query_dim, key_dim, value_dim: sizes of q, k, v (context).
        self_attention: the parent attends within one sequence, so i − j means something (context;
            default False: building it elsewhere, e.g. in an RNN decoder attending to the
            source, is a ConfigError).
        max_distance: δ, the clipping distance (default 16).
        heads, head_dim, scorer, normalizer, aggregator, dropout, bias, shared_kv: as ``multihead``.
    Shape:
        query (B, Tq, Dq), keys (B, Tk, Dk), values (B, Tk, Dv), mask bool broadcastable to
        (B, Tq, Tk) -> context (B, Tq, output_dim), weights (B, J, Tq, Tk) or None.
    """

    def __init__(self, query_dim: int, key_dim: int, value_dim: int, self_attention: bool = False,
                 *, max_distance: int = 16, heads: int = 8, head_dim: Optional[int] = None,
                 scorer: BlockSpec["scorer"] = {"name": "scaled_dot"},
                 normalizer: BlockSpec["normalizer"] = {"name": "softmax"},
                 aggregator: BlockSpec["aggregator"] = {"name": "concat_proj"},
                 dropout: float = 0.0, bias: bool = True, shared_kv: bool = False):
        if not self_attention:
            raise ConfigError(
                "attention 'relative_multihead' (Shaw et al. 2018) scores key i against query j by "
                "their distance i − j within one sequence (self-attention); its parent here attends "
                "across two sequences (e.g. an RNN decoder state over source positions), where i − j "
                "means nothing. Use attention=multihead, or model=transformer positional=relative")
        if max_distance < 0:
            raise ValueError(f"attention 'relative_multihead': max_distance must be >= 0, got {max_distance}")
        super().__init__(query_dim, key_dim, value_dim, heads=heads, head_dim=head_dim,
                         scorer=scorer, normalizer=normalizer, aggregator=aggregator,
                         dropout=dropout, bias=bias, shared_kv=shared_kv)
        self.max_distance = max_distance
        n = 2 * max_distance + 1
        self.rel_k = nn.Parameter(torch.randn(n, self.head_dim) * self.head_dim ** -0.5)
        self.rel_v = nn.Parameter(torch.randn(n, self.head_dim) * self.head_dim ** -0.5)

    # -- memory: raw split keys (wᵏ is added before the scorer's key preparation) ---------------
    def prepare(self, keys: torch.Tensor, values: torch.Tensor):
        return self.project(keys, values)

    def relative_scores(self, q: torch.Tensor, k: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Raw scores (B, J, Tq, Tk): a(k_i + wᵏ_{i⊟j}, q_j) for every pair."""
        scale = self.scorer.sdpa_scale
        if scale is not None:  # s·(qᵀk + qᵀwᵏ): gather the (Tq, 2δ+1) table by distance
            content = self.scorer.score_prepared(q, k)
            table = q @ self.rel_k.t()  # (B, J, Tq, 2δ+1)
            position = table.gather(-1, index.expand(*table.shape[:-1], index.shape[-1]))
            return content + scale * position
        keys = k.unsqueeze(-3) + self.rel_k[index]  # (B, J, Tq, Tk, d)
        return self.scorer.score_prepared(q.unsqueeze(-2), self.scorer.prepare_keys(keys)).squeeze(-2)

    def attend(self, query: torch.Tensor, memory, mask: Optional[torch.Tensor] = None, *,
               causal: bool = False, need_weights: bool = False, query_offset: int = 0
               ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        k, v = memory
        q = self._split(self.q_proj(query))
        return self._relative(q, k, v, mask, causal, need_weights, query_offset)

    def _relative(self, q, k, v, mask, causal, need_weights, query_offset):
        tq, tk = q.shape[-2], k.shape[-2]
        index = relative_index(tq, tk, self.max_distance, query_offset, q.device)
        scores = self.relative_scores(q, k, index)
        if mask is not None:
            mask = mask.unsqueeze(-3)  # the head dimension
        if causal:
            future = causal_mask(tq, tk, q.device)
            mask = future if mask is None else mask & future
        weights = self.normalizer(scores, mask)
        dropped = F.dropout(weights, self.dropout) if self.training and self.dropout > 0 else weights
        # Σ_i α_ji wᵛ_{i⊟j}: add up the weights of each distance, then one (2δ+1) × d matmul
        bins = dropped.new_zeros(*dropped.shape[:-1], self.rel_v.shape[0])
        bins.scatter_add_(-1, index.expand_as(dropped), dropped)
        context = dropped @ v + bins @ self.rel_v
        return self.aggregator(context), (weights if need_weights else None)

    def forward(self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                mask: Optional[torch.Tensor] = None, *, causal: bool = False,
                need_weights: bool = False, query_offset: int = 0
                ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        if query is keys and keys is values and self._fusable():
            q, k, v = self._qkv(query)
            return self._relative(q, k, v, mask, causal, need_weights, query_offset)
        return self.attend(query, self.prepare(keys, values), mask, causal=causal,
                           need_weights=need_weights, query_offset=query_offset)

    def extra_repr(self) -> str:
        return f"max_distance={self.max_distance}"
