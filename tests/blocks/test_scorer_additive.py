"""Additive (Bahdanau) scorer: a(k, q) = wᵀ tanh(Uk + Vq) (Bahdanau et al. 2015, Appendix A.1.2)."""

import math

import pytest
import torch

from attnflow.blocks.scorers.additive import AdditiveScorer
from attnflow.config.registry import SCORERS


def additive_by_hand(scorer):
    U = scorer.U.weight.detach()  # (H, key_dim)
    bU = None if scorer.U.bias is None else scorer.U.bias.detach()
    V = scorer.V.weight.detach()  # (H, query_dim)
    w = scorer.w.weight.detach()[0]  # (H,)

    def fn(q, k):
        total = 0.0
        for h in range(U.shape[0]):
            uk = sum(float(U[h, c]) * float(k[c]) for c in range(U.shape[1]))
            if bU is not None:
                uk += float(bU[h])
            vq = sum(float(V[h, c]) * float(q[c]) for c in range(V.shape[1]))
            total += float(w[h]) * math.tanh(uk + vq)
        return total

    return fn


def test_two_by_two_literal():
    scorer = AdditiveScorer(2, 2, hidden_dim=2, bias=False)
    with torch.no_grad():
        scorer.U.weight.copy_(torch.eye(2))
        scorer.V.weight.copy_(torch.eye(2))
        scorer.w.weight.copy_(torch.tensor([[1.0, -1.0]]))
    query = torch.tensor([[[0.5, 0.0]]])
    keys = torch.tensor([[[0.0, 0.0], [0.5, 1.0]]])
    # Uk + Vq = [0.5, 0] -> tanh(0.5) - tanh(0); [1.0, 1.0] -> tanh(1) - tanh(1) = 0
    expected = torch.tensor([[[math.tanh(0.5), 0.0]]])
    torch.testing.assert_close(scorer.score(query, keys), expected)


def test_registry_build_uses_fields():
    scorer = SCORERS.build({"name": "additive", "hidden_dim": 8}, 5, 6)
    assert isinstance(scorer, AdditiveScorer)
    assert tuple(scorer.U.weight.shape) == (8, 6)
    assert tuple(scorer.V.weight.shape) == (8, 5)
    assert tuple(scorer.w.weight.shape) == (1, 8)
    assert scorer.U.bias is not None and scorer.V.bias is None and scorer.w.bias is None


@pytest.mark.parametrize("qd,kd,hidden", [(5, 6, 8), (3, 3, 4), (4, 2, 1)])
@pytest.mark.parametrize("bias", [True, False])
def test_matches_loop(by_hand, qd, kd, hidden, bias):
    scorer = AdditiveScorer(qd, kd, hidden_dim=hidden, bias=bias).double()
    q = torch.randn(2, 3, qd, dtype=torch.float64)
    k = torch.randn(2, 4, kd, dtype=torch.float64)
    out = scorer.score(q, k)
    assert out.shape == (2, 3, 4)
    torch.testing.assert_close(out, by_hand(additive_by_hand(scorer), q, k), rtol=1e-12, atol=1e-12)


def test_bounded_by_l1_norm_of_w():
    scorer = AdditiveScorer(3, 3, hidden_dim=6).double()
    out = scorer.score(100 * torch.randn(2, 4, 3, dtype=torch.float64),
                       100 * torch.randn(2, 5, 3, dtype=torch.float64))
    assert out.abs().max() <= scorer.w.weight.abs().sum() + 1e-12
