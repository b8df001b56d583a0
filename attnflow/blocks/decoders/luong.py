"""Luong attention decoder: global or local (local-m, local-p) attention, input feeding.

Luong, Pham & Manning 2015, §3.1–3.3. With h̄_s the encoder states and D the window half-width:

    h_t  = f(h_{t−1}, [E y_{t−1}; h̃_{t−1}])          (input feeding; without it [E y_{t−1}])
    a_t(s) = SoftMax_s score(h_t, h̄_s)               (score: dot, general, concat = additive)
    local-m: p_t = t;  local-p: p_t = (S_x − 1)·sigmoid(v_pᵀ tanh(W_p h_t));  only |s − p_t| ≤ D,
             a_t(s) ← a_t(s) · exp(−(s − p_t)² / 2σ²),  σ = D/2   (``gaussian``)
    c_t  = Σ_s a_t(s) h̄_s,  h̃_t = tanh(W_c [c_t; h_t]),  p(y_t | y_<t, x) = SoftMax(W_s h̃_t)
    h_0  = tanh(W_init h̄)

The query is the new state h_t (RNNsearch uses s_{t−1}). Without input feeding teacher forcing
runs the fused RNN over the whole prefix and attends for all steps at once.
"""

from __future__ import annotations

from typing import Literal, Optional, Tuple

import torch
from torch import nn

from attnflow.blocks.attention.base import refuse_relative
from attnflow.blocks.decoders.base import Decoder, from_rnn, initial_state, to_rnn
from attnflow.config.registry import (ATTENTIONS, DECODERS, BlockSpec, ConfigError, NonNegativeInt,
                                      PositiveInt, Probability)
from attnflow.io.console import warn_unread


