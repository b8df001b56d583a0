"""Relative positions: no absolute vector; the flag and δ that switch attention to relative."""

import pytest
import torch

from attnflow.config.registry import DECODERS, POSITIONALS, ConfigError


def test_adds_nothing_and_carries_delta():
    pe = POSITIONALS.build({"name": "relative", "max_distance": 5}, 4)
    x = torch.randn(2, 3, 4)
    assert torch.equal(pe(x), x)
    assert pe.relative and pe.max_distance == 5


def test_relative_attention_in_a_decoder_without_self_attention_is_refused_saying_why():
    for name in ("rnn_attention", "luong"):
        with pytest.raises(ConfigError, match="i − j"):
            DECODERS.build({"name": name, "attention": {"name": "relative_multihead", "heads": 2}}, 10, 8, 8)
    DECODERS.build({"name": "rnn_attention", "attention": {"name": "multihead", "heads": 2}}, 10, 8, 8)
