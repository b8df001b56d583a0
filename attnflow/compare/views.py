"""What a run's attention on one example is, in one shape for every family: views (one kind of
attention in one layer, every head), each row a distribution over its columns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Sequence

import numpy as np
import torch

from attnflow.viz.figures import alpha_label


@dataclass
class View:
    """One kind of attention of one example in one layer.

    ``weights`` (H, R, C): heads (a model's r hops count as heads), rows (the queries: output
    tokens, sentences, a node, ⟨CLS⟩) and columns (what they attend to). Row r is a distribution
    over its first ``lengths[r]`` columns, zero after. ``labels[r]``: the names of row r's
    columns (``lengths[r]`` of them); ``rows``: the rows' names. Kinds: ``cross``,
    ``encoder_self``, ``decoder_self`` (translation; rows: target tokens, teacher-forced),
    ``word`` and ``sentence`` (HAN), ``hops`` (self-attentive), ``cls`` (BERT's ⟨CLS⟩ row),
    ``self`` (BERT token tagging), ``neighbours`` (GAT), ``regions`` (captioning).
    """

    kind: str
    layer: int                 # 0-based
    layers: int                # how many layers this kind has
    weights: np.ndarray        # (H, R, C)
    rows: List[str]
    labels: List[List[str]]
    lengths: np.ndarray        # (R,) int

    @property
    def heads(self) -> int:
        return int(self.weights.shape[0])

    def name(self) -> str:
        """``cross`` for a kind with one layer, else ``cross L2`` (1-based)."""
        return self.kind if self.layers == 1 else f"{self.kind} L{self.layer + 1}"

    @classmethod
    def build(cls, kind: str, layer: int, layers: int, weights, rows: Sequence[str],
              labels: Sequence[Sequence[str]]) -> "View":
        """The view of ``weights`` ((H, R, ≥C) tensor or array) whose row r has the columns
        ``labels[r]`` (its length), cut to the ``rows`` and the longest row, as float32 (what
        lies past a row's end is the model's: masked attention gives zeros there)."""
        w = weights.detach().float().cpu().numpy() if torch.is_tensor(weights) else np.asarray(weights)
        lengths = np.asarray([len(c) for c in labels], dtype=np.int64)
        w = np.array(w[:, : len(rows), : int(lengths.max(initial=0))], dtype=np.float32)
        return cls(kind, layer, layers, w, list(rows), [list(c) for c in labels], lengths)

    def head_of(self, head: Optional[int]) -> Optional[int]:
        """The head a picture of ``head`` shows (0-based): None (the mean) or one of its heads,
        a head past the last its last."""
        return None if head is None or self.heads == 1 else min(head, self.heads - 1)

    def matrix(self, head: Optional[int] = None) -> torch.Tensor:
        """(R, C): head ``head`` (:meth:`head_of`), or the mean over the heads."""
        shown = self.head_of(head)
        w = torch.from_numpy(self.weights)
        return w.mean(0) if shown is None else w[shown]

    def label(self, head: Optional[int] = None) -> str:
        """What :meth:`matrix` of ``head`` is, for pictures: e.g. "α (layer 2 of 3, head 1 of 4)"."""
        shown = self.head_of(head)
        return alpha_label(self.heads, (self.layer + 1, self.layers) if self.layers > 1 else None,
                           None if shown is None else shown + 1)


@dataclass
class ExampleViews:
    """One example as one run sees it: ``key`` names it the same in every run (``val 3``,
    ``node 17``), ``title`` shows it (the source, the document, the true class), ``views``
    every kind and layer, ``picture`` a PNG of the chosen layer and head (mean over heads by
    default), drawn as the run's dashboard draws it, and ``caption`` what the picture shows."""

    key: str
    title: str
    views: List[View]
    picture: Optional[bytes] = None
    caption: str = ""
    prediction: str = ""
    extra: dict = field(default_factory=dict)


def pick(views: Sequence[View], kind: str, layer: Optional[int] = None) -> Optional[View]:
    """The view of ``kind`` in layer ``layer`` (0-based; None, or past the last: the last, so one
    choice serves runs of different depths), None where there is none of that kind."""
    of_kind = [v for v in views if v.kind == kind]
    if not of_kind:
        return None
    return of_kind[-1] if layer is None else of_kind[min(layer, len(of_kind) - 1)]


def example_keys(n: int, keys: Optional[Sequence[str]]) -> List[str]:
    """``keys`` (one per example), else ``val 0`` … ``val n-1``."""
    keys = [f"val {i}" for i in range(n)] if keys is None else list(keys)
    if len(keys) != n:
        raise ValueError(f"{len(keys)} keys for a batch of {n} examples")
    return keys
