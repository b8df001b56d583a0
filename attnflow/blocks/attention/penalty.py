"""Diversity penalty on multi-head attention: P = ‖AAᵀ − I‖²_F.

Source: Lin et al. 2017, "A structured self-attentive sentence embedding" (its "penalization
term"): rows of the J × n matrix A, α_ji = SoftMax_i a(W_kʲ h_i, W_qʲ q), are decorrelated,
α_sᵀα_j → 0, and made sparse, α_jᵀα_j → 1. The task adds weight · mean(P) to its loss.
"""

from typing import Optional

import torch


def diversity_penalty(attention: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Mean over matrices of ‖AAᵀ − I‖²_F.

    Args:
        attention: (..., J, n) — one J × n matrix A per leading index.
        valid: optional bool (...) — which matrices count (e.g. not padded decoder steps).
    Returns: a scalar.
    """
    J = attention.shape[-2]
    gram = attention @ attention.transpose(-1, -2)
    eye = torch.eye(J, dtype=attention.dtype, device=attention.device)
    per_matrix = (gram - eye).pow(2).sum(dim=(-1, -2))
    if valid is None:
        return per_matrix.mean()
    valid = valid.to(per_matrix.dtype)
    return (per_matrix * valid).sum() / valid.sum().clamp_min(1.0)
