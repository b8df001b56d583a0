"""The normaliser contract: raw scores (..., Tq, Tk) and a bool mask (True: may be attended) ->
weights α ≥ 0 summing to 1 over the allowed keys; a row with none is all zero, not NaN.

Segment form (graph attention): ``normalize_segments(scores (E, J), index (E,), num_segments)``
normalises over the entries sharing an index (a node's incoming edges); ``has_segment_form()``
says whether a class has one.
"""

from typing import Optional, Protocol, runtime_checkable

import torch
from torch import nn


class Normalizer(nn.Module):
    """Base class: ``forward(scores, mask) -> weights``."""

    #: True when the normaliser is SoftMax, so attention may use the fused SDPA kernel.
    is_softmax: bool = False
    #: the name it is registered under (set by the registry); None: not registered
    registry_name: Optional[str] = None

    def forward(self, scores: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        raise NotImplementedError

    def normalize_segments(self, scores: torch.Tensor, index: torch.Tensor,
                           num_segments: int) -> torch.Tensor:
        """Normalise (E, J) scores over the entries sharing ``index`` (E,) in [0, num_segments)."""
        raise NotImplementedError(f"normalizer '{self.registry_name or type(self).__name__}' "
                                  f"has no segment form")

    @classmethod
    def has_segment_form(cls) -> bool:
        return cls.normalize_segments is not Normalizer.normalize_segments


@runtime_checkable
class Normalized(Protocol):
    """A block whose attention weights one normaliser makes: its ``normalizer`` (attention
    pooling, attention layers, graph attention), which a caller may wrap for a pass."""

    normalizer: Normalizer
