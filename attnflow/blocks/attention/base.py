"""The attention-block contract: c = Attn(q, K, V), with the work on K and V split from the query.

    c_j = Σ_i v_i · norm_i a(k_i, q_j)          (Bahdanau et al. 2015, eq. (5)–(6); Vaswani et al.
                                                 2017, eq. (1), with a pluggable score a and norm)

Context (positional constructor arguments, supplied by the parent block, never YAML):
``(query_dim, key_dim, value_dim, self_attention=False, relative_distance=None)``.
``self_attention`` says that queries and keys are positions of one sequence (a Transformer
layer), so the distance i − j between them means something; ``relative_distance`` δ asks for
relative-position terms (Shaw et al. 2018) in self-attention — a block that cannot add them
refuses it with a :class:`~attnflow.config.registry.ConfigError`.

Methods (all blocks):

``forward(query, keys, values, mask=None, *, causal=False, need_weights=False, query_offset=0)``
    -> context (B, Tq, output_dim), weights (B, J, Tq, Tk) or (B, Tq, Tk) for one head, or None.
``project(keys, values) -> (k, v)``
    the parent-independent per-key work that can be cached row by row (a decoder appends the new
    position's k, v to a cache each step); ``prepare_projected(k, v) -> memory`` finishes it
    (the scorer's key preparation); ``prepare(keys, values)`` does both.
``attend(query, memory, mask=None, *, causal=False, need_weights=False, query_offset=0)``
    attention over a prepared memory; ``query_offset`` is the position of the first query row
    (relative positions during incremental decoding).

Capabilities (class attributes, read from the class without building it):

``plain``     the context is α @ values of the given keys and values (no projections): local
              attention windows (Luong et al. 2015) reweight α and recompute c from them, and
              the scorer sees the raw query and keys (dot-product scorers then need equal sizes).
``relative``  the block carries relative positions of its own (``relative_multihead``); parents
              with no self-attention (RNN decoders) refuse it, since it would do nothing there.
"""

from __future__ import annotations

from typing import ClassVar, Optional, Tuple

import torch
from torch import nn

from attnflow.config.registry import ConfigError


class AttentionBlock(nn.Module):
    """Base class of attention blocks (see the module docstring)."""

    plain: ClassVar[bool] = False
    relative: ClassVar[bool] = False

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


def refuse_relative(attention_cls: type, where: str) -> None:
    """ConfigError when a parent without self-attention (``where``) gets a relative attention."""
    if getattr(attention_cls, "relative", False):
        raise ConfigError(
            f"attention '{attention_cls.registry_name}' scores query–key pairs by their relative "
            f"position i − j within one sequence (self-attention, Shaw et al. 2018); {where} "
            f"attends from target states to source words, which share no position axis, so it "
            f"would do nothing here. Use attention=single or multihead, or a Transformer model "
            f"for relative positions")
