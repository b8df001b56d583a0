"""Mean and max pooling equal torch.mean / torch.max over the valid positions."""

import torch

from attnflow.config.registry import POOLINGS


def _data():
    torch.manual_seed(1)
    h = torch.randn(3, 5, 4)
    lengths = [5, 2, 0]
    mask = torch.arange(5) < torch.tensor(lengths).unsqueeze(-1)
    return h, mask, lengths


def test_mean_over_valid_positions():
    h, mask, lengths = _data()
    pooled, w = POOLINGS.build("mean", 4)(h, mask)
    for b, n in enumerate(lengths):
        expected = torch.mean(h[b, :n], 0) if n else torch.zeros(4)
        assert torch.allclose(pooled[b], expected, atol=1e-6)
    assert torch.allclose(w[1], torch.tensor([0.5, 0.5, 0, 0, 0]))


def test_max_over_valid_positions():
    h, mask, lengths = _data()
    h[1, 2:] = 50.0  # padding must never win
    pooled, w = POOLINGS.build("max", 4)(h, mask)
    assert w is None
    for b, n in enumerate(lengths):
        expected = torch.max(h[b, :n], 0).values if n else torch.zeros(4)
        assert torch.allclose(pooled[b], expected)
