"""Penalties on attention weights that tasks add to their loss.

Diversity (Lin et al. 2017, the "penalization term"): P = ‖AAᵀ − I‖²_F for the J × n matrix A of
hop weights, decorrelating the hops and making each sparse.
Doubly stochastic attention (Xu et al. 2015, §4.2.1, eq. (14)): R = Σ_i (1 − Σ_t α_ti)², so that
over the caption every region receives about as much attention as each step gives out.
"""

from typing import Optional

import torch


def diversity_penalty(attention: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Mean of ‖AAᵀ − I‖²_F over the (..., J, n) matrices, those ``valid`` (...) only."""
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
    """Mean over sequences of Σ_i (1 − Σ_t α_ti)² for weights (B, T, J, L), heads averaged;
    ``valid`` (B, T): the real steps."""
    alpha = attention.mean(2)  # (B, T, L)
    if valid is not None:
        alpha = alpha * valid.unsqueeze(-1).to(alpha.dtype)
    return (1.0 - alpha.sum(1)).pow(2).sum(-1).mean()
