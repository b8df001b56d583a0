"""Transformer encoder: N identical layers of multi-head self-attention and a position-wise FFN.

Source: Vaswani et al. 2017, "Attention is all you need": §3.1 (encoder stack, LayerNorm(x +
Sublayer(x))), §3.3 (FFN, eq. (2)), §5.4 (residual dropout):

    h_i    = x_i + p_i                                    (positional block; dropout on the sum)
    h′     = MH_j Attn(W_qʲ h_i, W_kʲ H, W_vʲ H)           (the ``attention`` block; with relative
                                                            positions its relative terms)
    h″     = LN(h_i + Dropout(h′))                        (post-LN, the paper)
    h‴     = W₂ ReLU(W₁ h″ + b₁) + b₂                     (FFN; ``activation: gelu`` puts GELU
                                                            for ReLU, as BERT does: Devlin et al.
                                                            2019 §3; Hendrycks & Gimpel 2016)
    z_i    = LN(h″ + Dropout(h‴))

Pre-LN (``norm: pre``, Xiong et al. 2020): h″ = h + Dropout(MH(LN(h))), z = h″ + Dropout(FFN(LN(h″)))
and one final LN after the last layer. The positional encoding is added **here** (by the
encoder, to the embeddings it receives), so ``seq2seq`` with ``encoder: transformer_encoder``
works too; the model scales the embeddings by √d before.

Attention is built from the registry: ``attention`` (multihead, relative_multihead, single or any
registered block) with its scorer, normaliser and aggregator; scaled_dot takes the fused SDPA
path. Padding keys are masked; outputs at padding rows are zero (encoder protocol). Dropout on the
embeddings, residuals and FFN is :mod:`attnflow.blocks.dropout`'s (torch's distribution, a
cheaper mask on the CPU).
"""

from __future__ import annotations

from typing import Any, Dict, Literal, Optional

import torch
import torch.nn.functional as F
from torch import nn

from attnflow.blocks.attention.functional import padding_mask
from attnflow.blocks.dropout import Dropout
from attnflow.config.registry import (ATTENTIONS, ENCODERS, POSITIONALS, BlockSpec, ConfigError,
                               PositiveInt, Probability)


def build_attention(cfg: Dict[str, Any], query_dim: int, key_dim: int, self_attention: bool,
                    positional=None):
    """An attention block of the ``attention`` config for one sublayer. Self-attention under a
    relative positional block (``positional.relative``) gets its δ as ``relative_distance``.
    The sublayer adds the block's output to its residual stream of ``query_dim`` features, so an
    aggregator that gives another size (``mean``: one head's size; ``concat`` with a
    ``head_dim``; ``concat_proj`` with an ``out_dim``) is refused here — on the meta device,
    before any data is read — rather than at the first forward pass."""
    relative = self_attention and positional is not None and positional.relative
    block = ATTENTIONS.build(cfg, query_dim, key_dim, key_dim, self_attention,
                             positional.max_distance if relative else None, path="attention")
    out = getattr(block, "output_dim", query_dim)
    if out != query_dim:
        raise ConfigError(_residual_mismatch(block, query_dim, out))
    return block


def _residual_mismatch(block: nn.Module, dim: int, out: int) -> str:
    """Why an attention block giving ``out`` features does not fit a Transformer layer of ``dim``."""
    gives = f"attention '{getattr(block, 'registry_name', type(block).__name__)}'"
    aggregator = getattr(block, "aggregator", None)
    if aggregator is not None:
        name = getattr(aggregator, "registry_name", type(aggregator).__name__)
        heads, head_dim = getattr(block, "heads", "?"), getattr(block, "head_dim", "?")
        how = {"mean": f"the mean of {heads} heads of {head_dim}",
               "concat": f"{heads} heads × head_dim {head_dim}"}.get(name, f"its out_dim {out}")
        gives += f" with aggregator '{name}' gives {out} features ({how})"
    else:
        gives += f" gives {out} features"
    return (f"{gives}, but a Transformer layer adds the attention's output to its residual stream "
            f"of {dim} features (d_model): the aggregator must give {dim}; use aggregator "
            f"concat_proj (it projects the heads back to d_model; leave its out_dim unset), or "
            f"concat with heads × head_dim = {dim}")


