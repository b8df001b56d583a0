"""Plain normalisation of a positive score: norm_i(p_i) = p_i / Σ_k p_k.

The general form α_ti = norm_i a(h_i, h′_{t−1}); with p = exp(a) it is SoftMax (Bahdanau et al.
2015, eq. (6)). ``positive`` makes a score positive first: 'none', 'exp', 'softplus', 'relu'.
"""

from typing import Literal, Optional

import torch
import torch.nn.functional as F

from attnflow.blocks.normalizers.base import Normalizer
from attnflow.config.registry import NORMALIZERS


@NORMALIZERS.register("norm")
class NormNormalizer(Normalizer):
    """α_i = p_i / (Σ_k p_k + eps) with p = positive(a), p = 0 on masked keys."""

    def __init__(self, *, positive: Literal["softplus", "exp", "relu", "none"] = "softplus",
                 eps: float = 1e-12):
        super().__init__()
        self.positive, self.eps = positive, eps

    def _positive(self, scores: torch.Tensor, shift: Optional[torch.Tensor]) -> torch.Tensor:
        """p = positive(scores); for exp, exp(a − max) (the ratios of exp(a), in range)."""
        if self.positive == "exp":
            return torch.exp(scores - shift.clamp_min(-1e30).detach())
        if self.positive == "softplus":
            return F.softplus(scores)
        if self.positive == "relu":
            return F.relu(scores)
        return scores

    def normalize_segments(self, scores: torch.Tensor, index: torch.Tensor,
                           num_segments: int) -> torch.Tensor:
        """p / (Σ p over the entries of the segment + eps), p = positive(scores): (E, J) -> (E, J)."""
        shift = None
        if self.positive == "exp":  # shift by the segment's max, as forward shifts by the row's
            idx = index.view(-1, *([1] * (scores.dim() - 1))).expand_as(scores)
            top = scores.new_full((num_segments, *scores.shape[1:]), float("-inf"))
            shift = top.scatter_reduce(0, idx, scores, reduce="amax", include_self=True)[index]
        p = self._positive(scores, shift)
        total = p.new_zeros((num_segments, *p.shape[1:])).index_add_(0, index, p)
        return p / (total[index] + self.eps)

    def forward(self, scores: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        shift = None
        if self.positive == "exp":
            shift = scores if mask is None else scores.masked_fill(~mask, float("-inf"))
            shift = shift.amax(dim=-1, keepdim=True)
        p = self._positive(scores, shift)
        if mask is not None:
            p = p.masked_fill(~mask, 0.0)
        return p / (p.sum(dim=-1, keepdim=True) + self.eps)
