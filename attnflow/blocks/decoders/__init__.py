"""Decoders (SPEC §3)."""

from attnflow.blocks.decoders.rnn_attention import AttentionRNNDecoder

__all__ = ["AttentionRNNDecoder"]