ACTIVATIONS = {"relu": torch.relu, "gelu": F.gelu}  # gelu: the exact (erf) form, as BERT's


class FeedForward(nn.Module):
    """FFN(h) = W₂ Dropout(g(W₁ h + b₁)) + b₂, g = ReLU (Vaswani et al. 2017) or GELU (Devlin et
    al. 2019); the inner dropout is off by default."""

    def __init__(self, dim: int, hidden: int, dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ConfigError(f"transformer FFN: activation must be one of "
                              f"{', '.join(ACTIVATIONS)}, got {activation!r}")
        self.linear1 = nn.Linear(dim, hidden)
        self.linear2 = nn.Linear(hidden, dim)
        self.dropout = Dropout(dropout) if dropout > 0 else nn.Identity()
        self.activation = ACTIVATIONS[activation]

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(h))))


class TransformerEncoderLayer(nn.Module):
    """One encoder layer: self-attention and FFN sublayers, each with residual, dropout and LN.

    Shape: x (B, T, d), mask (B, 1, T) bool (True = real key) or None -> (B, T, d).
    """

    def __init__(self, dim: int, ffn_dim: int, attention: Dict[str, Any], positional=None,
                 dropout: Probability = 0.1, activation_dropout: Probability = 0.0,
                 norm: str = "post",
                 activation: str = "relu"):
        super().__init__()
        self.pre = norm == "pre"
        self.self_attn = build_attention(attention, dim, dim, True, positional)
        self.ffn = FeedForward(dim, ffn_dim, activation_dropout, activation)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
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
class TransformerEncoder(nn.Module):
    """Z = Layer_N(… Layer_1(Dropout(x + p)) …), then LN for pre-LN.

    Args:
        input_dim: size of the input vectors (context; projected to d_model when different).
        d_model: d (default None: input_dim).
        layers: N (default 6).
        ffn_dim: inner size of the FFN (default 2048).
        dropout: on the embedding sum and in the residuals (default 0.1).
        activation_dropout: after the FFN's ReLU (default 0.0).
        norm: 'post' (the paper) or 'pre' (default 'post').
        activation: the FFN's nonlinearity, 'relu' (the paper) or 'gelu' (BERT) (default 'relu').
        positional: the positional block (default sinusoidal; 'relative' adds no encoding and
            gives every self-attention relative-position terms with its δ).
        attention: the self-attention block of every layer: heads J, scorer, normaliser,
            aggregator, dropout on α (default multihead: 8 scaled-dot heads, concat + W^O).
    Shape:
        x (B, T, input_dim), lengths (B,) -> outputs (B, T, d) with zeros at padding, final (B, d)
        the mean of the outputs over real tokens; with ``need_weights`` also a list of the N
        layers' self-attention weights (B, J, T, T) (attention maps for dashboards).
    """

    def __init__(self, input_dim: int, *, d_model: Optional[int] = None, layers: PositiveInt = 6,
                 ffn_dim: PositiveInt = 2048, dropout: Probability = 0.1,
                 activation_dropout: Probability = 0.0,
                 norm: Literal["post", "pre"] = "post",
                 positional: BlockSpec["positional"] = {"name": "sinusoidal"},
                 attention: BlockSpec["attention"] = {"name": "multihead"},
                 activation: Literal["relu", "gelu"] = "relu"):
        super().__init__()
        d = d_model or input_dim
        self.output_dim = d
        self.input_proj = nn.Linear(input_dim, d) if input_dim != d else nn.Identity()
        self.positional = POSITIONALS.build(positional, d)
        self.dropout = Dropout(dropout)
        self.layers = nn.ModuleList(
            TransformerEncoderLayer(d, ffn_dim, attention, self.positional, dropout,
                                    activation_dropout, norm, activation)
            for _ in range(layers))
        self.final_norm = nn.LayerNorm(d) if norm == "pre" else nn.Identity()

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
