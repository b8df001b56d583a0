"""General (bilinear, Luong) scorer: a(k, q) = kᵀWq (Luong et al. 2015, eq. (8))."""

import pytest
import torch

from attnflow.blocks.scorers.general import GeneralScorer


def general_by_hand(scorer):
    W = scorer.W.weight.detach()  # (key_dim, query_dim)
    b = None if scorer.W.bias is None else scorer.W.bias.detach()

    def fn(q, k):
        total = 0.0
        for r in range(W.shape[0]):
            wq = sum(float(W[r, c]) * float(q[c]) for c in range(W.shape[1]))
            if b is not None:
                wq += float(b[r])
            total += float(k[r]) * wq
        return total

    return fn


def test_two_by_two_literal():
    scorer = GeneralScorer(2, 2)
    with torch.no_grad():
        scorer.W.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 2.0]]))
    query = torch.tensor([[[1.0, 1.0], [2.0, 0.0]]])
    keys = torch.tensor([[[3.0, 4.0], [1.0, -1.0]]])
    # Wq = [1, 2] and [2, 0]; k·Wq: [3,4]·[1,2] = 11, [1,-1]·[1,2] = -1, [3,4]·[2,0] = 6, [1,-1]·[2,0] = 2
    expected = torch.tensor([[[11.0, -1.0], [6.0, 2.0]]])
    torch.testing.assert_close(scorer.score(query, keys), expected)


def test_identity_W_is_dot():
    scorer = GeneralScorer(3, 3).double()
    with torch.no_grad():
        scorer.W.weight.copy_(torch.eye(3))
    q = torch.randn(2, 4, 3, dtype=torch.float64)
    k = torch.randn(2, 5, 3, dtype=torch.float64)
    torch.testing.assert_close(scorer.score(q, k), torch.einsum("btd,bid->bti", q, k))


@pytest.mark.parametrize("qd,kd", [(4, 4), (5, 3), (2, 6)])
@pytest.mark.parametrize("bias", [False, True])
def test_matches_loop(by_hand, qd, kd, bias):
    scorer = GeneralScorer(qd, kd, bias=bias).double()
    assert tuple(scorer.W.weight.shape) == (kd, qd)
    assert (scorer.W.bias is not None) == bias
    q = torch.randn(2, 3, qd, dtype=torch.float64)
    k = torch.randn(2, 4, kd, dtype=torch.float64)
    out = scorer.score(q, k)
    assert out.shape == (2, 3, 4)
    torch.testing.assert_close(out, by_hand(general_by_hand(scorer), q, k), rtol=1e-12, atol=1e-12)


def test_no_sdpa_scale():
    assert GeneralScorer(4, 4).sdpa_scale is None
