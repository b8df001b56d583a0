"""Recurrent encoder: RNN, GRU or LSTM, optionally bidirectional with the states concatenated.

Elman 1990, Hochreiter & Schmidhuber 1997, Cho et al. 2014 (GRU), Schuster & Paliwal 1997;
Bahdanau et al. 2015, §3.2: h_j = [h→_j; h←_j]. Packed sequences skip the padding, so the
backward direction starts at each sequence's last real token.
"""

from typing import Literal, Tuple

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnflow.blocks.encoders.base import Encoder
from attnflow.config.registry import ENCODERS, PositiveInt, Probability
from attnflow.io.console import warn_unread

CELLS = {"rnn": nn.RNN, "gru": nn.GRU, "lstm": nn.LSTM}


def warn_layer_dropout(name: str, layers: int, dropout: float) -> None:
    """``dropout`` acts between stacked layers: unread with one layer."""
    if layers == 1 and dropout:
        warn_unread(f"encoder '{name}': dropout={dropout}", "dropout acts between layers; layers=1")


@ENCODERS.register("rnn")
class RNNEncoder(Encoder):
    """H = (h_1 … h_n), h_j = [h→_j; h←_j] for a bidirectional encoder.

    Shape: x (B, T, input_dim), lengths (B,) -> outputs (B, T, output_dim), zero at padding, and
    final (B, output_dim): the last layer's final states, directions concatenated.
    """

    def __init__(self, input_dim: int, *, cell: Literal["gru", "lstm", "rnn"] = "gru",
                 hidden_dim: PositiveInt = 128, layers: PositiveInt = 1, bidirectional: bool = True,
                 dropout: Probability = 0.0):
        super().__init__()
        warn_layer_dropout("rnn", layers, dropout)
        self.rnn = CELLS[cell](input_dim, hidden_dim, num_layers=layers, batch_first=True,
                               bidirectional=bidirectional, dropout=dropout if layers > 1 else 0.0)
        self.directions = 2 if bidirectional else 1
        self.output_dim = hidden_dim * self.directions

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, state = self.rnn(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        h = state[0] if isinstance(state, tuple) else state  # LSTM: (h, c)
        final = h[-self.directions:].transpose(0, 1).reshape(x.shape[0], self.output_dim)
        return out, final
