"""Multi-head self-attention with relative position representations, chosen by name.

Shaw, Uszkoreit & Vaswani 2018, eq. (3)–(4):

    c_j = Σ_i (v_i + wᵛ_{i⊟j}) SoftMax_i a(k_i + wᵏ_{i⊟j}, q_j),   i⊟j = clip(i − j, −δ, δ)

``multihead``'s relative path with its own δ (``max_distance``), usable beside absolute encodings
(Shaw et al. §4). Across two sequences (``self_attention=False``) it is plain ``multihead``.
"""

from __future__ import annotations

from typing import Optional

from attnflow.blocks.attention.functional import Backend
from attnflow.blocks.attention.multihead import MultiHeadAttention
from attnflow.config.registry import ATTENTIONS, BlockSpec, ConfigError, PositiveInt, Probability


@ATTENTIONS.register("relative_multihead")
class RelativeMultiHeadAttention(MultiHeadAttention):
    """``multihead`` whose self-attention carries clipped relative distances (Shaw et al. 2018)."""

    relative = True

    def __init__(self, query_dim: int, key_dim: int, value_dim: int, self_attention: bool = False,
                 relative_distance: Optional[PositiveInt] = None, *, max_distance: PositiveInt = 16,
                 heads: PositiveInt = 8, head_dim: Optional[PositiveInt] = None,
                 scorer: BlockSpec["scorer"] = {"name": "scaled_dot"},
                 normalizer: BlockSpec["normalizer"] = {"name": "softmax"},
                 aggregator: BlockSpec["aggregator"] = {"name": "concat_proj"},
                 dropout: Probability = 0.0, bias: bool = True, shared_kv: bool = False,
                 backend: Backend = "auto"):
        if relative_distance is not None and relative_distance != max_distance:
            raise ConfigError(
                f"attention 'relative_multihead' has max_distance={max_distance} but the positional "
                f"block asks for δ={relative_distance}; make them agree")
        super().__init__(query_dim, key_dim, value_dim, self_attention,
                         max_distance if self_attention else None, heads=heads, head_dim=head_dim,
                         scorer=scorer, normalizer=normalizer, aggregator=aggregator,
                         dropout=dropout, bias=bias, shared_kv=shared_kv, backend=backend)
