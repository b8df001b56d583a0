"""Recurrent decoder without attention (RNNenc): one fixed context vector c ≡ h_n for every step.

Source: Cho et al. 2014 (RNN encoder–decoder), Sutskever et al. 2014 (the whole
sentence squeezed into the last state); the baseline of Bahdanau et al. 2015 (RNNenc):
    c    = h_n, the encoder's final state (``init``)
    s_0  = tanh(W_init c)
    s_t  = f(s_{t−1}, [E y_{t−1}; c])                (GRU or LSTM cell)
    p(y_t | y_<t, x) = SoftMax(W_o [s_t; c; E y_{t−1}] + b_o)
The encoder outputs (``memory``) are ignored: every step sees the same c, which is what attention
(``rnn_attention``, ``luong``) replaces with a per-step c_t. There are no attention weights, so
``need_weights`` yields None and models with this decoder have no heat maps.
"""

from __future__ import annotations

from typing import Literal, Optional, Tuple

import torch
from torch import nn

from attnflow.blocks.decoders.base import Decoder
from attnflow.config.registry import DECODERS, PositiveInt, Probability


@DECODERS.register("rnn")
class RNNDecoder(Decoder):
    """GRU/LSTM decoder conditioned on the encoder's final state only: s_t = f(s_{t−1}, [E y_{t−1}; c]).

    Args:
        vocab_size: target vocabulary size (context).
        memory_dim: size of the encoder states (context; unused: no attention).
        init_dim: size of the encoder's final state c = h_n (context).
        cell: 'gru' or 'lstm' (default 'gru').
        embed_dim: target embedding size (default 64).
        hidden_dim: state size of s_t (default 128).
        dropout: on embeddings and before the output layer (default 0.0).
    Shape:
        forward: tgt_in (B, T), memory (B, S, memory_dim), memory_mask (B, S), init (B, init_dim)
        -> logits (B, T, vocab_size), None.
    """

    static_state = ("c",)
    attends = False  # no attention weights: a task's attention penalty is refused before any work

    def __init__(self, vocab_size: int, memory_dim: int, init_dim: int, *,
                 cell: Literal["gru", "lstm"] = "gru", embed_dim: PositiveInt = 64,
                 hidden_dim: PositiveInt = 128,
                 dropout: Probability = 0.0):
        super().__init__()
        self.cell_type = cell
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.init = nn.Linear(init_dim, hidden_dim)
        rnn = nn.GRU if cell == "gru" else nn.LSTM
        # the input of every step is [E y_{t−1}; c]: teacher forcing runs the fused cuDNN/MKL RNN
        self.rnn = rnn(embed_dim + init_dim, hidden_dim, batch_first=True)
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(hidden_dim + init_dim + embed_dim, vocab_size)

    def _h0(self, c: torch.Tensor):
        h0 = torch.tanh(self.init(c)).unsqueeze(0)  # (1, B, H)
        return (h0, torch.zeros_like(h0)) if self.cell_type == "lstm" else h0

    def start(self, memory: torch.Tensor, memory_mask: torch.Tensor, init: torch.Tensor) -> dict:
        h = self._h0(init)
        # per-row tensors with the batch first (the protocol's reorder indexes dim 0)
        hidden = tuple(x.transpose(0, 1) for x in h) if isinstance(h, tuple) else h.transpose(0, 1)
        return {"c": init, "hidden": hidden}

    def _run(self, emb: torch.Tensor, c: torch.Tensor, h):
        x = torch.cat([emb, c.unsqueeze(1).expand(-1, emb.shape[1], -1)], dim=-1)
        states, h = self.rnn(x, h)
        features = torch.cat([states, c.unsqueeze(1).expand(-1, emb.shape[1], -1), emb], dim=-1)
        return self.out(self.dropout(features)), h

    def step(self, y_prev: torch.Tensor, state: dict, need_weights: bool = False):
        emb = self.dropout(self.embedding(y_prev)).unsqueeze(1)
        hidden = state["hidden"]
        h = tuple(x.transpose(0, 1).contiguous() for x in hidden) if isinstance(hidden, tuple) \
            else hidden.transpose(0, 1).contiguous()
        logits, h = self._run(emb, state["c"], h)
        hidden = tuple(x.transpose(0, 1) for x in h) if isinstance(h, tuple) else h.transpose(0, 1)
        return logits[:, 0], {**state, "hidden": hidden}, None

    def forward(self, tgt_in: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor,
                init: torch.Tensor, need_weights: bool = False
                ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        logits, _ = self._run(self.dropout(self.embedding(tgt_in)), init, self._h0(init))
        return logits, None
