"""Encoders (SPEC §3)."""

from attnflow.blocks.encoders.rnn import RNNEncoder
from attnflow.blocks.encoders.rnn_unpacked import UnpackedRNNEncoder
from attnflow.blocks.encoders.transformer import TransformerEncoder

__all__ = ["RNNEncoder", "TransformerEncoder", "UnpackedRNNEncoder"]
