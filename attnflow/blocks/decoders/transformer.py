"""Transformer decoder: masked self-attention, encoder–decoder attention, FFN; N layers.

Vaswani et al. 2017, §3.1, §3.2.3:

    h_t  = E y_{t−1}·√d + p_t
    h′_t = LN(h_t + Dropout(MH Attn(h_t, H_≤t, H_≤t)))         (causal self-attention)
    h″_t = LN(h′_t + Dropout(MH Attn(h′_t, Z, Z)))             (encoder–decoder attention)
    z_t  = LN(h″_t + Dropout(FFN(h″_t))),   p(y_t | y_<t, x) = SoftMax(W_o z_t + b_o)

Pre-LN (``norm: pre``): x + Dropout(Sublayer(LN(x))) and a final LN. With relative positions
(Shaw et al. 2018) only the self-attention carries them. ``step`` decodes with a key/value cache
per layer, so step t costs O(t).
"""

from __future__ import annotations

import math
from typing import Any, Dict, Literal, Optional, Tuple

import torch
from torch import nn

from attnflow.blocks.decoders.base import Decoder
from attnflow.blocks.dropout import Dropout
from attnflow.blocks.encoders.transformer import FeedForward, build_attention
from attnflow.config.registry import DECODERS, POSITIONALS, BlockSpec, PositiveInt, Probability


