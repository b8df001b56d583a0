"""Where a captioning model looks: attention mass on the region a word names (grounding).

Xu et al. 2015 (§5.4) judge by eye that attention follows the named object; where its pixels are
known (``shapes``) it is measured. For a word t naming an object with pixel mask M_t, R_t the
regions whose box holds a pixel of M_t:

    mass_t  = Σ_{i ∈ R_t} α_ti        (attention the decoder spends on the object while writing t)
    share_t = |R_t| / L               (what uniform attention, α_ti = 1/L, would spend there)
    grounding = Σ_t mass_t / Σ_t share_t   over every object-naming word of the corpus

Uniform attention scores 1; looking at the named object scores up to L / |R_t|.
"""

from __future__ import annotations

from typing import Tuple

import torch


def box_masks(boxes: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """(L, H, W) bool: pixel (y, x) lies in region i's box [top, left, bottom, right)."""
    boxes = boxes.to(torch.float64)
    ys = torch.arange(height, dtype=torch.float64).view(1, height, 1) + 0.5  # pixel centres
    xs = torch.arange(width, dtype=torch.float64).view(1, 1, width) + 0.5
    top, left, bottom, right = (boxes[:, k].view(-1, 1, 1) for k in range(4))
    return (ys >= top) & (ys < bottom) & (xs >= left) & (xs < right)


def named_cells(regions: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """(B, T, L) bool: region i's box holds a pixel of the object word t names. ``regions``
    (B, T, H, W) bool masks (all False for words that name nothing)."""
    H, W = regions.shape[-2:]
    cells = box_masks(boxes, H, W).to(regions.device).flatten(1).float()  # (L, H·W)
    return (regions.flatten(2).float() @ cells.T) > 0


def grounding_sums(alpha: torch.Tensor, cells: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor,
                                                                      torch.Tensor]:
    """(Σ mass_t, Σ share_t, number of object-naming words) over a batch. ``alpha`` (B, T, L)
    attention per word (heads averaged), ``cells`` (B, T, L) from :func:`named_cells`."""
    cells = cells.to(alpha.dtype)
    named = cells.sum(-1) > 0
    mass = (alpha * cells).sum(-1)[named].sum()
    share = (cells.sum(-1) / cells.shape[-1])[named].sum()
    return mass, share, named.sum()
