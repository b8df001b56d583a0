"""Cosine (content-based) scorer: a(k, q) = β kᵀq / (‖k‖‖q‖) (Graves, Wayne & Danihelka 2014, §3.3.1)."""

import math

import pytest
import torch

from attnflow.blocks.scorers.cosine import CosineScorer


def cosine_by_hand(q, k):
    dot = sum(float(q[i]) * float(k[i]) for i in range(q.shape[0]))
    nq = math.sqrt(sum(float(x) ** 2 for x in q))
    nk = math.sqrt(sum(float(x) ** 2 for x in k))
    return dot / (nq * nk)


def test_two_by_two_literal():
    scorer = CosineScorer(2, 2)
    query = torch.tensor([[[1.0, 0.0], [3.0, 4.0]]])
    keys = torch.tensor([[[1.0, 1.0], [-2.0, 0.0]]])
    # [1,0]·[1,1]/(1·√2) = 1/√2; [1,0]·[-2,0]/(1·2) = -1
    # [3,4]·[1,1]/(5·√2) = 7/(5√2); [3,4]·[-2,0]/(5·2) = -6/10
    r2 = math.sqrt(2.0)
    expected = torch.tensor([[[1 / r2, -1.0], [7 / (5 * r2), -0.6]]])
    torch.testing.assert_close(scorer.score(query, keys), expected)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 1, 3, 2), (3, 4, 1, 7)])
def test_matches_loop(by_hand, shape):
    B, Tq, Tk, D = shape
    scorer = CosineScorer(D, D).double()
    q = torch.randn(B, Tq, D, dtype=torch.float64)
    k = torch.randn(B, Tk, D, dtype=torch.float64)
    out = scorer.score(q, k)
    assert out.shape == (B, Tq, Tk)
    torch.testing.assert_close(out, by_hand(cosine_by_hand, q, k), rtol=1e-12, atol=1e-12)
    assert out.abs().max() <= 1.0 + 1e-12


def test_scale_multiplies_cosine(by_hand):
    scorer = CosineScorer(3, 3, scale=2.5).double()
    q = torch.randn(2, 3, 3, dtype=torch.float64)
    k = torch.randn(2, 4, 3, dtype=torch.float64)
    torch.testing.assert_close(scorer.score(q, k), 2.5 * by_hand(cosine_by_hand, q, k))
    assert not scorer.scale.requires_grad
    assert CosineScorer(3, 3, learn_scale=True).scale.requires_grad


def test_invariant_to_vector_lengths():
    scorer = CosineScorer(4, 4).double()
    q = torch.randn(2, 3, 4, dtype=torch.float64)
    k = torch.randn(2, 5, 4, dtype=torch.float64)
    torch.testing.assert_close(scorer.score(7.0 * q, 0.1 * k), scorer.score(q, k))


def test_zero_vector_gives_zero_not_nan():
    scorer = CosineScorer(2, 2)
    out = scorer.score(torch.zeros(1, 1, 2), torch.tensor([[[1.0, 2.0]]]))
    assert torch.isfinite(out).all()
    assert out.item() == 0.0
