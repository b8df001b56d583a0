"""SoftMax normaliser: α_i = exp(a_i) / Σ_k exp(a_k) over the allowed keys.

Source: Bahdanau et al. 2015, eq. (6) (α_ti = SoftMax_i a(h_i, h′_{t−1})). Masked keys get −∞ before the
SoftMax (padding, causal "future" and graph-neighbourhood masks all enter this way).
"""

from typing import Optional

import torch

from attnflow.blocks.normalizers.base import Normalizer
from attnflow.config.registry import NORMALIZERS, PositiveFloat


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """SoftMax over the last axis with masked keys (``mask`` False) at weight 0; a row with no
    allowed key is all 0 (an empty sentence or document), with zero gradients, not NaN."""
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    # rows with no allowed key are NaN after softmax(-inf, …): zero them (checked on the mask)
    empty = ~mask.any(dim=-1, keepdim=True)
    if bool(empty.any()):
        weights = weights.masked_fill(empty, 0.0)
    return weights


@NORMALIZERS.register("softmax")
class SoftmaxNormalizer(Normalizer):
    """α = SoftMax(scores / temperature, masked by −∞); segment form: PyG's scatter softmax."""

    def __init__(self, *, temperature: PositiveFloat = 1.0):
        super().__init__()
        self.temperature = temperature
        self.is_softmax = temperature == 1.0

    def forward(self, scores: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        if self.temperature != 1.0:
            scores = scores / self.temperature
        if mask is None:
            return torch.softmax(scores, dim=-1)
        return masked_softmax(scores, mask)

    def normalize_segments(self, scores: torch.Tensor, index: torch.Tensor,
                           num_segments: int) -> torch.Tensor:
        """SoftMax over the entries of each segment: PyG's scatter ``softmax`` (E, J) -> (E, J)."""
        from torch_geometric.utils import softmax  # here: importing a normaliser needs no PyG

        if self.temperature != 1.0:
            scores = scores / self.temperature
        return softmax(scores, index, num_nodes=num_segments)
