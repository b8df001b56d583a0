"""Multi-head self-attention with relative position representations, chosen by name.

Source: Shaw, Uszkoreit & Vaswani 2018, "Self-attention with relative position representations",
eq. (3)–(4):

    c_j = Σ_i (v_i + wᵛ_{i⊟j}) SoftMax_i a(k_i + wᵏ_{i⊟j}, q_j),   i⊟j = clip(i − j, −δ, δ)

The computation is ``multihead``'s relative path (:mod:`attnflow.blocks.attention.multihead`);
this block only makes it a choice of the ``attention`` group with its own δ (``max_distance``),
usable beside absolute encodings (``positional=sinusoidal``; Shaw et al. §4 combine both). A
parent whose positions are relative (``positional=relative``) makes plain ``multihead``
relative too, with the positional block's δ.

Relative distances exist only within one sequence: built for attention across two sequences
(``self_attention=False``, e.g. a Transformer decoder's encoder–decoder attention) the block is
plain multi-head attention, as in the paper, which adds them to self-attention only. Parents that
have no self-attention at all (RNN decoders) refuse it (class attribute ``relative``).
"""

from __future__ import annotations

from typing import Optional

from attnflow.blocks.attention.multihead import MultiHeadAttention
from attnflow.config.registry import ATTENTIONS, BlockSpec, ConfigError, PositiveInt, Probability


@ATTENTIONS.register("relative_multihead")
class RelativeMultiHeadAttention(MultiHeadAttention):
    """``multihead`` whose self-attention carries clipped relative distances (Shaw et al. 2018).

    Args:
        query_dim, key_dim, value_dim: sizes of q, k, v (context).
        self_attention: the parent attends within one sequence (context; False: no relative terms).
        relative_distance: δ from a relative positional block (context); must then equal
            ``max_distance``.
        max_distance: δ, the clipping distance (default 16, as Shaw et al.).
        heads, head_dim, scorer, normalizer, aggregator, dropout, bias, shared_kv: as ``multihead``.
    Shape: as ``multihead``.
    """

    relative = True

    def __init__(self, query_dim: int, key_dim: int, value_dim: int, self_attention: bool = False,
                 relative_distance: Optional[PositiveInt] = None, *, max_distance: PositiveInt = 16,
                 heads: PositiveInt = 8, head_dim: Optional[PositiveInt] = None,
                 scorer: BlockSpec["scorer"] = {"name": "scaled_dot"},
                 normalizer: BlockSpec["normalizer"] = {"name": "softmax"},
                 aggregator: BlockSpec["aggregator"] = {"name": "concat_proj"},
                 dropout: Probability = 0.0, bias: bool = True, shared_kv: bool = False):
        if relative_distance is not None and relative_distance != max_distance:
            raise ConfigError(
                f"attention 'relative_multihead' has max_distance={max_distance} but the positional "
                f"block asks for δ={relative_distance}; set one of them (attention.max_distance or "
                f"positional.max_distance) so they agree")
        if max_distance < 0:
            raise ConfigError(f"attention 'relative_multihead': max_distance must be >= 0, got {max_distance}")
        super().__init__(query_dim, key_dim, value_dim, self_attention,
                         max_distance if self_attention else None, heads=heads, head_dim=head_dim,
                         scorer=scorer, normalizer=normalizer, aggregator=aggregator,
                         dropout=dropout, bias=bias, shared_kv=shared_kv)
