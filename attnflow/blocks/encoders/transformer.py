"""Transformer encoder: N layers of multi-head self-attention and a position-wise FFN.

Vaswani et al. 2017, §3.1, §3.3 (FFN, eq. (2)), §5.4 (residual dropout):

    h_i = x_i + p_i,   h″ = LN(h + Dropout(MH Attn(h, H, H))),   z = LN(h″ + Dropout(FFN(h″)))
    FFN(h) = W₂ g(W₁ h + b₁) + b₂,   g = ReLU, or GELU as BERT (Devlin et al. 2019; Hendrycks &
    Gimpel 2016)

Pre-LN (``norm: pre``, Xiong et al. 2020): h + Dropout(Sublayer(LN(h))) and a final LN. The
positional encoding is added here; padding keys are masked and padding rows are zero. LN's ε is
``norm_eps`` (BERT's released weights: 1e-12).
"""

from __future__ import annotations

from typing import Any, Dict, Literal, Optional

import torch
import torch.nn.functional as F
from torch import nn

from attnflow.blocks.attention.functional import padding_mask
from attnflow.blocks.dropout import Dropout
from attnflow.blocks.encoders.base import Encoder
from attnflow.config.registry import (ATTENTIONS, ENCODERS, POSITIONALS, BlockSpec, ConfigError,
                               PositiveFloat, PositiveInt, Probability)


def build_attention(cfg: Dict[str, Any], query_dim: int, key_dim: int, self_attention: bool,
                    positional=None):
    """The attention block of one sublayer; self-attention under a relative positional block
    gets its δ. Its output is added to the residual stream, so it must give ``query_dim``."""
    relative = self_attention and positional is not None and positional.relative
    block = ATTENTIONS.build(cfg, query_dim, key_dim, key_dim, self_attention,
                             positional.max_distance if relative else None, path="attention")
    out = block.output_dim
    if out != query_dim:
        raise ConfigError(
            f"attention '{block.registry_name}' gives {out} features, but a Transformer layer adds "
            f"it to its residual stream of {query_dim} features (d_model); use aggregator "
            f"concat_proj, or concat with heads × head_dim = {query_dim}")
    return block


ACTIVATIONS = {"relu": torch.relu, "gelu": F.gelu}  # gelu: the exact (erf) form, as BERT's


class FeedForward(nn.Module):
    """FFN(h) = W₂ Dropout(g(W₁ h + b₁)) + b₂, g = ReLU (Vaswani et al. 2017) or GELU (Devlin et
    al. 2019); the inner dropout is off by default."""

    def __init__(self, dim: int, hidden: int, dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        self.linear1 = nn.Linear(dim, hidden)
        self.linear2 = nn.Linear(hidden, dim)
        self.dropout = Dropout(dropout) if dropout > 0 else nn.Identity()
        self.activation = ACTIVATIONS[activation]

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(h))))


class TransformerEncoderLayer(nn.Module):
    """Self-attention and FFN sublayers: x (B, T, d), mask (B, 1, T) -> (B, T, d)."""

    def __init__(self, dim: int, ffn_dim: int, attention: Dict[str, Any], positional=None,
                 dropout: Probability = 0.1, activation_dropout: Probability = 0.0,
                 norm: str = "post", activation: str = "relu", norm_eps: float = 1e-5):
        super().__init__()
        self.pre = norm == "pre"
        self.self_attn = build_attention(attention, dim, dim, True, positional)
        self.ffn = FeedForward(dim, ffn_dim, activation_dropout, activation)
        self.norm1, self.norm2 = nn.LayerNorm(dim, norm_eps), nn.LayerNorm(dim, norm_eps)
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None,
                need_weights: bool = False):
        """-> (B, T, d); with ``need_weights`` also the self-attention weights (B, J, T, T)."""
        if self.pre:
            h = self.norm1(x)
            c, w = self.self_attn(h, h, h, mask, need_weights=need_weights)
            x = x + self.dropout(c)
            x = x + self.dropout(self.ffn(self.norm2(x)))
        else:
            c, w = self.self_attn(x, x, x, mask, need_weights=need_weights)
            x = self.norm1(x + self.dropout(c))
            x = self.norm2(x + self.dropout(self.ffn(x)))
        return (x, w) if need_weights else x


@ENCODERS.register("transformer_encoder")
class TransformerEncoder(Encoder):
    """Z = Layer_N(… Layer_1(Dropout(x + p)) …), then LN for pre-LN.

    Shape: x (B, T, input_dim), lengths (B,) -> outputs (B, T, d), zero at padding, final (B, d)
    the mean over real tokens; with ``need_weights`` also every layer's weights (B, J, T, T).
    """

    def __init__(self, input_dim: int, *, d_model: Optional[int] = None, layers: PositiveInt = 6,
                 ffn_dim: PositiveInt = 2048, dropout: Probability = 0.1,
                 activation_dropout: Probability = 0.0,
                 norm: Literal["post", "pre"] = "post",
                 positional: BlockSpec["positional"] = {"name": "sinusoidal"},
                 attention: BlockSpec["attention"] = {"name": "multihead"},
                 activation: Literal["relu", "gelu"] = "relu", norm_eps: PositiveFloat = 1e-5):
        super().__init__()
        d = d_model or input_dim
        self.output_dim = d
        self.input_proj = nn.Linear(input_dim, d) if input_dim != d else nn.Identity()
        self.positional = POSITIONALS.build(positional, d)
        self.dropout = Dropout(dropout)
        self.layers = nn.ModuleList(
            TransformerEncoderLayer(d, ffn_dim, attention, self.positional, dropout,
                                    activation_dropout, norm, activation, norm_eps)
            for _ in range(layers))
        self.final_norm = nn.LayerNorm(d, norm_eps) if norm == "pre" else nn.Identity()

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, need_weights: bool = False):
        real = padding_mask(lengths, x.shape[1])  # (B, T)
        mask = real.unsqueeze(1)  # (B, 1, T): every query sees the real keys
        h = self.dropout(self.positional(self.input_proj(x)))
        weights = []
        for layer in self.layers:
            if need_weights:
                h, w = layer(h, mask, need_weights=True)
                weights.append(w)
            else:
                h = layer(h, mask)
        h = self.final_norm(h)
        h = h.masked_fill(~real.unsqueeze(-1), 0.0)
        final = h.sum(1) / lengths.clamp(min=1).unsqueeze(-1).to(h.dtype)
        return (h, final, weights) if need_weights else (h, final)
