"""What a run's attention on one example is, in one shape for every family: views (one kind of
attention in one layer, every head), each row a distribution over its columns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np


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
