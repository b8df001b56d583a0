"""The scorer contract: a(k, q), the relevance of each key to each query.

Shape:
    query: (..., Tq, Dq), keys: (..., Tk, Dk)  ->  scores: (..., Tq, Tk), raw (unnormalised).

Masking and normalisation live in the attention block (:mod:`attnflow.blocks.attention`), not in
scorers. A scorer may split its work so that a recurrent decoder, which asks with a new query at
every step against the same keys, projects the keys once: ``prepare_keys(keys)`` is called once,
``score_prepared(query, prepared)`` at every step, and ``score(query, keys)`` does both.

``sdpa_scale`` is the factor s when the score is s·qᵀk, so that attention can dispatch to the
fused ``torch.nn.functional.scaled_dot_product_attention``; ``None`` for every other scorer.

Capabilities, read by composing blocks instead of dispatching on scorer names or classes (class
attributes, so ``SCORERS.get(name).requires_equal_dims`` answers without building the scorer):

``requires_equal_dims``
    True when the scorer compares q and k directly, so every instance needs
    ``query_dim == key_dim`` (dot, scaled_dot, cosine). The base constructor then runs
    ``_require_equal_dims()``, a :class:`~attnflow.config.registry.ConfigError` naming the sizes. A
    scorer whose need depends on its fields (gatv2 without ``hidden_dim``, gat with it) leaves the
    attribute False and calls ``_require_equal_dims()`` itself.

``decomposable``
    True when a(k, q) = ``combine_terms(key_terms(k), query_terms(q))`` with one number per
    vector: ``key_terms(keys (..., T, Dk)) -> (..., T)``, ``query_terms(query (..., T, Dq)) ->
    (..., T)`` and an elementwise, broadcasting ``combine_terms(key_term, query_term)`` (gat:
    LeakyReLU(uᵀk + vᵀq); const: 0). Edge attention then computes the terms once per node and
    gathers them per edge (as PyG's ``GATConv``) instead of scoring per-edge feature vectors.
    The learned parts are f and g: ``combine_terms`` uses no parameters (its fields, e.g. a
    slope, are the same for every head), so it is applied to the terms of all heads at once.
    Optionally ``stacked_terms(scorers, x)`` (a classmethod) computes the terms of J scorers of
    the class at once, x (..., J, D) -> ((..., J), (..., J)), e.g. from stacked parameters;
    without it (it returns None) a J-head layer runs the per-head methods under ``torch.func.vmap``.

``reset_parameters(heads)``
    Re-initialise the parameters for use as one head of a layer of ``heads`` scorers, one per
    head (the graph attention layer calls it for each head's scorer). The default does nothing
    (the constructor's initialisation stands); gat uses ``GATConv``'s glorot over (J, C).
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch
from torch import nn

from attnflow.config.registry import ConfigError


class Scorer(nn.Module):
    """Base class: ``score(query, keys) -> (..., Tq, Tk)``; capabilities in the module docstring."""

    sdpa_scale: Optional[float] = None
    #: every instance needs query_dim == key_dim (checked in ``__init__``): q and k are compared directly
    requires_equal_dims: bool = False
    #: a(k, q) = combine_terms(key_terms(k), query_terms(q)) with per-vector terms
    decomposable: bool = False

    def __init__(self, query_dim: int, key_dim: int):
        super().__init__()
        self.query_dim, self.key_dim = query_dim, key_dim
        if self.requires_equal_dims:
            self._require_equal_dims()

    def prepare_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return keys

    def score_prepared(self, query: torch.Tensor, prepared: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

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
        return getattr(self, "registry_name", type(self).__name__)

    def _require_equal_dims(self) -> None:
        if self.query_dim != self.key_dim:
            raise ConfigError(
                f"scorer '{self._name()}' compares query and key directly, so it needs "
                f"query_dim == key_dim, got {self.query_dim} and {self.key_dim}; use scorer=general "
                f"or scorer=additive, or attention=multihead (projected q/k/v)"
            )

    def extra_repr(self) -> str:
        return f"query_dim={self.query_dim}, key_dim={self.key_dim}"
