"""Attention blocks: single-head and multi-head attention, the shared computation, the penalty."""

from attnflow.blocks.attention.functional import attend, causal_mask, padding_mask
from attnflow.blocks.attention.multihead import MultiHeadAttention
from attnflow.blocks.attention.penalty import diversity_penalty
from attnflow.blocks.attention.relative_multihead import RelativeMultiHeadAttention
from attnflow.blocks.attention.single import Attention

__all__ = ["Attention", "MultiHeadAttention", "RelativeMultiHeadAttention", "attend", "causal_mask", "diversity_penalty",
           "padding_mask"]
