"""Small CNN image encoder: a grid of L region vectors a = {a_1 … a_L}, a_i ∈ R^D.

Source: Xu et al. 2015, "Show, Attend and Tell", §3.1.1: the annotation vectors are the
features of a lower convolutional layer (14×14×512 of VGG there), one per image region, so the
decoder can attend to parts of the image. Here the CNN is small and trained from scratch:
``len(channels)`` stages of

    conv k×k (stride 1, padding k//2: "same" size) → BatchNorm (``norm: batch``) → ReLU → pool p×p

(Ioffe & Szegedy 2015 for BatchNorm), then optional dropout and an optional 1×1 conv to
``out_dim``. The last feature map (B, D, h, w) is flattened **row-major**: region i is row
``i // w``, column ``i % w`` of the grid.

Geometry: every stage keeps the size and each pooling floors it by p, so h = ⌊…⌊H/p⌋…/p⌋ and the
grid's stride in input pixels is p^S (S pooling stages). Region (r, c) is the stride-aligned cell
rows [r·s, (r+1)·s), columns [c·s, (c+1)·s) — the pixels pooled into it; its receptive field is
centred on that cell and wider (``receptive_field``). Pixels at the bottom/right edge that the
flooring pools drop belong to no cell.
"""

from __future__ import annotations

from typing import List, Literal, Optional, Tuple

import torch
from torch import nn

from attnflow.config.registry import ENCODERS, ConfigError, PositiveInt, Probability

POOLS = {"max": nn.MaxPool2d, "avg": nn.AvgPool2d}


@ENCODERS.register("cnn")
class CNNImageEncoder(nn.Module):
    """Images → a row-major grid of region vectors (Xu et al. 2015, §3.1.1).

    Forward contract (differs from the text encoders' ``(x, lengths)``; marked by
    ``input_kind = "image"``): ``forward(images)`` with images (B, in_channels, H, W) returns
    ``(regions, grid)``: regions (B, L, output_dim) with L = h·w, and grid = (h, w), the last
    feature map's size (region i = row i // w, column i % w). No padding: every image of a batch
    has the same size, so there is no mask.

    Args:
        in_channels: image channels (context: 3 for RGB, 1 for grey; default 3).
        channels: output channels of each conv stage (default [32, 64, 128]).
        kernel: conv kernel size, odd so that 'same' padding keeps the grid aligned (default 3).
        norm: 'batch' (BatchNorm2d after each conv) or 'none' (default 'batch').
        pooling: 'max', 'avg' or 'none' after each stage (default 'max').
        pool_size: pooling window and stride p (default 2); the grid's stride is p^stages.
        out_dim: a final 1×1 conv to this size D; null keeps D = channels[-1] (default null).
        dropout: on the last feature map, before the projection (default 0.0).
    Shape:
        images (B, in_channels, H, W) -> regions (B, h·w, output_dim), grid (h, w).
    """

    input_kind = "image"

    def __init__(self, in_channels: PositiveInt = 3, *,
                 channels: List[int] = [32, 64, 128],  # noqa: B006
                 kernel: PositiveInt = 3, norm: Literal["batch", "none"] = "batch",
                 pooling: Literal["max", "avg", "none"] = "max", pool_size: PositiveInt = 2,
                 out_dim: Optional[PositiveInt] = None, dropout: Probability = 0.0):
        super().__init__()
        channels = list(channels)
        if not channels or any(int(c) < 1 for c in channels):
            raise ConfigError(f"encoder 'cnn': field 'channels' must be a non-empty list of "
                              f"positive ints (one per stage), got {channels!r}")
        if kernel < 1 or kernel % 2 == 0:
            raise ConfigError(f"encoder 'cnn': field 'kernel' must be a positive odd int "
                              f"(for 'same' padding), got {kernel!r}")
        if pool_size < 1:
            raise ConfigError(f"encoder 'cnn': field 'pool_size' must be >= 1, got {pool_size!r}")
        if out_dim is not None and out_dim < 1:
            raise ConfigError(f"encoder 'cnn': field 'out_dim' must be a positive int or null, "
                              f"got {out_dim!r}")
        if not 0.0 <= dropout < 1.0:
            raise ConfigError(f"encoder 'cnn': field 'dropout' must be in [0, 1), got {dropout!r}")
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
        if images.dim() != 4 or images.shape[1] != self.in_channels:
            raise ValueError(f"encoder 'cnn' expects images (B, {self.in_channels}, H, W), got "
                             f"shape {tuple(images.shape)}")
        h, w = self.grid(images.shape[2], images.shape[3])
        if h < 1 or w < 1:
            raise ValueError(f"encoder 'cnn': images of {images.shape[2]}×{images.shape[3]} pixels "
                             f"are too small for its {self.stride}-pixel grid cells; need at least "
                             f"{self.stride}×{self.stride}")
        fmap = self.project(self.dropout(self.features(images)))  # (B, D, h, w)
        return fmap.flatten(2).transpose(1, 2), (fmap.shape[2], fmap.shape[3])
