"""Recurrent decoder without attention (RNNenc): one fixed context c = h_n for every step.

Cho et al. 2014; Sutskever et al. 2014; the RNNenc baseline of Bahdanau et al. 2015:

    s_0 = tanh(W_init c),  s_t = f(s_{t−1}, [E y_{t−1}; c]),
    p(y_t | y_<t, x) = SoftMax(W_o [s_t; c; E y_{t−1}] + b_o)

The encoder outputs are ignored; there are no attention weights (``need_weights`` gives None).
"""

from __future__ import annotations

from typing import Literal, Optional, Tuple

import torch
from torch import nn

from attnflow.blocks.decoders.base import Decoder, from_rnn, initial_state, to_rnn
from attnflow.config.registry import DECODERS, PositiveInt, Probability


@DECODERS.register("rnn")
class RNNDecoder(Decoder):
    """GRU/LSTM decoder on the encoder's final state only: s_t = f(s_{t−1}, [E y_{t−1}; c])."""

    static_state = ("c",)
    attends = False  # no attention weights

    def __init__(self, vocab_size: int, memory_dim: int, init_dim: int, *,
                 cell: Literal["gru", "lstm"] = "gru", embed_dim: PositiveInt = 64,
                 hidden_dim: PositiveInt = 128,
                 dropout: Probability = 0.0):
        super().__init__()
        self.cell_type = cell
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.init = nn.Linear(init_dim, hidden_dim)
        rnn = nn.GRU if cell == "gru" else nn.LSTM
        # every step's input is [E y_{t−1}; c]: teacher forcing runs the fused RNN
        self.rnn = rnn(embed_dim + init_dim, hidden_dim, batch_first=True)
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(hidden_dim + init_dim + embed_dim, vocab_size)

    def start(self, memory: torch.Tensor, memory_mask: torch.Tensor, init: torch.Tensor) -> dict:
        return {"c": init, "hidden": initial_state(self.init, init, self.cell_type == "lstm")}

    def _run(self, emb: torch.Tensor, c: torch.Tensor, h):
        c = c.unsqueeze(1).expand(-1, emb.shape[1], -1)
        states, h = self.rnn(torch.cat([emb, c], dim=-1), h)
        return self.out(self.dropout(torch.cat([states, c, emb], dim=-1))), h

    def step(self, y_prev: torch.Tensor, state: dict, need_weights: bool = False):
        emb = self.dropout(self.embedding(y_prev)).unsqueeze(1)
        logits, h = self._run(emb, state["c"], to_rnn(state["hidden"]))
        return logits[:, 0], {**state, "hidden": from_rnn(h)}, None

    def forward(self, tgt_in: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor,
                init: torch.Tensor, need_weights: bool = False
                ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        h0 = to_rnn(initial_state(self.init, init, self.cell_type == "lstm"))
        logits, _ = self._run(self.dropout(self.embedding(tgt_in)), init, h0)
        return logits, None
