"""Learned positional embeddings: x_t + P[offset + t]; bounded by max_len."""

import pytest
import torch

from attnflow.config.registry import POSITIONALS, ConfigError


def test_adds_row_t_of_the_trained_matrix():
    pe = POSITIONALS.build({"name": "learned", "max_len": 12}, 4)
    x = torch.randn(3, 5, 4)
    out = pe(x, offset=2)
    for t in range(5):
        assert torch.allclose(out[:, t], x[:, t] + pe.weight[2 + t])
    out.sum().backward()
    assert pe.weight.grad[2:7].abs().sum() > 0 and pe.weight.grad[7:].abs().sum() == 0


def test_too_long_is_a_clear_error():
    """A ConfigError (attnflow-train prints it as one line) naming the position and the field."""
    pe = POSITIONALS.build({"name": "learned", "max_len": 4}, 2)
    with pytest.raises(ConfigError, match=r"position 4 is beyond max_len 4; raise positional.max_len"):
        pe(torch.zeros(1, 5, 2))
    with pytest.raises(ConfigError, match=r"position 5 is beyond max_len 4"):
        pe(torch.zeros(1, 3, 2), offset=3)
    assert pe(torch.zeros(1, 1, 2), offset=3).shape == (1, 1, 2)
