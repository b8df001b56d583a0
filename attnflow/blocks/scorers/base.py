"""The scorer contract: a(k, q), the relevance of each key to each query.

query (..., Tq, Dq), keys (..., Tk, Dk) -> raw scores (..., Tq, Tk). ``prepare_keys(keys)`` runs
once per key sequence and ``score_prepared(query, prepared)`` per query (a decoder's steps);
``score`` does both. Masking and normalisation belong to the attention block.

Capabilities (class attributes, read without building the scorer):

- ``sdpa_scale``: s when a = s·qᵀk on the raw query and keys (else None);
- ``dot_product``: a = ``dot_query(q)``ᵀk̃ with k̃ the prepared keys (dot, scaled_dot, cosine,
  general), so SDPA and FlexAttention run it as a plain dot product;
- ``requires_equal_dims``: q and k are compared directly (dot, scaled_dot, cosine);
- ``decomposable``: a = ``combine_terms(key_terms(k), query_terms(q))`` with one number per
  vector and a parameter-free combine, so graph attention computes the terms per node (as
  GATConv); ``stacked_terms(scorers, x)`` may compute J scorers' terms at once (None: vmap);
  ``prepared_terms(prepared)`` reads f(k) off the prepared keys (FlexAttention's ``score_mod``);
- ``reset_parameters(heads)``: re-initialise as one head of ``heads`` (gat: GATConv's glorot).
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch
from torch import nn

from attnflow.config.registry import ConfigError


class Scorer(nn.Module):
    """Base class: ``score(query, keys) -> (..., Tq, Tk)``."""

    #: the name it is registered under (set by the registry); None: not registered
    registry_name: Optional[str] = None
    sdpa_scale: Optional[float] = None
    #: every instance needs query_dim == key_dim (checked in ``__init__``): q and k are compared directly
    requires_equal_dims: bool = False
    #: a(k, q) = combine_terms(key_terms(k), query_terms(q)) with per-vector terms
    decomposable: bool = False
    #: a = dot_query(q)ᵀ prepare_keys(k)
    dot_product: bool = False

    def __init__(self, query_dim: int, key_dim: int):
        super().__init__()
        self.query_dim, self.key_dim = query_dim, key_dim
        if self.requires_equal_dims:
            self._require_equal_dims()

    def prepare_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return keys

    def score_prepared(self, query: torch.Tensor, prepared: torch.Tensor) -> torch.Tensor:
        if self.dot_product:
            return self.dot_query(query) @ prepared.transpose(-1, -2)
        raise NotImplementedError

    def dot_query(self, query: torch.Tensor) -> torch.Tensor:
        """q̃ (..., Tq, Dk) with a(k, q) = q̃ᵀ prepare_keys(k) (``dot_product`` scorers)."""
        raise NotImplementedError(f"scorer '{self._name()}' is not a dot product")

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return self.score_prepared(query, self.prepare_keys(keys))

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return self.score(query, keys)

    # -- the decomposable protocol (``decomposable = True``) ------------------------------------
    def key_terms(self, keys: torch.Tensor) -> torch.Tensor:
        """f(k): (..., Tk, Dk) -> (..., Tk)."""
        raise NotImplementedError(f"scorer '{self._name()}' is not decomposable")

    def query_terms(self, query: torch.Tensor) -> torch.Tensor:
        """g(q): (..., Tq, Dq) -> (..., Tq)."""
        raise NotImplementedError(f"scorer '{self._name()}' is not decomposable")

    def prepared_terms(self, prepared: torch.Tensor) -> torch.Tensor:
        """f(k) (..., Tk) from ``prepare_keys(k)``."""
        raise NotImplementedError(f"scorer '{self._name()}' is not decomposable")

    def combine_terms(self, key_term: torch.Tensor, query_term: torch.Tensor) -> torch.Tensor:
        """a = combine(f(k), g(q)), elementwise with broadcasting; uses no parameters."""
        raise NotImplementedError(f"scorer '{self._name()}' is not decomposable")

    @classmethod
    def stacked_terms(cls, scorers: Sequence["Scorer"],
                      x: torch.Tensor) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
        """(key terms, query terms) of J scorers of this class on x (..., J, D), head j of x to
        ``scorers[j]``: ((..., J), (..., J)) in one batched computation; None if not available."""
        return None

    # -- use as one of J heads ----------------------------------------------------------------------
    def reset_parameters(self, heads: int = 1) -> None:
        """Re-initialise as one head of ``heads``; by default keep the constructor's values."""

    def _name(self) -> str:
        return self.registry_name or type(self).__name__

    def _require_equal_dims(self) -> None:
        if self.query_dim != self.key_dim:
            raise ConfigError(
                f"scorer '{self._name()}' compares query and key directly, so it needs "
                f"query_dim == key_dim, got {self.query_dim} and {self.key_dim}; use scorer=general "
                f"or scorer=additive, or attention=multihead (projected q/k/v)"
            )

    def extra_repr(self) -> str:
        return f"query_dim={self.query_dim}, key_dim={self.key_dim}"
