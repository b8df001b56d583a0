"""Structured self-attentive document embedding.

Lin et al. 2017, "A structured self-attentive sentence embedding". Over the words of a document:

    H = BiLSTM(E w) (n × 2u),   A = softmax(W_s2 tanh(W_s1 Hᵀ)) (r × n),   M = A H (r × 2u)
    p(y | d) = SoftMax(W_y ReLU(W_h vec(M) + b_h) + b_y)

The task adds ``penalty_weight`` · ‖AAᵀ − I‖²_F (A returned as ``attention``). The words of each
document are packed left without padding between sentences.
"""

from __future__ import annotations

from typing import Dict, Optional

import torch
from torch import nn

from attnflow.models.embedding_init import init_embedding
from attnflow.config.contracts import ModelContract
from attnflow.config.registry import (ENCODERS, MODELS, NORMALIZERS, BlockSpec, PositiveInt,
                                      Probability)


def flatten_documents(tokens: torch.Tensor, sent_lengths: torch.Tensor):
    """(B, S, W) hierarchical tokens -> flat (B, N) tokens, lengths (B,), and for each flat
    position its index into S·W (to map weights back)."""
    B, S, W = tokens.shape
    valid = (torch.arange(W, device=tokens.device) < sent_lengths.unsqueeze(-1)).reshape(B, S * W)
    order = torch.argsort((~valid).to(torch.int8), dim=1, stable=True)
    lengths = valid.sum(1)
    N = max(1, int(lengths.max()))
    order = order[:, :N]
    flat = tokens.reshape(B, S * W).gather(1, order)
    keep = torch.arange(N, device=tokens.device) < lengths.unsqueeze(-1)
    return flat.masked_fill(~keep, 0), lengths, order, keep


@MODELS.register("self_attentive")
class SelfAttentive(ModelContract, nn.Module):
    """BiLSTM + r-hop self-attention + MLP classifier.

    Shape: tokens (B, S, W), sent_lengths (B, S) -> {``logits`` (B, C), ``attention`` (B, r, N)
    over the N flat words, ``word_weights`` (B, S, W) (mean over hops)}. ``normalizer`` makes
    A from the scores (Lin et al.'s softmax by default; the model's own field, not the shared
    group).
    """

    interface = "documents"
    attention_hops = True  # returns its r hops as ``attention`` (the task's penalty reads them)

    def __init__(self, vocab_size: int, num_classes: int, pad_id: int = 0,
                 word_vectors: Optional[torch.Tensor] = None, *, embed_dim: PositiveInt = 100,
                 encoder: BlockSpec["encoder"] = {"name": "rnn", "cell": "lstm", "hidden_dim": 100},
                 attn_dim: PositiveInt = 128, hops: PositiveInt = 8, mlp_dim: PositiveInt = 256,
                 dropout: Probability = 0.0,
                 normalizer: BlockSpec["normalizer"] = {"name": "softmax"}):
        super().__init__()
        self.hops = hops
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        init_embedding(self.embedding, word_vectors, "model 'self_attentive'")
        self.encoder = ENCODERS.build(encoder, embed_dim, path="model.encoder")
        D = self.encoder.output_dim
        self.ws1 = nn.Linear(D, attn_dim, bias=False)
        self.ws2 = nn.Linear(attn_dim, hops, bias=False)
        self.normalizer = NORMALIZERS.build(normalizer, path="model.normalizer")  # A's softmax
        self.dropout = nn.Dropout(dropout)
        self.mlp = nn.Sequential(nn.Linear(hops * D, mlp_dim), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(mlp_dim, num_classes))

    def attend(self, H: torch.Tensor, mask: torch.Tensor):
        """A (B, r, N) with zeros at padding (all-zero for an empty document), M = AH (B, r, D)."""
        scores = self.ws2(torch.tanh(self.ws1(H))).transpose(1, 2)            # (B, r, N)
        A = self.normalizer(scores, mask.unsqueeze(1))
        return A, A @ H

    def diagnosed_attention(self):
        """[("hops", self, None)]: the r hops A, whose normaliser a diagnostic may tamper with
        (Jain & Wallace 2019; :mod:`attnflow.compare.jain_wallace`)."""
        return [("hops", self, None)]

    def forward(self, tokens: torch.Tensor, sent_lengths: torch.Tensor) -> Dict[str, torch.Tensor]:
        B, S, W = tokens.shape
        flat, lengths, order, keep = flatten_documents(tokens, sent_lengths)
        x = self.dropout(self.embedding(flat))
        H = x.new_zeros(B, flat.shape[1], self.encoder.output_dim)
        nz = (lengths > 0).nonzero(as_tuple=True)[0]
        if len(nz):
            enc, _ = self.encoder(x[nz], lengths[nz])
            H[nz, : enc.shape[1]] = enc
        A, M = self.attend(H, keep)
        logits = self.mlp(self.dropout(M.reshape(B, -1)))
        word = torch.zeros(B, S * W, dtype=A.dtype, device=A.device)
        word.scatter_(1, order, A.mean(1) * keep.to(A.dtype))
        return {"logits": logits, "attention": A, "attention_valid": lengths > 0,
                "word_weights": word.view(B, S, W), "sent_weights": None}
