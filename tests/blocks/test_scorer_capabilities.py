"""Scorer capabilities (attnflow/blocks/scorers/base.py): requires_equal_dims, the decomposable
protocol (key_terms, query_terms, combine_terms, stacked_terms) and reset_parameters(heads)."""

import math

import pytest
import torch

from attnflow.blocks.scorers.base import Scorer
from attnflow.blocks.scorers.gat import GATScorer
from attnflow.config.registry import SCORERS, ConfigError


def builtin_scorers():
    return [n for n in SCORERS.names() if SCORERS.get(n).__module__.startswith("attnflow.blocks.scorers.")]


def test_requires_equal_dims_is_set_for_exactly_dot_scaled_dot_cosine():
    # read from the class, without building a scorer
    assert {n for n in builtin_scorers() if SCORERS.get(n).requires_equal_dims} == \
        {"dot", "scaled_dot", "cosine"}
    assert Scorer.requires_equal_dims is False


def test_an_unregistered_subclass_is_named_by_its_class_in_the_error():
    class Same(Scorer):
        requires_equal_dims = True

    with pytest.raises(ConfigError, match="scorer 'Same'"):
        Same(2, 3)


def test_decomposable_scorers():
    assert {n for n in builtin_scorers() if SCORERS.get(n).decomposable} == {"gat", "const"}


def test_the_decomposed_score_is_the_score_with_a_projection():
    """(Every decomposable scorer with its defaults: the contract, test_scorer_contract.py.)"""
    s = GATScorer(5, 5, hidden_dim=3)
    q, k = torch.randn(2, 3, 5), torch.randn(2, 4, s.key_dim)
    decomposed = s.combine_terms(s.key_terms(k).unsqueeze(-2), s.query_terms(q).unsqueeze(-1))
    torch.testing.assert_close(decomposed, s.score(q, k))
    assert s.key_terms(k).shape == (2, 4) and s.query_terms(q).shape == (2, 3)


def test_gat_stacked_terms_are_each_heads_terms():
    heads = [GATScorer(6, 6) for _ in range(3)]
    x = torch.randn(10, 3, 6)
    k, q = GATScorer.stacked_terms(heads, x)
    assert k.shape == q.shape == (10, 3)
    for j, s in enumerate(heads):
        torch.testing.assert_close(k[:, j], s.key_terms(x[:, j]))
        torch.testing.assert_close(q[:, j], s.query_terms(x[:, j]))
    # not with a projection W (the layer then vmaps key_terms / query_terms over the heads)
    assert GATScorer.stacked_terms([GATScorer(6, 6, hidden_dim=4)], x[:, :1]) is None
    assert Scorer.stacked_terms(heads, x) is None


def test_gat_reset_parameters_is_gatconv_glorot_over_heads():
    torch.manual_seed(0)
    s = GATScorer(8, 8)
    s.reset_parameters(8)
    bound = math.sqrt(6.0 / (8 + 8))
    for t in (s.u, s.v):
        assert t.abs().max() <= bound and t.abs().max() > 0.8 * bound  # uniform(-b, b)
    # the same draws as GATConv's glorot on att_src / att_dst of shape (1, J, C), row by row
    torch.manual_seed(1)
    s.reset_parameters(4)
    torch.manual_seed(1)
    b = math.sqrt(6.0 / (4 + 8))
    u, v = torch.empty(8).uniform_(-b, b), torch.empty(8).uniform_(-b, b)
    assert torch.equal(s.u.detach(), u) and torch.equal(s.v.detach(), v)
