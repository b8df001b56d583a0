"""Small CNN image encoder: a row-major grid of L region vectors a = {a_1 … a_L}, a_i ∈ R^D.

Xu et al. 2015, "Show, Attend and Tell", §3.1.1 (annotation vectors from a convolutional layer,
one per region). ``len(channels)`` stages of conv k×k ("same") → BatchNorm (Ioffe & Szegedy
2015) → ReLU → pool p×p, then dropout and an optional 1×1 conv to ``out_dim``. Region i is row
i // w, column i % w; the grid's stride is p^stages pixels, region (r, c) the cell of pixels
pooled into it.
"""

from __future__ import annotations

from typing import List, Literal, Optional, Tuple

import torch
from torch import nn

from attnflow.blocks.encoders.base import Encoder
from attnflow.config.registry import ENCODERS, ConfigError, PositiveInt, Probability
from attnflow.io.console import warn_unread

POOLS = {"max": nn.MaxPool2d, "avg": nn.AvgPool2d}


@ENCODERS.register("cnn")
class CNNImageEncoder(Encoder):
    """Images (B, in_channels, H, W) → regions (B, h·w, output_dim) and the grid (h, w)."""

    input_kind = "image"

    def __init__(self, in_channels: PositiveInt = 3, *,
                 channels: List[int] = [32, 64, 128],  # noqa: B006
                 kernel: PositiveInt = 3, norm: Literal["batch", "none"] = "batch",
                 pooling: Literal["max", "avg", "none"] = "max", pool_size: PositiveInt = 2,
                 out_dim: Optional[PositiveInt] = None, dropout: Probability = 0.0):
        super().__init__()
        channels = list(channels)
        if not channels or min(channels) < 1:
            raise ConfigError(f"encoder 'cnn': field 'channels' must list positive ints (one per "
                              f"stage), got {channels!r}")
        if kernel % 2 == 0:
            raise ConfigError(f"encoder 'cnn': field 'kernel' must be odd ('same' padding), "
                              f"got {kernel}")
        if pooling == "none" and pool_size != 2:
            warn_unread(f"encoder 'cnn': pool_size={pool_size}", "pooling=none")
        if pool_size == 1 and pooling != "max":
            warn_unread(f"encoder 'cnn': pooling={pooling}", "pool_size=1 pools nothing")
        self.in_channels = in_channels
        pooled = pooling != "none" and pool_size > 1
        layers: List[nn.Module] = []
        prev = in_channels
        for c in channels:
            layers.append(nn.Conv2d(prev, c, kernel, padding=kernel // 2, bias=norm == "none"))
            if norm == "batch":
                layers.append(nn.BatchNorm2d(c))
            layers.append(nn.ReLU(inplace=True))
            if pooled:
                layers.append(POOLS[pooling](pool_size, stride=pool_size))
            prev = c
        self.features = nn.Sequential(*layers)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.project = nn.Conv2d(prev, out_dim, 1) if out_dim is not None else nn.Identity()
        self.output_dim = out_dim if out_dim is not None else prev
        self.stride = pool_size ** len(channels) if pooled else 1
        p = pool_size if pooled else 1
        # receptive field: each conv adds (k-1)·jump, each pool (p-1)·jump; jump *= p per pool
        self.receptive_field = sum(((kernel - 1) + (p - 1)) * p ** s for s in range(len(channels)))
        self.receptive_field += 1

    def grid(self, height: int, width: int) -> Tuple[int, int]:
        """(h, w) of the region grid for an H×W input, without running the network."""
        return height // self.stride, width // self.stride

    def region_boxes(self, height: int, width: int) -> torch.Tensor:
        """(L, 4) long tensor of [top, left, bottom, right) pixel boxes, row-major: region i's
        stride-aligned cell in an H×W input (for drawing attention back onto the image)."""
        h, w = self.grid(height, width)
        idx = torch.arange(h * w)
        top, left = (idx // w) * self.stride, (idx % w) * self.stride
        return torch.stack([top, left, top + self.stride, left + self.stride], dim=1)

    def region_centres(self, height: int, width: int) -> torch.Tensor:
        """(L, 2) float tensor of (y, x) receptive-field centres in pixel coordinates (pixel
        centres at integers): the middle of each stride-aligned cell."""
        boxes = self.region_boxes(height, width).float()
        return torch.stack([(boxes[:, 0] + boxes[:, 2] - 1) / 2, (boxes[:, 1] + boxes[:, 3] - 1) / 2], 1)

    def forward(self, images: torch.Tensor) -> Tuple[torch.Tensor, Tuple[int, int]]:
        h, w = self.grid(images.shape[2], images.shape[3])
        if h < 1 or w < 1:
            raise ValueError(f"encoder 'cnn': images of {images.shape[2]}×{images.shape[3]} pixels "
                             f"are too small for its {self.stride}-pixel grid cells; need at least "
                             f"{self.stride}×{self.stride}")
        fmap = self.project(self.dropout(self.features(images)))  # (B, D, h, w)
        return fmap.flatten(2).transpose(1, 2), (fmap.shape[2], fmap.shape[3])
