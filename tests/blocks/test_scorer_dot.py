"""Dot scorer: a(k, q) = kᵀq (Luong et al. 2015, eq. (8))."""

import pytest
import torch

from attnflow.blocks.scorers.dot import DotScorer
from attnflow.config.registry import SCORERS, ConfigError

BUILDERS = {
    "registry": lambda qd, kd: SCORERS.build({"name": "dot"}, qd, kd),
    "class": lambda qd, kd: DotScorer(qd, kd),
}


def dot_by_hand(q, k):
    return sum(float(q[d]) * float(k[d]) for d in range(q.shape[0]))


@pytest.mark.parametrize("how", list(BUILDERS))
def test_two_by_two_literal(how):
    scorer = BUILDERS[how](2, 2)
    query = torch.tensor([[[1.0, 2.0], [0.0, 1.0]]])
    keys = torch.tensor([[[3.0, 4.0], [5.0, 6.0]]])
    # [1,2]·[3,4] = 11, [1,2]·[5,6] = 17, [0,1]·[3,4] = 4, [0,1]·[5,6] = 6
    expected = torch.tensor([[[11.0, 17.0], [4.0, 6.0]]])
    torch.testing.assert_close(scorer.score(query, keys), expected)


@pytest.mark.parametrize("how", list(BUILDERS))
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 1, 1, 1), (3, 5, 2, 7)])
def test_matches_loop(by_hand, how, shape):
    B, Tq, Tk, D = shape
    scorer = BUILDERS[how](D, D).double()
    q = torch.randn(B, Tq, D, dtype=torch.float64)
    k = torch.randn(B, Tk, D, dtype=torch.float64)
    out = scorer.score(q, k)
    assert out.shape == (B, Tq, Tk)
    torch.testing.assert_close(out, by_hand(dot_by_hand, q, k), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(scorer(q, k), out)  # forward is score


def test_extra_leading_dims(by_hand):
    scorer = DotScorer(4, 4).double()
    q = torch.randn(2, 3, 5, 4, dtype=torch.float64)  # (B, J, Tq, D)
    k = torch.randn(2, 3, 6, 4, dtype=torch.float64)
    out = scorer.score(q, k)
    assert out.shape == (2, 3, 5, 6)
    torch.testing.assert_close(out, by_hand(dot_by_hand, q, k), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("how", list(BUILDERS))
def test_unequal_dims_raise(how):
    with pytest.raises(ConfigError, match="query_dim == key_dim"):
        BUILDERS[how](3, 4)


def test_prepared_equals_score():
    scorer = DotScorer(4, 4).double()
    q = torch.randn(2, 3, 4, dtype=torch.float64)
    k = torch.randn(2, 5, 4, dtype=torch.float64)
    torch.testing.assert_close(scorer.score_prepared(q, scorer.prepare_keys(k)), scorer.score(q, k))


def test_sdpa_scale_is_one():
    assert DotScorer(4, 4).sdpa_scale == 1.0
