"""Hierarchical attention network for document classification.

Yang et al. 2016, §2.2 (word attention, eq. (5)–(7)) and §2.3. Words x_it in sentences i:

    h_it = BiGRU(W₀ x_it),   s_i = pool_t(h_it)     (attention: Σ_t h_it SoftMax_t(u_itᵀq₁),
                                                      u_it = tanh(W₁ h_it + b₁))
    h_i  = BiGRU(s_i),       v   = pool_i(h_i),      p(y | d) = SoftMax(W_y v + b_y)

The poolings are ``pooling`` blocks, so the ablations are overrides: attention (HN-ATT), mean
(HN-AVE), max (HN-MAX). The non-empty sentences of a batch go through the word encoder at once.
"""

from __future__ import annotations

from typing import Dict, Optional

import torch
from torch import nn

from attnflow.blocks.normalizers.base import Normalized
from attnflow.models.embedding_init import init_embedding
from attnflow.config.contracts import ModelContract
from attnflow.config.registry import ENCODERS, MODELS, POOLINGS, BlockSpec, PositiveInt, Probability


def encode_masked(encoder: nn.Module, x: torch.Tensor, lengths: torch.Tensor,
                  chunks: PositiveInt = 1) -> torch.Tensor:
    """``encoder`` on the rows of length > 0 (zero for the others), sorted by length in
    ``chunks`` groups each padded to its own longest row: x (N, T, E) -> (N, T, output_dim)."""
    keep = lengths > 0
    if torch.jit.is_tracing():  # an export: every row, shapes left to the inputs
        return encoder(x, lengths.clamp(min=1))[0] * keep[:, None, None]
    out = x.new_zeros(x.shape[0], x.shape[1], encoder.output_dim)
    if not bool(keep.any()):
        return out
    idx = keep.nonzero(as_tuple=True)[0]
    if chunks > 1:
        idx = idx[torch.argsort(lengths[idx], descending=True)]
    for part in torch.tensor_split(idx, min(max(chunks, 1), len(idx))):
        sub_len = lengths[part]
        T = int(sub_len.max())
        enc, _ = encoder(x[part, :T], sub_len)
        out[part, :T] = enc.to(out.dtype)
    return out


@MODELS.register("han")
class HierarchicalAttentionNetwork(ModelContract, nn.Module):
    """Words → sentence vectors → document vector → class logits.

    ``length_groups``: the non-empty sentences are encoded in this many groups by length.
    Shape: tokens (B, S, W), sent_lengths (B, S) -> {``logits`` (B, C), ``word_weights``
    (B, S, W), ``sent_weights`` (B, S)} (weights None for max pooling).
    """

    interface = "documents"

    def __init__(self, vocab_size: int, num_classes: int, pad_id: int = 0,
                 word_vectors: Optional[torch.Tensor] = None, *, embed_dim: PositiveInt = 100,
                 word_encoder: BlockSpec["encoder"] = {"name": "rnn", "cell": "gru", "hidden_dim": 50},
                 word_pooling: BlockSpec["pooling"] = {"name": "attention"},
                 sentence_encoder: BlockSpec["encoder"] = {"name": "rnn", "cell": "gru", "hidden_dim": 50},
                 sentence_pooling: BlockSpec["pooling"] = {"name": "attention"},
                 dropout: Probability = 0.0, length_groups: PositiveInt = 4):
        super().__init__()
        self.length_groups = length_groups
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        init_embedding(self.embedding, word_vectors, "model 'han'")
        self.word_encoder = ENCODERS.build(word_encoder, embed_dim, path="model.word_encoder")
        self.word_pooling = POOLINGS.build(word_pooling, self.word_encoder.output_dim,
                                           path="model.word_pooling")
        self.sentence_encoder = ENCODERS.build(sentence_encoder, self.word_encoder.output_dim,
                                               path="model.sentence_encoder")
        self.sentence_pooling = POOLINGS.build(sentence_pooling, self.sentence_encoder.output_dim,
                                               path="model.sentence_pooling")
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(self.sentence_encoder.output_dim, num_classes)

    def sentence_vectors(self, tokens: torch.Tensor, sent_lengths: torch.Tensor):
        """s_i for every sentence: (B, S, D_w) and word weights (B, S, W) or None."""
        B, S, W = tokens.shape
        flat_len = sent_lengths.reshape(B * S)
        x = self.dropout(self.embedding(tokens.reshape(B * S, W)))
        h = encode_masked(self.word_encoder, x, flat_len, self.length_groups)                # (B·S, W', D)
        Wp = h.shape[1]
        mask = torch.arange(Wp, device=tokens.device) < flat_len.unsqueeze(-1)
        s, alpha = self.word_pooling(h, mask)
        return s.view(B, S, -1), None if alpha is None else alpha.view(B, S, Wp)

    def forward(self, tokens: torch.Tensor, sent_lengths: torch.Tensor) -> Dict[str, torch.Tensor]:
        s, word_weights = self.sentence_vectors(tokens, sent_lengths)
        sent_mask = sent_lengths > 0
        n_sent = sent_mask.sum(-1)
        h = encode_masked(self.sentence_encoder, s, n_sent)                # (B, S, D)
        v, sent_weights = self.sentence_pooling(h, sent_mask)
        logits = self.classifier(self.dropout(v))
        return {"logits": logits, "word_weights": word_weights, "sent_weights": sent_weights}

    def diagnosed_attention(self):
        """[("word", word pooling, None), ("sentence", sentence pooling, None)] when both
        poolings are attention (own a ``normalizer``), else [] (mean, max: no weights to
        diagnose); see :mod:`attnflow.compare.jain_wallace` (Jain & Wallace 2019)."""
        owners = [("word", self.word_pooling, None), ("sentence", self.sentence_pooling, None)]
        return owners if all(isinstance(m, Normalized) for _, m, _ in owners) else []
