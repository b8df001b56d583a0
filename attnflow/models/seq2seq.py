"""Encoder–decoder model: source embedding → encoder → decoder with attention.

Source: Sutskever et al. 2014 (seq2seq), Cho et al. 2014 (RNN encoder–decoder), Bahdanau et al. 2015 (RNNsearch).
The model holds no training logic: the task (:mod:`attnflow.tasks.seq2seq`) computes losses and
metrics and calls ``forward`` (teacher forcing) or ``greedy`` (generation).
"""

from __future__ import annotations

import torch
from torch import nn

from attnflow.blocks.attention.functional import padding_mask
from attnflow.models.encoder_decoder import EncoderDecoder
from attnflow.config.registry import DECODERS, ENCODERS, MODELS, BlockSpec, PositiveInt, Probability


@MODELS.register("seq2seq")
class Seq2Seq(EncoderDecoder):
    """p(y | x) = decoder(y_<t, encoder(E x)): src (B, S), src_lengths (B,), tgt_in (B, T)
    -> logits (B, T, V), weights (B, T, J, S) or None."""

    def __init__(self, src_vocab: int, tgt_vocab: int, pad_id: int = 0, *,
                 embed_dim: PositiveInt = 64,
                 encoder: BlockSpec["encoder"] = {"name": "rnn"},
                 decoder: BlockSpec["decoder"] = {"name": "rnn_attention"},
                 dropout: Probability = 0.0):
        super().__init__()
        self.embedding = nn.Embedding(src_vocab, embed_dim, padding_idx=pad_id)
        self.dropout = nn.Dropout(dropout)
        self.encoder = ENCODERS.build(encoder, embed_dim)
        dim = self.encoder.output_dim
        self.decoder = DECODERS.build(decoder, tgt_vocab, dim, dim)

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor):
        memory, final = self.encoder(self.dropout(self.embedding(src)), src_lengths)
        return memory, padding_mask(src_lengths, src.shape[1]), final
