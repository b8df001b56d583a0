"""GAT scorer: a(k, q) = LeakyReLU(uᵀWk + vᵀWq), slope 0.2 (Veličković et al. 2018, eq. (3))."""

import pytest
import torch

from attnflow.blocks.scorers.gat import GATScorer
from attnflow.config.registry import SCORERS, ConfigError


def leaky(x, slope):
    return x if x > 0 else slope * x


def gat_by_hand(scorer, slope=0.2):
    u = scorer.u.detach()
    v = scorer.v.detach()
    W = None if scorer.W is None else scorer.W.weight.detach()

    def project(x):
        if W is None:
            return [float(t) for t in x]
        return [sum(float(W[r, c]) * float(x[c]) for c in range(W.shape[1])) for r in range(W.shape[0])]

    def fn(q, k):
        pk, pq = project(k), project(q)
        s = sum(float(u[i]) * pk[i] for i in range(len(pk))) + sum(float(v[i]) * pq[i] for i in range(len(pq)))
        return leaky(s, slope)

    return fn


def test_two_by_two_literal():
    scorer = GATScorer(2, 2)
    with torch.no_grad():
        scorer.u.copy_(torch.tensor([1.0, 0.0]))
        scorer.v.copy_(torch.tensor([0.0, 1.0]))
    query = torch.tensor([[[2.0, -4.0], [0.0, 1.0]]])
    keys = torch.tensor([[[-3.0, 5.0], [3.0, 0.0]]])
    # u·k = -3, 3; v·q = -4, 1
    # (q0,k0) -7 -> -1.4; (q0,k1) -1 -> -0.2; (q1,k0) -2 -> -0.4; (q1,k1) 4 -> 4
    expected = torch.tensor([[[-1.4, -0.2], [-0.4, 4.0]]])
    torch.testing.assert_close(scorer.score(query, keys), expected)


@pytest.mark.parametrize("qd,kd", [(4, 4), (5, 6), (3, 2)])
def test_matches_loop(by_hand, qd, kd):
    scorer = GATScorer(qd, kd).double()
    assert scorer.negative_slope == 0.2
    assert scorer.u.shape == (kd,) and scorer.v.shape == (qd,)
    q = torch.randn(2, 3, qd, dtype=torch.float64)
    k = torch.randn(2, 4, kd, dtype=torch.float64)
    out = scorer.score(q, k)
    assert out.shape == (2, 3, 4)
    torch.testing.assert_close(out, by_hand(gat_by_hand(scorer), q, k), rtol=1e-12, atol=1e-12)
    assert (out < 0).any() and (out > 0).any()  # both branches of the LeakyReLU were exercised


def test_with_shared_projection(by_hand):
    scorer = GATScorer(4, 4, hidden_dim=3).double()
    assert tuple(scorer.W.weight.shape) == (3, 4)
    assert scorer.u.shape == (3,) and scorer.v.shape == (3,)
    q = torch.randn(2, 3, 4, dtype=torch.float64)
    k = torch.randn(2, 5, 4, dtype=torch.float64)
    torch.testing.assert_close(scorer.score(q, k), by_hand(gat_by_hand(scorer), q, k),
                               rtol=1e-12, atol=1e-12)


def test_negative_slope_field(by_hand):
    scorer = SCORERS.build({"name": "gat", "negative_slope": 0.5}, 3, 3).double()
    q = torch.randn(2, 3, 3, dtype=torch.float64)
    k = torch.randn(2, 4, 3, dtype=torch.float64)
    torch.testing.assert_close(scorer.score(q, k), by_hand(gat_by_hand(scorer, 0.5), q, k),
                               rtol=1e-12, atol=1e-12)


def test_projection_needs_equal_dims():
    with pytest.raises(ConfigError):
        GATScorer(3, 4, hidden_dim=2)
    with pytest.raises(ConfigError):
        SCORERS.build({"name": "gat", "hidden_dim": 2}, 3, 4)


def test_prepared_equals_score_with_a_projection():
    """(Without one: the contract, test_scorer_contract.py.)"""
    scorer = GATScorer(4, 4, hidden_dim=3).double()
    q = torch.randn(2, 3, 4, dtype=torch.float64)
    k = torch.randn(2, 5, 4, dtype=torch.float64)
    torch.testing.assert_close(scorer.score_prepared(q, scorer.prepare_keys(k)), scorer.score(q, k))


def test_bias_enters_inside_the_leaky_relu(by_hand):
    """bias=True (the authors' conv1d bias): LeakyReLU(uᵀk + vᵀq + b), b a learned scalar."""
    scorer = SCORERS.build({"name": "gat", "bias": True}, 3, 3).double()
    assert scorer.b is not None and float(scorer.b.detach()) == 0.0  # TensorFlow's zero bias init
    with torch.no_grad():
        scorer.b.fill_(0.7)
    q = torch.randn(2, 3, 3, dtype=torch.float64)
    k = torch.randn(2, 4, 3, dtype=torch.float64)
    plain = gat_by_hand(scorer)
    expected = by_hand(lambda qq, kk: leaky(plain_sum(scorer, qq, kk) + 0.7, 0.2), q, k)
    torch.testing.assert_close(scorer.score(q, k), expected, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(scorer.score(q, k), by_hand(plain, q, k))
    scorer.score(q, k).sum().backward()
    assert scorer.b.grad is not None and float(scorer.b.grad) != 0.0


def plain_sum(scorer, q, k):
    u, v = scorer.u.detach(), scorer.v.detach()
    return sum(float(u[i]) * float(k[i]) for i in range(len(k))) + \
        sum(float(v[i]) * float(q[i]) for i in range(len(q)))


def test_init_per_head_uses_each_heads_own_glorot_bound():
    """init='per_head': bound √(6/(C+1)) (one head's (C, 1) kernel, TensorFlow's glorot) instead
    of GATConv's √(6/(J+C)); with C = J = 64 the first is ≈ 0.304, the second ≈ 0.217."""
    import math

    torch.manual_seed(0)
    wide = SCORERS.build({"name": "gat", "init": "per_head"}, 64, 64)
    narrow = SCORERS.build({"name": "gat"}, 64, 64)
    wide.reset_parameters(64)
    narrow.reset_parameters(64)
    for t in (wide.u, wide.v):
        assert t.abs().max() <= math.sqrt(6 / 65) and t.abs().max() > math.sqrt(6 / 128)
    for t in (narrow.u, narrow.v):
        assert t.abs().max() <= math.sqrt(6 / 128)
    with pytest.raises(ConfigError, match="init"):
        SCORERS.build({"name": "gat", "init": "xavier"}, 4, 4)
