"""Encoders (SPEC §3)."""

from attnflow.blocks.encoders.rnn import RNNEncoder

__all__ = ["RNNEncoder"]
