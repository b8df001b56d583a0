"""The normaliser contract: turn raw scores into attention weights α.

Shape:
    scores: (..., Tq, Tk); mask: bool, broadcastable to scores, True where a key may be attended
    (None: all) -> weights (..., Tq, Tk), each row ≥ 0 summing to 1 over the allowed keys, 0 on
    masked keys. A row with no allowed key gets all-zero weights (an empty context), not NaN.

Segment form (optional; graph attention needs it): the keys of a query are not a padded row but
the edges that share a target node, ``normalize_segments(scores (E, J), index (E,),
num_segments) -> (E, J)``: for every segment s (target node) and column j, the weights of the
edges e with ``index[e] == s`` are ≥ 0 and sum to 1, normalised as ``forward`` normalises a row
(a segment with no edge has nothing to normalise). ``has_segment_form()`` says whether a class
implements it, so that a block can refuse a normaliser without one when it is built.
"""

from typing import Optional

import torch
from torch import nn


class Normalizer(nn.Module):
    """Base class: ``forward(scores, mask) -> weights``."""

    #: True when the normaliser is SoftMax, so attention may use the fused SDPA kernel.
    is_softmax: bool = False

    def forward(self, scores: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        raise NotImplementedError

    def normalize_segments(self, scores: torch.Tensor, index: torch.Tensor,
                           num_segments: int) -> torch.Tensor:
        """Normalise (E, J) scores over the entries sharing ``index`` (E,) in [0, num_segments)."""
        raise NotImplementedError(f"normalizer '{getattr(self, 'registry_name', type(self).__name__)}' "
                                  f"has no segment form")

    @classmethod
    def has_segment_form(cls) -> bool:
        return cls.normalize_segments is not Normalizer.normalize_segments
