"""The normaliser contract: turn raw scores into attention weights α.

Shape:
    scores: (..., Tq, Tk); mask: bool, broadcastable to scores, True where a key may be attended
    (None: all) -> weights (..., Tq, Tk), each row ≥ 0 summing to 1 over the allowed keys, 0 on
    masked keys. A row with no allowed key gets all-zero weights (an empty context), not NaN.
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
