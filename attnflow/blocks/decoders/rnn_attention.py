"""Recurrent decoder with attention over the encoder states (RNNsearch).

Bahdanau, Cho & Bengio 2015, §3.1, eq. (5)–(6):
    c_t  = Σ_i α_ti h_i,   α_t = norm_i a(h_i, s_{t−1})
    s_t  = f(s_{t−1}, [E y_{t−1}; c_t]),   s_0 = tanh(W_init h̄)
    p(y_t | y_<t, x) = SoftMax(W_o [s_t; c_t; E y_{t−1}] + b_o)
With ``gate`` (Xu et al. 2015, §4.2.1) c_t ← σ(w_β · s_{t−1} + b_β) c_t. The scorer's key
projections run once per sentence and the output layer once over all steps.
"""

from __future__ import annotations

from typing import Literal, Optional, Tuple

import torch
from torch import nn

from attnflow.blocks.attention.base import refuse_relative
from attnflow.blocks.decoders.base import Decoder, initial_state
from attnflow.config.registry import ATTENTIONS, DECODERS, BlockSpec, PositiveInt, Probability


@DECODERS.register("rnn_attention")
class AttentionRNNDecoder(Decoder):
    """GRU/LSTM decoder with attention: s_t = f(s_{t−1}, [E y_{t−1}; c_t])."""

    static_state = ("memory", "mask")

    def __init__(self, vocab_size: int, memory_dim: int, init_dim: int, *,
                 cell: Literal["gru", "lstm"] = "gru", embed_dim: PositiveInt = 64,
                 hidden_dim: PositiveInt = 128,
                 attention: BlockSpec["attention"] = {"name": "single"}, dropout: Probability = 0.0,
                 gate: bool = False):
        super().__init__()
        self.cell_type = cell
        refuse_relative(ATTENTIONS.get(attention["name"]), "decoder 'rnn_attention'")
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.attention = ATTENTIONS.build(attention, hidden_dim, memory_dim, memory_dim)
        ctx_dim = self.attention.output_dim
        cell_cls = nn.GRUCell if cell == "gru" else nn.LSTMCell
        self.cell = cell_cls(embed_dim + ctx_dim, hidden_dim)
        self.init = nn.Linear(init_dim, hidden_dim)
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(hidden_dim + ctx_dim + embed_dim, vocab_size)
        self.gate = nn.Linear(hidden_dim, 1) if gate else None

    def start(self, memory: torch.Tensor, memory_mask: torch.Tensor, init: torch.Tensor) -> dict:
        """The step state: prepared memory (scorer keys, values), mask (B, 1, S), s_0."""
        hidden = initial_state(self.init, init, self.cell_type == "lstm")
        return {"memory": self.attention.prepare(memory, memory), "mask": memory_mask.unsqueeze(1),
                "hidden": hidden}

    def _hidden(self, state) -> torch.Tensor:
        return state[0] if self.cell_type == "lstm" else state

    def _step(self, emb: torch.Tensor, prepared, mask: torch.Tensor, state, need_weights: bool):
        """One step from the embedded previous token: -> (features for the output, state, α)."""
        s_prev = self._hidden(state)
        context, weights = self.attention.attend(s_prev.unsqueeze(1), prepared, mask,
                                                 need_weights=need_weights)
        context = context.squeeze(1)
        if self.gate is not None:
            context = torch.sigmoid(self.gate(s_prev)) * context
        state = self.cell(torch.cat([emb, context], dim=-1), state)
        features = torch.cat([self._hidden(state), context, emb], dim=-1)
        if weights is not None:  # single: (B, 1, S) -> (B, 1, S); multihead: (B, J, 1, S) -> (B, J, S)
            weights = weights.squeeze(-2) if weights.dim() == 4 else weights
        return features, state, weights

    def step(self, y_prev: torch.Tensor, state: dict, need_weights: bool = False):
        """One target position: y_prev (B,) -> logits (B, V), state, α (B, J, S) or None."""
        emb = self.dropout(self.embedding(y_prev))
        f, hidden, w = self._step(emb, state["memory"], state["mask"], state["hidden"], need_weights)
        return self.out(self.dropout(f)), {**state, "hidden": hidden}, w

    def forward(self, tgt_in: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor,
                init: torch.Tensor, need_weights: bool = False,
                positions: Optional[torch.Tensor] = None
                ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        st = self.start(memory, memory_mask, init)
        prepared, mask, state = st["memory"], st["mask"], st["hidden"]
        embedded = self.dropout(self.embedding(tgt_in))
        features, weights = [], []
        for t in range(tgt_in.shape[1]):
            f, state, w = self._step(embedded[:, t], prepared, mask, state, need_weights)
            features.append(f)
            weights.append(w)
        features = torch.stack(features, dim=1)
        logits = self.out(self.dropout(features if positions is None else features[positions]))
        return logits, (torch.stack(weights, dim=1) if need_weights else None)
