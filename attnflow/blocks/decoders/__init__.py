"""Decoders (SPEC §3); the decoder protocol is in :mod:`attnflow.blocks.decoders.base`."""

from attnflow.blocks.decoders.base import Decoder, reorder_state
from attnflow.blocks.decoders.luong import LuongDecoder
from attnflow.blocks.decoders.rnn import RNNDecoder
from attnflow.blocks.decoders.rnn_attention import AttentionRNNDecoder
from attnflow.blocks.decoders.transformer import TransformerDecoder

__all__ = ["AttentionRNNDecoder", "Decoder", "LuongDecoder", "RNNDecoder", "TransformerDecoder", "reorder_state"]
