"""Multi-head attention: cʲ = Attn(W_qʲ q, W_kʲ H, W_vʲ H), j = 1..J, then an aggregator.

Vaswani et al. 2017, §3.2.2; aggregation by mean (Veličković et al. 2018, eq. (6)), concat or
concat + W^O; ``shared_kv``: W_k ≡ W_v. The J projections are one matrix each, split by a reshape.

Relative positions (Shaw, Uszkoreit & Vaswani 2018, eq. (3)–(4)), with δ = ``relative_distance``:

    c_j = Σ_i (v_i + wᵛ_{i⊟j}) SoftMax_i a(k_i + wᵏ_{i⊟j}, q_j),   i⊟j = clip(i − j, −δ, δ)

wᵏ, wᵛ shared by the heads. A dot-product scorer splits the score into Q Kᵀ + Q Wᵏᵀ gathered by
distance (Shaw et al. §3.3); any other scorer gets k_i + wᵏ_{i⊟j} per pair. The value term adds
up the weights of each distance (2δ+1 bins) times Wᵛ. Query row t is at ``query_offset + t``.

``backend`` chooses the path (:mod:`attnflow.blocks.attention.functional`); relative positions with
an s·qᵀk scorer take FlexAttention too (:func:`attnflow.blocks.attention.flex.flex_relative`).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from attnflow.blocks.attention.base import AttentionBlock
from attnflow.blocks.attention.flex import flex_relative
from attnflow.blocks.attention.functional import (Backend, attend, causal_mask, check_backend,
                                                  choose_path)
from attnflow.config.registry import (AGGREGATORS, ATTENTIONS, NORMALIZERS, SCORERS, BlockSpec,
                               ConfigError, PositiveInt, Probability)


def relative_index(tq: int, tk: int, max_distance: int, query_offset: int = 0,
                   device=None) -> torch.Tensor:
    """(Tq, Tk) long: clip(i − j, −δ, δ) + δ for query position j = offset + t, key position i."""
    j = torch.arange(query_offset, query_offset + tq, device=device).unsqueeze(1)
    i = torch.arange(tk, device=device).unsqueeze(0)
    return (i - j).clamp(-max_distance, max_distance) + max_distance


def check_heads(name: str, query_dim: int, heads: int, head_dim: Optional[int],
                at: str = "attention", size: str = "model.d_model of a Transformer or BERT, "
                                                      "model.decoder.hidden_dim of an RNN decoder") -> None:
    """Without ``head_dim``, ``heads`` must divide the query size (``at``: where the fields are
    set; ``size``: where the query size comes from)."""
    if head_dim is None and query_dim % heads:
        raise ConfigError(
            f"attention '{name}': the query size {query_dim} ({size}) is not divisible by heads "
            f"{heads}; change {at}.heads or set {at}.head_dim")


def check_relative_backend(backend: str, scorer) -> None:
    """Relative positions run on FlexAttention (s·qᵀk scorers) or explicitly, never on SDPA."""
    if backend == "sdpa":
        raise ConfigError("attention.backend=sdpa has no relative-position terms; use "
                          "backend=flex (scaled_dot, dot), explicit or auto")
    if backend == "flex" and scorer.sdpa_scale is None:
        raise ConfigError("attention.backend=flex with relative positions needs scorer=scaled_dot "
                          "or dot; use backend=explicit or auto")


@ATTENTIONS.register("multihead")
class MultiHeadAttention(AttentionBlock):
    """J projected heads and an aggregator.

    Shape: query (B, Tq, Dq), keys (B, Tk, Dk), values (B, Tk, Dv), mask broadcastable to
    (B, Tq, Tk) -> context (B, Tq, output_dim), weights (B, J, Tq, Tk) or None.
    """

    def __init__(self, query_dim: int, key_dim: int, value_dim: int, self_attention: bool = False,
                 relative_distance: Optional[PositiveInt] = None, *, heads: PositiveInt = 8,
                 head_dim: Optional[PositiveInt] = None,
                 scorer: BlockSpec["scorer"] = {"name": "scaled_dot"},
                 normalizer: BlockSpec["normalizer"] = {"name": "softmax"},
                 aggregator: BlockSpec["aggregator"] = {"name": "concat_proj"},
                 dropout: Probability = 0.0, bias: bool = True, shared_kv: bool = False,
                 backend: Backend = "auto"):
        super().__init__()
        name = self.registry_name
        check_heads(name, query_dim, heads, head_dim)
        if head_dim is None:
            head_dim = query_dim // heads
        if shared_kv and key_dim != value_dim:
            raise ConfigError(f"attention '{name}': shared_kv needs key_dim == value_dim")
        self.heads, self.head_dim, self.dropout, self.shared_kv = heads, head_dim, dropout, shared_kv
        self.backend = backend
        inner = heads * head_dim
        self.q_proj = nn.Linear(query_dim, inner, bias=bias)
        self.k_proj = nn.Linear(key_dim, inner, bias=bias)
        self.v_proj = None if shared_kv else nn.Linear(value_dim, inner, bias=bias)
        self.scorer = SCORERS.build(scorer, head_dim, head_dim)
        self.normalizer = NORMALIZERS.build(normalizer)
        self.aggregator = AGGREGATORS.build(aggregator, heads, head_dim, query_dim)
        self.output_dim = self.aggregator.output_dim
        self.max_distance = relative_distance
        check_backend("attention", backend, self.scorer, self.normalizer, dropout)
        if relative_distance is not None:
            check_relative_backend(backend, self.scorer)
            n = 2 * relative_distance + 1
            self.rel_k = nn.Parameter(torch.randn(n, head_dim) * head_dim ** -0.5)
            self.rel_v = nn.Parameter(torch.randn(n, head_dim) * head_dim ** -0.5)

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

    def prepare_projected(self, k: torch.Tensor, v: torch.Tensor):
        if self.max_distance is not None:  # wᵏ is added to the raw keys before the scorer's preparation
            return k, v
        return self.scorer.prepare_keys(k), v

    def attend(self, query: torch.Tensor, memory, mask: Optional[torch.Tensor] = None, *,
               causal: bool = False, need_weights: bool = False, query_offset: int = 0
               ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        keys, values = memory
        q = self._split(self.q_proj(query))
        return self._heads(q, keys, values, mask, causal, need_weights, query_offset)

    def forward(self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                mask: Optional[torch.Tensor] = None, *, causal: bool = False,
                need_weights: bool = False, query_offset: int = 0
                ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        if query is keys and keys is values and self._fusable():
            q, k, v = self._qkv(query)  # self-attention: one matmul for q, k and v (as torch's MHA)
            return self._heads(q, *self.prepare_projected(k, v), mask, causal, need_weights,
                               query_offset)
        return self.attend(query, self.prepare(keys, values), mask, causal=causal,
                           need_weights=need_weights, query_offset=query_offset)

    def _heads(self, q, keys, values, mask, causal, need_weights, query_offset):
        """All heads at once: q (B, J, Tq, d), prepared keys and values (B, J, Tk, d)."""
        if mask is not None:
            mask = mask.unsqueeze(-3)  # the head dimension
        dropout = self.dropout if self.training else 0.0
        if self.max_distance is None:
            context, weights = attend(self.scorer, self.normalizer, q, keys, values, mask,
                                      causal=causal, dropout=dropout, need_weights=need_weights,
                                      backend=self.backend)
            return self.aggregator(context), weights
        tq, tk = q.shape[-2], keys.shape[-2]
        if self._flex_relative(q, keys, dropout, need_weights, query_offset):
            context = flex_relative(q, keys, values, self.rel_k, self.rel_v, self.scorer.sdpa_scale,
                                    self.max_distance, mask, causal)
            return self.aggregator(context), None
        index = relative_index(tq, tk, self.max_distance, query_offset, q.device)
        scores = self.relative_scores(q, keys, index)
        if causal:
            future = causal_mask(tq, tk, q.device)
            mask = future if mask is None else mask & future
        weights = self.normalizer(scores, mask)
        dropped = F.dropout(weights, dropout) if dropout > 0 else weights
        # Σ_i α_ji wᵛ_{i⊟j}: add up the weights of each distance, then one (2δ+1) × d matmul
        bins = dropped.new_zeros(*dropped.shape[:-1], self.rel_v.shape[0])
        bins.scatter_add_(-1, index.expand_as(dropped), dropped)
        context = dropped @ values + bins @ self.rel_v
        return self.aggregator(context), (weights if need_weights else None)

    def _flex_relative(self, q, keys, dropout, need_weights, query_offset) -> bool:
        """Relative self-attention on FlexAttention: an s·qᵀk scorer, Tq = Tk, no offset."""
        if self.scorer.sdpa_scale is None or q.shape[-2] != keys.shape[-2] or query_offset:
            return False
        return choose_path(self.backend, self.scorer, self.normalizer, q, dropout, need_weights,
                           sdpa_fits=False) == "flex"

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

    def _fusable(self) -> bool:
        return (self.v_proj is not None and self.q_proj.bias is not None
                and self.q_proj.in_features == self.k_proj.in_features == self.v_proj.in_features)

    def extra_repr(self) -> str:
        return "" if self.max_distance is None else f"relative_distance={self.max_distance}"

    def _qkv(self, x: torch.Tensor):
        """Per-head q, k, v (B, J, T, d) of x from one matmul (needs ``_fusable()``)."""
        w = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])
        b = torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])
        return tuple(self._split(t) for t in F.linear(x, w, b).chunk(3, dim=-1))
