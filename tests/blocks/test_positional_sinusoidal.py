"""Sinusoidal positional encoding against the formula PE(pos, 2i) = sin(pos/10000^{2i/d}), cos for 2i+1."""

import math

import torch

from attnflow.config.registry import POSITIONALS


def test_table_matches_formula_by_hand():
    d = 6
    pe = POSITIONALS.build({"name": "sinusoidal"}, d)
    x = torch.zeros(1, 5, d)
    out = pe(x)[0]
    for pos in range(5):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert math.isclose(out[pos, 2 * i].item(), math.sin(angle), abs_tol=1e-6)
            assert math.isclose(out[pos, 2 * i + 1].item(), math.cos(angle), abs_tol=1e-6)


def test_adds_to_input_and_offset_continues_positions():
    pe = POSITIONALS.build({"name": "sinusoidal"}, 8)
    x = torch.randn(2, 10, 8)
    full = pe(x)
    assert torch.allclose(full - x, (full - x)[0:1].expand(2, -1, -1), atol=1e-6)  # same p for every row
    tail = pe(x[:, 7:], offset=7)  # a decoder at step 7 sees p_7
    assert torch.allclose(tail, full[:, 7:], atol=1e-6)


def test_grows_beyond_cached_length_and_has_no_parameters():
    pe = POSITIONALS.build({"name": "sinusoidal"}, 4)
    out = pe(torch.zeros(1, 2000, 4))[0]
    angle = 1999 / 10000 ** (2 / 4)
    assert math.isclose(out[1999, 2].item(), math.sin(angle), abs_tol=1e-4)
    assert not list(pe.parameters())
    assert "table" not in pe.state_dict()


def test_scale_field():
    pe = POSITIONALS.build({"name": "sinusoidal", "scale": 0.5}, 4)
    assert math.isclose(pe(torch.zeros(1, 2, 4))[0, 1, 1].item(), 0.5 * math.cos(1.0), abs_tol=1e-6)