def _with_heads(weights: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """(B, T, S) weights of a one-head block as (B, 1, T, S); (B, J, T, S) unchanged."""
    return weights.unsqueeze(1) if weights is not None and weights.dim() == 3 else weights


class TransformerDecoderLayer(nn.Module):
    """Causal self-attention, encoder–decoder attention, FFN: x (B, T, d) -> (B, T, d), α."""

    def __init__(self, dim: int, memory_dim: int, ffn_dim: int, attention: Dict[str, Any],
                 positional=None, dropout: Probability = 0.1, activation_dropout: Probability = 0.0,
                 norm: str = "post"):
        super().__init__()
        self.pre = norm == "pre"
        self.self_attn = build_attention(attention, dim, dim, True, positional)
        self.cross_attn = build_attention(attention, dim, memory_dim, False)
        self.ffn = FeedForward(dim, ffn_dim, activation_dropout)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.dropout = Dropout(dropout)

    def _sublayer(self, x: torch.Tensor, norm: nn.LayerNorm, fn):
        """x + Dropout(fn(LN x)) (pre-LN) or LN(x + Dropout(fn(x))) (post-LN); fn -> (out, extra)."""
        out, extra = fn(norm(x) if self.pre else x)
        x = x + self.dropout(out)
        return (x if self.pre else norm(x)), extra

    def forward(self, x: torch.Tensor, memory: torch.Tensor, memory_mask: Optional[torch.Tensor],
                need_weights: bool = False):
        x, _ = self._sublayer(x, self.norm1, lambda h: self.self_attn(h, h, h, None, causal=True))
        x, w = self._sublayer(x, self.norm2, lambda h: self.cross_attn(
            h, memory, memory, memory_mask, need_weights=need_weights))
        x, _ = self._sublayer(x, self.norm3, lambda h: (self.ffn(h), None))
        return x, _with_heads(w)

    def step(self, x: torch.Tensor, cache: Tuple[torch.Tensor, torch.Tensor], prepared,
             memory_mask: Optional[torch.Tensor], position: int, need_weights: bool = False):
        """One new position: x (B, 1, d); cache = keys/values of positions < ``position``."""
        new_cache = []

        def self_attention(h):
            # the cache holds projected keys and values; the scorer prepares the whole cache
            att = self.self_attn
            k, v = att.project(h, h)
            if cache is not None:
                k, v = torch.cat([cache[0], k], dim=-2), torch.cat([cache[1], v], dim=-2)
            new_cache.append((k, v))
            return att.attend(h, att.prepare_projected(k, v), None, query_offset=position)

        x, _ = self._sublayer(x, self.norm1, self_attention)
        x, w = self._sublayer(x, self.norm2, lambda h: self.cross_attn.attend(
            h, prepared, memory_mask, need_weights=need_weights))
        x, _ = self._sublayer(x, self.norm3, lambda h: (self.ffn(h), None))
        return x, new_cache[0], _with_heads(w)


@DECODERS.register("transformer_decoder")
class TransformerDecoder(Decoder):
    """N decoder layers over E y·√d + p, then W_o (tied to E by default)."""

    static_state = ("memory", "mask")

    def __init__(self, vocab_size: int, memory_dim: int, init_dim: int, *,
                 d_model: PositiveInt = 512, layers: PositiveInt = 6, ffn_dim: PositiveInt = 2048,
                 dropout: Probability = 0.1, activation_dropout: Probability = 0.0,
                 norm: Literal["post", "pre"] = "post",
                 positional: BlockSpec["positional"] = {"name": "sinusoidal"},
                 attention: BlockSpec["attention"] = {"name": "multihead"},
                 scale_embeddings: bool = True, tie_output: bool = True):
        super().__init__()
        self.d_model, self.tie_output = d_model, tie_output
        self.embed_scale = math.sqrt(d_model) if scale_embeddings else 1.0
        self.embedding = nn.Embedding(vocab_size, d_model)
        if scale_embeddings:
            nn.init.normal_(self.embedding.weight, 0.0, d_model ** -0.5)
        self.positional = POSITIONALS.build(positional, d_model)
        self.dropout = Dropout(dropout)
        self.layers = nn.ModuleList(
            TransformerDecoderLayer(d_model, memory_dim, ffn_dim, attention, self.positional,
                                    dropout, activation_dropout, norm)
            for _ in range(layers))
        self.final_norm = nn.LayerNorm(d_model) if norm == "pre" else nn.Identity()
        self.out = nn.Linear(d_model, vocab_size)
        if tie_output:
            self.out.weight = self.embedding.weight

    @property
    def weights_layer(self) -> Tuple[int, int]:
        """The weights are the last layer's encoder–decoder attention: (N, N)."""
        return len(self.layers), len(self.layers)

    def share_embedding(self, embedding: nn.Embedding) -> None:
        """Use ``embedding`` (e.g. the source embedding of a shared vocabulary) as E (and W_o)."""
        self.embedding = embedding
        if self.tie_output:
            self.out.weight = embedding.weight

    def _embed(self, tokens: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return self.dropout(self.positional(self.embedding(tokens) * self.embed_scale, offset))

    def forward(self, tgt_in: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor,
                init: Optional[torch.Tensor] = None, need_weights: bool = False,
                positions: Optional[torch.Tensor] = None
                ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        x = self._embed(tgt_in)
        mask = memory_mask.unsqueeze(1)  # (B, 1, S)
        weights = None
        for i, layer in enumerate(self.layers):
            x, weights = layer(x, memory, mask, need_weights and i == len(self.layers) - 1)
        x = self.final_norm(x if positions is None else x[positions])
        return self.out(x), (weights.transpose(1, 2) if weights is not None else None)

    def start(self, memory: torch.Tensor, memory_mask: torch.Tensor,
              init: Optional[torch.Tensor] = None) -> Dict[str, Any]:
        """State: the projected memory per layer, the mask, empty self-attention caches, t = 0."""
        return {"memory": [layer.cross_attn.prepare(memory, memory) for layer in self.layers],
                "mask": memory_mask.unsqueeze(1), "cache": [None] * len(self.layers), "position": 0}

    def step(self, y_prev: torch.Tensor, state: Dict[str, Any], need_weights: bool = False):
        t = state["position"]
        x = self._embed(y_prev.unsqueeze(1), t)
        caches, weights = [], None
        for i, layer in enumerate(self.layers):
            x, cache, weights = layer.step(x, state["cache"][i], state["memory"][i], state["mask"],
                                           t, need_weights and i == len(self.layers) - 1)
            caches.append(cache)
        logits = self.out(self.final_norm(x)).squeeze(1)
        state = {**state, "cache": caches, "position": t + 1}
        return logits, state, (weights.squeeze(-2) if weights is not None else None)
