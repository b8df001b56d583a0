"""Scaled dot-product scorer: a(k, q) = kᵀq / √d (Vaswani et al. 2017, eq. (1))."""

import math

import pytest
import torch

from attnflow.blocks.scorers.scaled_dot import ScaledDotScorer


def scaled_dot_by_hand(q, k):
    d = k.shape[0]
    return sum(float(q[i]) * float(k[i]) for i in range(d)) / math.sqrt(d)


def test_two_by_two_literal():
    scorer = ScaledDotScorer(2, 2)
    query = torch.tensor([[[1.0, 2.0], [0.0, 1.0]]])
    keys = torch.tensor([[[3.0, 4.0], [5.0, 6.0]]])
    r2 = math.sqrt(2.0)
    expected = torch.tensor([[[11.0 / r2, 17.0 / r2], [4.0 / r2, 6.0 / r2]]])
    torch.testing.assert_close(scorer.score(query, keys), expected)


def test_four_dim_literal():
    # d = 4, √d = 2: [1,1,1,1]·[1,2,3,4] / 2 = 5
    scorer = ScaledDotScorer(4, 4)
    out = scorer.score(torch.ones(1, 1, 4), torch.tensor([[[1.0, 2.0, 3.0, 4.0]]]))
    torch.testing.assert_close(out, torch.tensor([[[5.0]]]))


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 2, 1, 9), (3, 1, 6, 16)])
def test_matches_loop(by_hand, shape):
    B, Tq, Tk, D = shape
    scorer = ScaledDotScorer(D, D).double()
    q = torch.randn(B, Tq, D, dtype=torch.float64)
    k = torch.randn(B, Tk, D, dtype=torch.float64)
    out = scorer.score(q, k)
    assert out.shape == (B, Tq, Tk)
    torch.testing.assert_close(out, by_hand(scaled_dot_by_hand, q, k), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("d", [1, 4, 64])
def test_sdpa_scale(d):
    assert ScaledDotScorer(d, d).sdpa_scale == pytest.approx(1.0 / math.sqrt(d))
