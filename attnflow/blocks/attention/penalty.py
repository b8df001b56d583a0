"""Penalties on attention weights that tasks add to their loss.

Diversity, P = ‖AAᵀ − I‖²_F. Source: Lin et al. 2017, "A structured self-attentive sentence
embedding" (its "penalization term"): rows of the J × n matrix A, α_ji = SoftMax_i a(W_kʲ h_i,
W_qʲ q), are decorrelated, α_sᵀα_j → 0, and made sparse, α_jᵀα_j → 1. The task adds
weight · mean(P) to its loss.

Doubly stochastic attention, R = Σ_i (1 − Σ_t α_ti)². Source: Xu et al. 2015, "Show, Attend and
Tell", §4.2.1, eq. (14): the weights of each decoder step already sum to 1 over the L regions
(Σ_i α_ti = 1); the regulariser pushes the weights each region receives over the caption's steps
towards 1 as well, so the decoder attends to every part of the image over the course of the
caption rather than to a few regions at every step. The task adds λ · mean(R) to its loss.
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


def doubly_stochastic_penalty(attention: torch.Tensor, valid: Optional[torch.Tensor] = None
                              ) -> torch.Tensor:
    """Mean over sequences of Σ_i (1 − Σ_t α_ti)² (Xu et al. 2015, eq. (14)).

    Args:
        attention: (B, T, J, L) — per sequence, step t and head j, weights over L regions; heads
            are averaged first (their mean sums to 1 over the regions like each head).
        valid: optional bool (B, T) — the steps that count (real caption words and ⟨EOS⟩, not
            padding: a padded step would add attention the caption never spends).
    Returns: a scalar.
    """
    alpha = attention.mean(2)  # (B, T, L)
    if valid is not None:
        alpha = alpha * valid.unsqueeze(-1).to(alpha.dtype)
    return (1.0 - alpha.sum(1)).pow(2).sum(-1).mean()
