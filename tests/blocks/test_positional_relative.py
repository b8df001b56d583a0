"""Relative positions: no absolute vector; the flag and δ that switch attention to relative."""

import pytest
import torch

from attnflow.blocks.positional import require_absolute
from attnflow.registry import POSITIONALS, ConfigError


def test_adds_nothing_and_carries_delta():
    pe = POSITIONALS.build({"name": "relative", "max_distance": 5}, 4)
    x = torch.randn(2, 3, 4)
    assert torch.equal(pe(x), x)
    assert pe.relative and pe.max_distance == 5


def test_a_block_without_self_attention_refuses_it_saying_why():
    pe = POSITIONALS.build({"name": "relative"}, 4)
    with pytest.raises(ConfigError, match="i − j"):
        require_absolute(pe, "an RNN encoder")
    require_absolute(POSITIONALS.build({"name": "sinusoidal"}, 4), "an RNN encoder")
