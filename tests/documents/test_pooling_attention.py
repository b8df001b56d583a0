"""Attention pooling: weights by hand, padding gets zero weight, empty rows pool to zero."""

import torch

from attnflow.blocks.scorers.scaled_dot import ScaledDotScorer
from attnflow.config.registry import POOLINGS


def test_weighted_sum_matches_hand_computation():
    torch.manual_seed(0)
    pool = POOLINGS.build({"name": "attention", "dim": 3}, 2)
    with torch.no_grad():
        pool.proj.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
        pool.proj.bias.copy_(torch.tensor([0.0, 0.5, -0.5]))
        pool.query.copy_(torch.tensor([1.0, -1.0, 2.0]))
    h = torch.tensor([[[1.0, 2.0], [0.5, -1.0], [3.0, 0.0]]])
    pooled, w = pool(h, torch.tensor([[True, True, False]]))
    # by hand: u_t = tanh(W h_t + b), score_t = u_t · q, softmax over the two valid words
    import math
    def score(x1, x2):
        u = [math.tanh(x1), math.tanh(x2 + 0.5), math.tanh(x1 + x2 - 0.5)]
        return u[0] * 1.0 - u[1] * 1.0 + 2.0 * u[2]
    s0, s1 = score(1.0, 2.0), score(0.5, -1.0)
    a0 = math.exp(s0) / (math.exp(s0) + math.exp(s1))
    a1 = 1 - a0
    assert torch.allclose(w, torch.tensor([[a0, a1, 0.0]]), atol=1e-6)
    expected = torch.tensor([[a0 * 1.0 + a1 * 0.5, a0 * 2.0 + a1 * -1.0]])
    assert torch.allclose(pooled, expected, atol=1e-6)


def test_padding_zero_weight_and_empty_rows():
    pool = POOLINGS.build({"name": "attention", "dim": 4}, 5)
    h = torch.randn(3, 6, 5)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1] * 6, [0] * 6], dtype=torch.bool)
    pooled, w = pool(h, mask)
    assert torch.all(w[~mask] == 0)
    assert torch.allclose(w.sum(-1), torch.tensor([1.0, 1.0, 0.0]))
    assert torch.all(pooled[2] == 0) and torch.isfinite(pooled).all()
    # changing padded vectors changes nothing
    h2 = h.clone()
    h2[0, 3:] = 100.0
    assert torch.allclose(pool(h2, mask)[0][0], pooled[0], atol=1e-6)
    pooled.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in pool.parameters())


def test_scorer_is_swappable():
    pool = POOLINGS.build({"name": "attention", "dim": 4, "scorer": {"name": "scaled_dot"}}, 5)
    assert isinstance(pool.scorer, ScaledDotScorer)
