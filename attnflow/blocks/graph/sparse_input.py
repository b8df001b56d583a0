"""Dropout on mostly-zero node features, drawing only for the nonzero entries.

Dropout (Srivastava et al. 2014) leaves a dropped zero zero, so drawing for the nonzeros only
(Cora: 1.3 %) gives the same distribution with nnz draws instead of N·F (about half of a Cora
epoch's time). A dense input (over ``DENSE_ABOVE`` nonzero, or one requiring gradients) takes
``F.dropout``. The random stream differs from ``F.dropout``'s.
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
