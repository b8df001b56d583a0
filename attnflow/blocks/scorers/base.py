"""The scorer contract: a(k, q), the relevance of each key to each query.

Shape:
    query: (..., Tq, Dq), keys: (..., Tk, Dk)  ->  scores: (..., Tq, Tk), raw (unnormalised).

Masking and normalisation live in the attention block (:mod:`attnflow.blocks.attention`), not in
scorers. A scorer may split its work so that a recurrent decoder, which asks with a new query at
every step against the same keys, projects the keys once: ``prepare_keys(keys)`` is called once,
``score_prepared(query, prepared)`` at every step, and ``score(query, keys)`` does both.

``sdpa_scale`` is the factor s when the score is s·qᵀk, so that attention can dispatch to the
fused ``torch.nn.functional.scaled_dot_product_attention``; ``None`` for every other scorer.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from attnflow.registry import ConfigError


class Scorer(nn.Module):
    """Base class: ``score(query, keys) -> (..., Tq, Tk)``."""

    sdpa_scale: Optional[float] = None

    def __init__(self, query_dim: int, key_dim: int):
        super().__init__()
        self.query_dim, self.key_dim = query_dim, key_dim

    def prepare_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return keys

    def score_prepared(self, query: torch.Tensor, prepared: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return self.score_prepared(query, self.prepare_keys(keys))

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return self.score(query, keys)

    def _require_equal_dims(self) -> None:
        if self.query_dim != self.key_dim:
            raise ConfigError(
                f"scorer '{self.registry_name}' compares query and key directly, so it needs "
                f"query_dim == key_dim, got {self.query_dim} and {self.key_dim}; use scorer=general "
                f"or scorer=additive, or attention=multihead (projected q/k/v)"
            )

    def extra_repr(self) -> str:
        return f"query_dim={self.query_dim}, key_dim={self.key_dim}"
