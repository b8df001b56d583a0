"""Precomputed image features: region vectors extracted offline (e.g. a VGG conv layer).

Xu et al. 2015, §3.1.1 (a = {a_1 … a_L}, a_i ∈ R^D; L = 196, D = 512 there). The block adapts them:

    ã_i = LN(a_i) | a_i / ‖a_i‖₂ | a_i      (``norm``: layer (Ba et al. 2016), l2, none)
    a′_i = Dropout(ã_i) W + b               (``out_dim``: a projection D → out_dim)

Regions form a row-major grid (h, w): the ``grid`` field, or √L × √L when it is null.
"""

from __future__ import annotations

import math
from typing import List, Literal, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from attnflow.blocks.encoders.base import Encoder
from attnflow.config.registry import ENCODERS, ConfigError, PositiveInt, Probability


@ENCODERS.register("features")
class FeatureEncoder(Encoder):
    """Region features (B, L, input_dim) → regions (B, L, output_dim) and the grid (h, w)."""

    input_kind = "image_features"

    def __init__(self, input_dim: int, *, out_dim: Optional[PositiveInt] = None,
                 norm: Literal["none", "layer", "l2"] = "none", grid: Optional[List[int]] = None,
                 dropout: Probability = 0.0):
        super().__init__()
        if grid is not None and (len(grid) != 2 or min(grid) < 1):
            raise ConfigError(f"encoder 'features': field 'grid' must be [h, w] with two positive "
                              f"ints (or null to infer a square), got {list(grid)!r}")
        self.input_dim = input_dim
        self.grid_field = None if grid is None else (int(grid[0]), int(grid[1]))
        self.norm = norm
        self.layer_norm = nn.LayerNorm(input_dim) if norm == "layer" else None
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.project = nn.Linear(input_dim, out_dim) if out_dim is not None else nn.Identity()
        self.output_dim = out_dim if out_dim is not None else input_dim

    def grid(self, num_regions: int) -> Tuple[int, int]:
        """(h, w) for L regions: the ``grid`` field or √L × √L."""
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
