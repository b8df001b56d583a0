"""Learned absolute positional embeddings: p_t is row t of a trained matrix P (max_len × d).

Source: Gehring et al. 2017; Vaswani et al. 2017 §3.5
(found to give results close to the sinusoids); Devlin et al. 2019 (BERT). Unlike sinusoids, the
length is bounded by ``max_len``: longer inputs are an error (the models' config checks compare
``max_len`` with the longest input the data's config allows, before any work).
"""

from __future__ import annotations

import torch
from torch import nn

from attnflow.blocks.positional.base import Positional
from attnflow.registry import POSITIONALS, ConfigError, PositiveFloat, PositiveInt


@POSITIONALS.register("learned")
class LearnedPositional(Positional):
    """x_t + P[offset + t], P ∈ R^{max_len × d} trained with the model, initialised N(0, init_std²).

    Args:
        dim: d, the model size (context).
        max_len: the number of positions (default 512).
        init_std: standard deviation of the initial P (default 0.02).
    Shape: x (B, T, d) -> (B, T, d).
    """

    def __init__(self, dim: int, *, max_len: PositiveInt = 512, init_std: PositiveFloat = 0.02):
        super().__init__(dim)
        self.max_len = max_len
        self.weight = nn.Parameter(torch.randn(max_len, dim) * init_std)

    def encoding(self, length: int, offset: int = 0, device=None, dtype=None) -> torch.Tensor:
        if offset + length > self.max_len:  # a ConfigError: attnflow-train says it in one line
            raise ConfigError(
                f"positional 'learned': position {offset + length - 1} is beyond max_len "
                f"{self.max_len}; raise positional.max_len or use positional=sinusoidal")
        return self.weight[offset: offset + length]
