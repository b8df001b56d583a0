"""Learned absolute positional embeddings: p_t is row t of a trained matrix P (max_len × d).

Gehring et al. 2017; Vaswani et al. 2017, §3.5; Devlin et al. 2019 (BERT). The length is bounded
by ``max_len``.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import torch
from torch import nn

from attnflow.blocks.positional.base import Positional
from attnflow.config.registry import POSITIONALS, ConfigError, PositiveFloat, PositiveInt


def check_table_covers(positional: Optional[Dict[str, Any]], longest: Optional[Tuple[int, str]],
                       at: str, gives: str = "", sinusoidal: str = "positional=sinusoidal") -> None:
    """A bounded table (``positional.max_len``) covers the longest input the data gives
    (``longest``: (length, reason)); ``at``: where its fields are set."""
    table = (positional or {}).get("max_len")
    if table and longest and longest[0] > table:
        raise ConfigError(
            f"{at}.max_len={table} ({positional['name']} positions) is shorter than the {longest[0]} "
            f"positions the data gives{gives} ({longest[1].replace('{at}', 'data.')}), which the table "
            f"would refuse at the first such batch, mid-run; raise {at}.max_len to at least "
            f"{longest[0]}, or use {sinusoidal}")


@POSITIONALS.register("learned")
class LearnedPositional(Positional):
    """x_t + P[offset + t], P ∈ R^{max_len × d}, initialised N(0, init_std²)."""

    def __init__(self, dim: int, *, max_len: PositiveInt = 512, init_std: PositiveFloat = 0.02):
        super().__init__(dim)
        self.max_len = max_len
        self.weight = nn.Parameter(torch.randn(max_len, dim) * init_std)

    def encoding(self, length: int, offset: int = 0, device=None, dtype=None) -> torch.Tensor:
        if offset + length > self.max_len:
            raise ConfigError(
                f"positional 'learned': position {offset + length - 1} is beyond max_len "
                f"{self.max_len}; raise positional.max_len or use positional=sinusoidal")
        return self.weight[offset: offset + length]