@DECODERS.register("luong")
class LuongDecoder(Decoder):
    """GRU/LSTM decoder with Luong global/local attention and input feeding."""

    static_state = ("memory", "mask")

    def __init__(self, vocab_size: int, memory_dim: int, init_dim: int, *,
                 cell: Literal["lstm", "gru"] = "lstm", embed_dim: PositiveInt = 64,
                 hidden_dim: PositiveInt = 128,
                 attention: BlockSpec["attention"] = {"name": "single", "scorer": {"name": "general"}},
                 alignment: Literal["global", "local_m", "local_p"] = "global",
                 window: NonNegativeInt = 5,
                 gaussian: bool = True, input_feed: bool = True, dropout: Probability = 0.0):
        super().__init__()
        att_cls = ATTENTIONS.get(attention["name"])
        refuse_relative(att_cls, "decoder 'luong'")
        if alignment == "global":
            for field, value, default in (("window", window, 5), ("gaussian", gaussian, True)):
                if value != default:
                    warn_unread(f"decoder 'luong': {field}={value}",
                                "it shapes local attention; alignment=global")
        elif not att_cls.plain:
            raise ConfigError(f"decoder 'luong': local alignment ({alignment}) recomputes c_t "
                              f"from reweighted α over the unprojected encoder states, which "
                              f"needs a plain block; use attention=single")
        elif window < 1:
            raise ConfigError(f"decoder 'luong': window must be >= 1, got {window}")
        self.cell_type, self.alignment, self.window = cell, alignment, window
        self.gaussian, self.input_feed, self.hidden_dim = gaussian, input_feed, hidden_dim
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.attention = ATTENTIONS.build(attention, hidden_dim, memory_dim, memory_dim)
        ctx_dim = self.attention.output_dim
        rnn = nn.LSTM if cell == "lstm" else nn.GRU
        self.rnn = rnn(embed_dim + (hidden_dim if input_feed else 0), hidden_dim, batch_first=True)
        self.init = nn.Linear(init_dim, hidden_dim)
        self.combine = nn.Linear(ctx_dim + hidden_dim, hidden_dim, bias=False)  # W_c
        self.out = nn.Linear(hidden_dim, vocab_size)  # W_s
        self.dropout = nn.Dropout(dropout)
        if alignment == "local_p":
            self.W_p = nn.Linear(hidden_dim, hidden_dim, bias=False)
            self.v_p = nn.Linear(hidden_dim, 1, bias=False)

    def _positions(self, h: torch.Tensor, t: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """p_t (B, T) for states h (B, T, H) at target positions t (B, T)."""
        last = (lengths - 1).unsqueeze(1).to(h.dtype)
        if self.alignment == "local_m":
            return torch.minimum(t.to(h.dtype), last)
        return last * torch.sigmoid(self.v_p(torch.tanh(self.W_p(h)))).squeeze(-1)

    def _attend(self, h: torch.Tensor, prepared, mask: torch.Tensor, t: torch.Tensor,
                need_weights: bool):
        """h (B, T, H), mask (B, S), t (B, T) -> context (B, T, C), weights (B, T, J, S) or None."""
        if self.alignment == "global":
            context, w = self.attention.attend(h, prepared, mask.unsqueeze(1), need_weights=need_weights)
            if w is not None:
                w = w.unsqueeze(2) if w.dim() == 3 else w.transpose(1, 2)  # -> (B, T, J, S)
            return context, w
        lengths = mask.sum(-1)
        p = self._positions(h, t, lengths)  # (B, T)
        s = torch.arange(mask.shape[1], device=h.device, dtype=h.dtype)
        dist = s.view(1, 1, -1) - p.unsqueeze(-1)  # (B, T, S)
        window = mask.unsqueeze(1) & (dist.abs() <= self.window)
        if not (self.gaussian or need_weights):  # the window only masks: the block's fused path
            return self.attention.attend(h, prepared, window)[0], None
        _, w = self.attention.attend(h, prepared, window, need_weights=True)  # (B, T, S)
        if self.gaussian:
            sigma = self.window / 2.0
            w = w * torch.exp(-dist.pow(2) / (2 * sigma ** 2))
        w = w.masked_fill(~window, 0.0)
        context = w @ prepared[1]
        return context, (w.unsqueeze(2) if need_weights else None)

    def _h0(self, init: torch.Tensor):
        return initial_state(self.init, init, self.cell_type == "lstm")

    def start(self, memory: torch.Tensor, memory_mask: torch.Tensor, init: torch.Tensor) -> dict:
        B = memory.shape[0]
        return {"memory": self.attention.prepare(memory, memory), "mask": memory_mask,
                "hidden": self._h0(init), "feed": memory.new_zeros(B, self.hidden_dim),
                "t": torch.zeros(B, dtype=torch.long, device=memory.device)}

    def _output(self, context: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """h̃_t = tanh(W_c [c_t; h_t])."""
        return torch.tanh(self.combine(torch.cat([context, h], dim=-1)))

    def _core(self, x: torch.Tensor, state: dict, need_weights: bool):
        """One recurrence step from the embedded input x (B, E): (h̃_t (B, H), state, α)."""
        if self.input_feed:
            x = torch.cat([x, state["feed"]], dim=-1)
        out, h = self.rnn(x.unsqueeze(1), to_rnn(state["hidden"]))  # out (B, 1, H)
        context, w = self._attend(out, state["memory"], state["mask"], state["t"].unsqueeze(1),
                                  need_weights)
        feed = self._output(context, out)[:, 0]
        new = {**state, "hidden": from_rnn(h), "feed": feed, "t": state["t"] + 1}
        return feed, new, (w[:, 0] if w is not None else None)

    def step(self, y_prev: torch.Tensor, state: dict, need_weights: bool = False):
        feed, state, w = self._core(self.dropout(self.embedding(y_prev)), state, need_weights)
        return self.out(self.dropout(feed)), state, w

    def forward(self, tgt_in: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor,
                init: torch.Tensor, need_weights: bool = False,
                positions: Optional[torch.Tensor] = None
                ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        def logits(features):  # (B, T, D) → the output layer at the asked positions
            return self.out(self.dropout(features if positions is None else features[positions]))

        if self.input_feed:  # the recurrence needs h̃_{t−1}: step by step, the output layer once
            state = self.start(memory, memory_mask, init)
            embedded = self.dropout(self.embedding(tgt_in))
            feeds, weights = [], []
            for t in range(tgt_in.shape[1]):
                feed, state, w = self._core(embedded[:, t], state, need_weights)
                feeds.append(feed)
                weights.append(w)
            return logits(torch.stack(feeds, 1)), (torch.stack(weights, 1) if need_weights else None)
        B, T = tgt_in.shape
        prepared = self.attention.prepare(memory, memory)
        states, _ = self.rnn(self.dropout(self.embedding(tgt_in)), to_rnn(self._h0(init)))
        t = torch.arange(T, device=tgt_in.device).expand(B, T)
        context, w = self._attend(states, prepared, memory_mask, t, need_weights)
        return logits(self._output(context, states)), w
