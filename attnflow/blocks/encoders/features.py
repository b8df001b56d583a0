"""Precomputed image features: region vectors extracted elsewhere (e.g. a VGG/ResNet conv layer).

Source: Xu et al. 2015, "Show, Attend and Tell", §3.1.1 (a = {a_1 … a_L}, a_i ∈ R^D, from a
pretrained CNN's 14×14×512 conv layer, so L = 196, D = 512). For users who run the CNN once,
offline, and store the (L, D) arrays (.npy/.npz, read by the data module). This block only
adapts them for the decoder:

    ã_i = LN(a_i) | a_i / ‖a_i‖₂ | a_i      (``norm``: layer (Ba et al. 2016), l2, none)
    a′_i = Dropout(ã_i) W + b               (``out_dim``: a linear projection D → out_dim)

The regions are taken to be a row-major grid (h, w): region i = row i // w, column i % w, with
(h, w) the ``grid`` field, or √L × √L when the field is null and L is a square.
"""

from __future__ import annotations

import math
from typing import List, Literal, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from attnflow.config.registry import ENCODERS, ConfigError, PositiveInt, Probability


@ENCODERS.register("features")
class FeatureEncoder(nn.Module):
    """Precomputed region features (B, L, D) → normalised/projected regions and their grid.

    Forward contract (differs from the text encoders' ``(x, lengths)``; marked by
    ``input_kind = "image_features"``): ``forward(features)`` with features (B, L, input_dim)
    returns ``(regions, grid)``: regions (B, L, output_dim) and grid = (h, w) with h·w = L, the
    row-major layout of the regions. Every item of a batch has the same L: no mask.

    Args:
        input_dim: D of the stored features (context: read from the arrays by the data module).
        out_dim: a linear projection D → out_dim; null keeps D (default null).
        norm: 'none', 'layer' (LayerNorm over D) or 'l2' (unit length) before the projection
            (default 'none').
        grid: [h, w] of the regions; null infers √L × √L and refuses a non-square L (default null).
        dropout: on the features, before the projection (default 0.0).
    Shape:
        features (B, L, input_dim) -> regions (B, L, output_dim), grid (h, w).
    """

    input_kind = "image_features"

    def __init__(self, input_dim: int, *, out_dim: Optional[PositiveInt] = None,
                 norm: Literal["none", "layer", "l2"] = "none", grid: Optional[List[int]] = None,
                 dropout: Probability = 0.0):
        super().__init__()
        if grid is not None:
            grid = list(grid)
            if len(grid) != 2 or any(int(g) < 1 for g in grid):
                raise ConfigError(f"encoder 'features': field 'grid' must be [h, w] with two "
                                  f"positive ints (or null to infer a square), got {grid!r}")
        if out_dim is not None and out_dim < 1:
            raise ConfigError(f"encoder 'features': field 'out_dim' must be a positive int or "
                              f"null, got {out_dim!r}")
        if not 0.0 <= dropout < 1.0:
            raise ConfigError(f"encoder 'features': field 'dropout' must be in [0, 1), got {dropout!r}")
        self.input_dim = input_dim
        self.grid_field = None if grid is None else (int(grid[0]), int(grid[1]))
        self.norm = norm
        self.layer_norm = nn.LayerNorm(input_dim) if norm == "layer" else None
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.project = nn.Linear(input_dim, out_dim) if out_dim is not None else nn.Identity()
        self.output_dim = out_dim if out_dim is not None else input_dim

    def grid(self, num_regions: int) -> Tuple[int, int]:
        """(h, w) for L regions: the ``grid`` field, checked against L, or √L × √L."""
        if self.grid_field is not None:
            h, w = self.grid_field
            if h * w != num_regions:
                raise ConfigError(f"encoder 'features': field 'grid' is [{h}, {w}] ({h * w} regions) "
                                  f"but the features have L = {num_regions} regions; set grid to "
                                  f"[h, w] with h·w = {num_regions}")
            return h, w
        side = math.isqrt(num_regions)
        if side * side != num_regions:
            raise ConfigError(f"encoder 'features': L = {num_regions} regions is not a square, so "
                              f"the grid cannot be inferred; set the field 'grid' to [h, w] with "
                              f"h·w = {num_regions}")
        return side, side

    def region_boxes(self, num_regions: int, height: int, width: int) -> torch.Tensor:
        """(L, 4) float tensor of [top, left, bottom, right) pixel boxes, row-major: the H×W
        image split evenly into the h×w grid (where a conv layer's regions sit)."""
        h, w = self.grid(num_regions)
        idx = torch.arange(h * w)
        r, c = (idx // w).double(), (idx % w).double()
        ch, cw = height / h, width / w
        return torch.stack([r * ch, c * cw, (r + 1) * ch, (c + 1) * cw], dim=1)

    def forward(self, features: torch.Tensor) -> Tuple[torch.Tensor, Tuple[int, int]]:
        if features.dim() != 3 or features.shape[2] != self.input_dim:
            raise ValueError(f"encoder 'features' expects features (B, L, {self.input_dim}), got "
                             f"shape {tuple(features.shape)}")
        grid = self.grid(features.shape[1])
        if self.layer_norm is not None:
            features = self.layer_norm(features)
        elif self.norm == "l2":
            features = F.normalize(features, dim=-1)
        return self.project(self.dropout(features)), grid
