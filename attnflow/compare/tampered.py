"""Attention weights tampered with inside a model: a normaliser that wraps a model's own and
transforms the weights it makes, installed for the duration of a ``with`` block.

Jain & Wallace 2019, "Attention is not Explanation" (NAACL), §4: the output of a model whose
attention weights are randomly permuted (§4.2), and the gradient importance of its inputs with
the attention layer disconnected from the graph (§4.1). Both act on the weights after the
normaliser, so the wrapper delegates ``forward(scores, mask)`` and ``normalize_segments(scores,
index, num_segments)`` to the wrapped normaliser and then permutes or detaches:

- ``permute``: within each row over its valid keys (mask True), or within each segment (a node's
  incoming edges), each head independently; padding keeps its zero weight. Vectorised: the
  valid keys are sorted by random keys (invalid keys sort last; segments by (segment, key)).
- ``detach``: the weights cut from the graph (their values unchanged).

``rows``: only these query rows (axis −2) are transformed, e.g. (0,) for BERT's ⟨CLS⟩ row.
``is_softmax`` is False, so an attention block takes its explicit path, which calls the
normaliser (:func:`attnflow.blocks.attention.functional.choose_path`). With ``record``, every
call appends the wrapped normaliser's own weights (detached) and their validity (a bool mask, or
the segment index) to ``records``.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, List, Literal, Optional, Sequence, Tuple

import torch
from torch import nn

from attnflow.blocks.normalizers.base import Normalizer

Mode = Literal["permute", "detach"]


def permute_rows(weights: torch.Tensor, valid: torch.Tensor,
                 generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Each row (last axis) of ``weights`` permuted at random among its ``valid`` positions;
    invalid positions keep their values. ``valid``: bool, broadcastable to ``weights``."""
    valid = valid.expand(weights.shape)
    keys = torch.rand(weights.shape, generator=generator, device=weights.device)
    keys = keys.masked_fill(~valid, 2.0)                    # invalid positions sort last
    source = torch.argsort(keys, dim=-1)                    # valid positions, in random order
    target = torch.argsort((~valid).to(torch.int8), dim=-1, stable=True)  # valid, in order
    permuted = torch.empty_like(weights).scatter_(-1, target, weights.gather(-1, source))
    return torch.where(valid, permuted, weights)


def permute_segments(weights: torch.Tensor, index: torch.Tensor,
                     generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """(E, J) weights permuted at random among the entries sharing ``index`` (E,), each column
    (head) independently: entries sorted by (segment, random key) fill the segment's slots in
    their original order."""
    keys = torch.rand(weights.shape, generator=generator, device=weights.device)
    by_key = torch.argsort(keys, dim=0)                                  # (E, J)
    by_segment = torch.argsort(index[by_key], dim=0, stable=True)
    source = by_key.gather(0, by_segment)                 # by (segment, random key), per column
    target = torch.argsort(index, stable=True)            # by segment, in edge order
    permuted = torch.empty_like(weights)
    permuted[target] = weights.gather(0, source)
    return permuted


class TamperedNormalizer(Normalizer):
    """The weights of ``inner`` permuted (with ``generator``) or detached (see the module's
    docstring); ``rows``: the query rows (axis −2) transformed, None: all."""

    is_softmax = False

    def __init__(self, inner: Normalizer, mode: Mode, generator: Optional[torch.Generator] = None,
                 rows: Optional[Sequence[int]] = None, record: bool = True):
        super().__init__()
        if mode not in ("permute", "detach"):
            raise ValueError(f"tampered normaliser: mode '{mode}' is not permute or detach")
        self.inner, self.mode, self.generator = inner, mode, generator
        self.rows = None if rows is None else tuple(rows)
        self.registry_name, self.record = inner.registry_name, record
        self.records: List[Tuple[torch.Tensor, torch.Tensor]] = []

    def _chosen(self, weights: torch.Tensor, changed: torch.Tensor) -> torch.Tensor:
        """``changed`` on the chosen query rows, ``weights`` on the others."""
        if self.rows is None:
            return changed
        pick = torch.zeros(weights.shape[-2], dtype=torch.bool, device=weights.device)
        pick[list(self.rows)] = True
        return torch.where(pick.unsqueeze(-1), changed, weights)

    def forward(self, scores: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        weights = self.inner(scores, mask)
        valid = (torch.ones_like(weights, dtype=torch.bool) if mask is None
                 else mask.expand(weights.shape))
        if self.record:
            self.records.append((weights.detach(), valid))
        if self.mode == "detach":
            return self._chosen(weights, weights.detach())
        return self._chosen(weights, permute_rows(weights, valid, self.generator))

    def normalize_segments(self, scores: torch.Tensor, index: torch.Tensor,
                           num_segments: int) -> torch.Tensor:
        weights = self.inner.normalize_segments(scores, index, num_segments)
        if self.record:
            self.records.append((weights.detach(), index))
        if self.mode == "detach":
            return weights.detach()
        return permute_segments(weights, index, self.generator)


@contextmanager
def tampered(owners: Sequence[Tuple[nn.Module, Optional[Sequence[int]]]], mode: Mode,
             generator: Optional[torch.Generator] = None,
             record: bool = True) -> Iterator[List[TamperedNormalizer]]:
    """Each ``(owner, rows)``'s ``owner.normalizer`` replaced by a :class:`TamperedNormalizer`
    (yielded, in order) inside the block; the owners' own normalisers are back after it, also
    when it raises."""
    installed: List[Tuple[nn.Module, TamperedNormalizer]] = []
    try:
        for owner, rows in owners:
            wrapper = TamperedNormalizer(owner.normalizer, mode, generator, rows, record)
            owner.normalizer = wrapper
            installed.append((owner, wrapper))
        yield [w for _, w in installed]
    finally:
        for owner, wrapper in reversed(installed):
            owner.normalizer = wrapper.inner
