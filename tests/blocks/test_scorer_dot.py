"""Dot scorer: a(k, q) = kᵀq (Luong et al. 2015, eq. (8))."""

import pytest
import torch

from attnflow.blocks.scorers.dot import DotScorer


def dot_by_hand(q, k):
    return sum(float(q[d]) * float(k[d]) for d in range(q.shape[0]))


def test_two_by_two_literal():
    scorer = DotScorer(2, 2)
    query = torch.tensor([[[1.0, 2.0], [0.0, 1.0]]])
    keys = torch.tensor([[[3.0, 4.0], [5.0, 6.0]]])
    # [1,2]·[3,4] = 11, [1,2]·[5,6] = 17, [0,1]·[3,4] = 4, [0,1]·[5,6] = 6
    expected = torch.tensor([[[11.0, 17.0], [4.0, 6.0]]])
    torch.testing.assert_close(scorer.score(query, keys), expected)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 1, 1, 1), (3, 5, 2, 7)])
def test_matches_loop(by_hand, shape):
    B, Tq, Tk, D = shape
    scorer = DotScorer(D, D).double()
    q = torch.randn(B, Tq, D, dtype=torch.float64)
    k = torch.randn(B, Tk, D, dtype=torch.float64)
    out = scorer.score(q, k)
    assert out.shape == (B, Tq, Tk)
    torch.testing.assert_close(out, by_hand(dot_by_hand, q, k), rtol=1e-12, atol=1e-12)


def test_sdpa_scale_is_one():
    assert DotScorer(4, 4).sdpa_scale == 1.0
