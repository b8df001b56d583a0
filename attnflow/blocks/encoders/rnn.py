"""Recurrent encoder: RNN, GRU or LSTM, optionally bidirectional with the states concatenated.

Source: Elman 1990 (RNN), Hochreiter & Schmidhuber 1997 (LSTM), Cho et al. 2014 (GRU), Schuster &
Paliwal 1997 (bidirectional RNN); Bahdanau et al. 2015, §3.2 (h_j =
[h→_j; h←_j], the annotation of word j). Padding is skipped with packed sequences, so the
backward direction starts at each sequence's last real token.
"""

from typing import Literal, Tuple

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnflow.config.registry import ENCODERS, PositiveInt, Probability

CELLS = {"rnn": nn.RNN, "gru": nn.GRU, "lstm": nn.LSTM}



@ENCODERS.register("rnn")
class RNNEncoder(nn.Module):
    """H = (h_1 … h_n), h_j = [h→_j; h←_j] for a bidirectional encoder.

    Args:
        input_dim: size of the input vectors (context: the embedding size).
        cell: 'gru', 'lstm' or 'rnn' (default 'gru').
        hidden_dim: state size per direction (default 128).
        layers: stacked layers (default 1).
        bidirectional: run a backward RNN too and concatenate (default True).
        dropout: between stacked layers (default 0.0).
    Shape:
        x (B, T, input_dim), lengths (B,) -> outputs (B, T, output_dim) with zeros at padding,
        final (B, output_dim): the last layer's final state, directions concatenated.
    """

    def __init__(self, input_dim: int, *, cell: Literal["gru", "lstm", "rnn"] = "gru",
                 hidden_dim: PositiveInt = 128, layers: PositiveInt = 1, bidirectional: bool = True,
                 dropout: Probability = 0.0):
        super().__init__()
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
