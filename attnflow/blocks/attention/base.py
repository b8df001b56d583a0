"""The attention-block contract: c = Attn(q, K, V), the work on K and V split from the query.

    c_j = Σ_i v_i · norm_i a(k_i, q_j)      (Bahdanau et al. 2015, eq. (5)–(6); Vaswani et al.
                                             2017, eq. (1), with a pluggable score a and norm)

Context: ``(query_dim, key_dim, value_dim, self_attention=False, relative_distance=None)``;
δ = ``relative_distance`` asks for relative-position terms in self-attention (Shaw et al. 2018).
``prepare(keys, values)`` = ``prepare_projected(*project(keys, values))`` is the per-key work
(``project`` can be cached row by row while decoding); ``attend(query, memory, mask, causal=,
need_weights=, query_offset=)`` attends over it. Capabilities: ``plain`` (the context is α @ the
given values, no projections: Luong's local windows need it) and ``relative`` (the block carries
relative positions of its own).
"""

from __future__ import annotations

from typing import ClassVar, Optional, Tuple, Type

import torch
from torch import nn

from attnflow.config.registry import ConfigError


class AttentionBlock(nn.Module):
    """Base class of attention blocks."""

    plain: ClassVar[bool] = False
    relative: ClassVar[bool] = False
    #: the features of the context it returns (set by a subclass)
    output_dim: int

    def project(self, keys: torch.Tensor, values: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return keys, values

    def prepare_projected(self, keys: torch.Tensor, values: torch.Tensor):
        return self.scorer.prepare_keys(keys), values

    def prepare(self, keys: torch.Tensor, values: torch.Tensor):
        """Work on the keys and values that does not depend on the query (once per sequence)."""
        return self.prepare_projected(*self.project(keys, values))

    def attend(self, query: torch.Tensor, memory, mask: Optional[torch.Tensor] = None, *,
               causal: bool = False, need_weights: bool = False, query_offset: int = 0
               ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        raise NotImplementedError

    def forward(self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                mask: Optional[torch.Tensor] = None, *, causal: bool = False,
                need_weights: bool = False, query_offset: int = 0
                ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        return self.attend(query, self.prepare(keys, values), mask, causal=causal,
                           need_weights=need_weights, query_offset=query_offset)


def refuse_relative(attention_cls: Type[AttentionBlock], where: str) -> None:
    """ConfigError when a parent without self-attention (``where``) gets a relative attention."""
    if attention_cls.relative:
        raise ConfigError(
            f"attention '{attention_cls.registry_name}' scores pairs by their relative position "
            f"i − j in self-attention (Shaw et al. 2018), which {where} lacks; use "
            f"attention=single or multihead")
