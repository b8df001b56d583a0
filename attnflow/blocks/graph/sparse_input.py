"""Dropout on mostly-zero node features, drawing only for the nonzero entries.

Planetoid inputs are bags of words: Cora's 2708 × 1433 features are 1.3 % nonzero. Dropout
(Srivastava et al. 2014) draws a Bernoulli variable for every entry, but a dropped zero stays zero,
so drawing for the nonzeros only gives the same distribution of outputs (each kept entry scaled by
1/(1−p)) with nnz draws instead of N·F. On Cora the dense draw was about half of a full-batch
epoch's time (docs/benchmarks.md, "GAT on Planetoid"); finding the nonzeros costs a tenth of it.
(Summing x Wᵀ over the nonzeros instead of the dense product was measured too and gained nothing
once the scan for them is paid, so the layers keep the dense product.)

A dense input (more than ``DENSE_ABOVE`` of the entries nonzero, or one that requires gradients:
an activation, not data) takes ``F.dropout``. The random stream differs from the dense dropout's
(fewer draws), so a seed gives other masks than ``F.dropout`` would: the same distribution, not
the same numbers.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F

DENSE_ABOVE = 0.1  # fraction of nonzero entries above which the dense operations are used


def _nonzeros(x: torch.Tensor) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
    """(rows, cols) of x's nonzero entries when x is 2-D and sparse enough, else None."""
    if x.dim() != 2 or x.numel() == 0:
        return None
    rows, cols = x.nonzero(as_tuple=True)
    if rows.numel() > DENSE_ABOVE * x.numel():
        return None
    return rows, cols


def dropout_nonzero(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """``F.dropout(x, p, training)`` with Bernoulli draws for the nonzero entries only (a dense
    x: ``F.dropout`` itself)."""
    if not training or p == 0.0:
        return x
    if p >= 1.0:
        return torch.zeros_like(x)
    nz = _nonzeros(x) if not x.requires_grad else None  # inputs: features, not activations
    if nz is None:
        return F.dropout(x, p=p, training=True)
    rows, cols = nz
    keep = torch.empty(rows.numel(), dtype=x.dtype, device=x.device).bernoulli_(1.0 - p)
    out = torch.zeros_like(x)
    out[rows, cols] = x[rows, cols] * keep.div_(1.0 - p)
    return out
