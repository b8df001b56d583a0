"""Recurrent encoder without packed sequences: the ``rnn`` encoder's function (Bahdanau et al.
2015, §3.2: h_j = [h→_j; h←_j]) on the padded batch, fast on CPUs for many short sequences.

The forward RNN reads the padded rows as they are (padding follows the real tokens); the backward
RNN reads each row reversed within its length and its outputs are reversed back. Real positions
equal the packed encoder's with the same weights; padding is zero; lengths of 0 are allowed.
"""

from __future__ import annotations

from typing import Literal, Tuple

import torch
from torch import nn

from attnflow.blocks.encoders.base import Encoder
from attnflow.blocks.encoders.rnn import CELLS, warn_layer_dropout
from attnflow.config.registry import ENCODERS, PositiveInt, Probability


def reverse_within_length(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """x (N, T, ...) with row n's first lengths[n] steps reversed; padding steps stay in place."""
    T = x.shape[1]
    t = torch.arange(T, device=x.device).unsqueeze(0)                      # (1, T)
    L = lengths.to(x.device).unsqueeze(1)
    idx = torch.where(t < L, L - 1 - t, t)                                 # (N, T), an involution
    idx = idx.view(*idx.shape, *([1] * (x.dim() - 2))).expand_as(x)
    return x.gather(1, idx)


@ENCODERS.register("rnn_unpacked")
class UnpackedRNNEncoder(Encoder):
    """``rnn`` without packed sequences; each direction of each layer is one-layer RNN.

    Shape: as ``rnn``; final is zero for length 0.
    """

    def __init__(self, input_dim: int, *, cell: Literal["gru", "lstm", "rnn"] = "gru",
                 hidden_dim: PositiveInt = 128, layers: PositiveInt = 1, bidirectional: bool = True,
                 dropout: Probability = 0.0):
        super().__init__()
        warn_layer_dropout("rnn_unpacked", layers, dropout)
        self.directions = 2 if bidirectional else 1
        self.hidden_dim, self.output_dim = hidden_dim, hidden_dim * self.directions
        self.layers = nn.ModuleList()
        dim = input_dim
        for _ in range(layers):
            self.layers.append(nn.ModuleList(
                [CELLS[cell](dim, hidden_dim, batch_first=True) for _ in range(self.directions)]))
            dim = self.output_dim
        self.dropout = nn.Dropout(dropout if layers > 1 else 0.0)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        lengths = lengths.to(x.device)
        mask = (torch.arange(x.shape[1], device=x.device) < lengths.unsqueeze(1)).unsqueeze(-1)
        h = x
        for i, dirs in enumerate(self.layers):
            if i > 0:
                h = self.dropout(h)
            fwd, _ = dirs[0](h)
            outs = [fwd]
            if self.directions == 2:
                bwd, _ = dirs[1](reverse_within_length(h, lengths))
                outs.append(reverse_within_length(bwd, lengths))
            h = torch.cat(outs, -1) * mask.to(x.dtype)
        last = (lengths - 1).clamp_min(0)
        rows = torch.arange(x.shape[0], device=x.device)
        final = h[rows, last, : self.hidden_dim]
        if self.directions == 2:
            final = torch.cat([final, h[:, 0, self.hidden_dim:]], -1)
        final = final * (lengths > 0).unsqueeze(-1).to(final.dtype)
        return h, final
