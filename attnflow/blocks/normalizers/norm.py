"""Plain normalisation of a positive score: norm_i(p_i) = p_i / Σ_k p_k.

Source: seed 000 ("здесь и далее norm_i(p_i) = p_i / Σ_k p_k"; with a(h, h′) = exp(hᵀh′) norm
becomes SoftMax). ``positive`` says how a raw score is made positive first:
'none' (the scorer's score is used as it is and must be ≥ 0), 'exp' (p = exp(a), which makes this
SoftMax), 'softplus' (p = log(1 + eᵃ)), 'relu' (p = max(a, 0)). Masked keys get p = 0. ``eps``
keeps a row whose p are all zero from dividing by zero (its weights stay 0).
"""

from typing import Literal, Optional

import torch
import torch.nn.functional as F

from attnflow.blocks.normalizers.base import Normalizer
from attnflow.registry import NORMALIZERS


@NORMALIZERS.register("norm")
class NormNormalizer(Normalizer):
    """α_i = p_i / Σ_k p_k with p = positive(a), p = 0 on masked keys.

    Args:
        positive: 'none', 'exp', 'softplus' or 'relu' (default 'softplus').
        eps: added to the denominator (default 1e-12).
    Shape: scores (..., Tq, Tk), mask broadcastable bool -> (..., Tq, Tk).
    """

    def __init__(self, *, positive: Literal["softplus", "exp", "relu", "none"] = "softplus",
                 eps: float = 1e-12):
        super().__init__()
        self.positive, self.eps = positive, eps

    def forward(self, scores: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        if self.positive == "exp":
            # exp(a - max) / Σ exp(a - max) = exp(a) / Σ exp(a): shift for range, same ratio
            shift = scores if mask is None else scores.masked_fill(~mask, float("-inf"))
            shift = shift.amax(dim=-1, keepdim=True).clamp_min(-1e30).detach()
            p = torch.exp(scores - shift)
        elif self.positive == "softplus":
            p = F.softplus(scores)
        elif self.positive == "relu":
            p = F.relu(scores)
        else:
            p = scores
        if mask is not None:
            p = p.masked_fill(~mask, 0.0)
        return p / (p.sum(dim=-1, keepdim=True) + self.eps)
