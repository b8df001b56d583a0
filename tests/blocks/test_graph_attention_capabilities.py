"""The graph layer composes by capability, not by name: a scorer defined here (per-head
parameters; or declaring the decomposable protocol) works with no other change; the decomposable
path equals the per-edge path; const needs no per-edge features; the normaliser is the
registry's (its segment form), and one without a segment form is refused when built."""

import contextlib
import inspect
import re

import pytest
import torch
from torch import nn

import attnflow.blocks.graph.graph_attention as graph_attention
from attnflow.blocks.graph.graph_attention import GraphAttention
from attnflow.blocks.normalizers.base import Normalizer
from attnflow.blocks.normalizers.norm import NormNormalizer
from attnflow.blocks.scorers.base import Scorer
from attnflow.blocks.scorers.const import ConstScorer
from attnflow.blocks.scorers.gat import GATScorer
from attnflow.config.registry import NORMALIZERS, SCORERS, ConfigError


@contextlib.contextmanager
def registered(registry, name, cls):
    """Register ``cls`` for the duration of a test only (the registries are process-wide)."""
    registry.register(name)(cls)
    try:
        yield cls
    finally:
        registry.unregister(name)


class WeightedDot(Scorer):
    """a(k, q) = Σ_d w_d k_d q_d + b: per-head parameters, not decomposable."""

    def __init__(self, query_dim: int, key_dim: int, *, init: float = 1.0):
        super().__init__(query_dim, key_dim)
        self.w = nn.Parameter(init * torch.rand(key_dim) + 0.5)
        self.b = nn.Parameter(torch.zeros(()))

    def score_prepared(self, query, prepared):
        return (query * self.w) @ prepared.transpose(-1, -2) + self.b


class TanhTerms(Scorer):
    """a(k, q) = 2·tanh(aᵀk) + bᵀq: decomposable, per-head parameters, no batched form."""

    decomposable = True
    pair_calls = 0  # how often the per-pair score ran

    def __init__(self, query_dim: int, key_dim: int):
        super().__init__(query_dim, key_dim)
        self.a = nn.Parameter(torch.randn(key_dim))
        self.b = nn.Parameter(torch.randn(query_dim))

    def key_terms(self, keys):
        return torch.tanh((keys * self.a).sum(-1))

    def query_terms(self, query):
        return (query * self.b).sum(-1)

    def combine_terms(self, key_term, query_term):
        return 2 * key_term + query_term

    def score_prepared(self, query, prepared):
        type(self).pair_calls += 1
        return self.combine_terms(self.key_terms(prepared).unsqueeze(-2),
                                  self.query_terms(query).unsqueeze(-1))


class GATPerEdge(GATScorer):
    """The gat scorer without the decomposable capability: the generic per-edge path."""

    decomposable = False


class GATNoBatchedForm(GATScorer):
    """The gat scorer without its batched stacked_terms: key/query terms vmapped over heads."""

    @classmethod
    def stacked_terms(cls, scorers, x):
        return None


class RowOnly(Normalizer):
    """A normaliser with a row form only."""

    def forward(self, scores, mask=None):
        return torch.softmax(scores, -1)


def _graph(N=25, E=90, F=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(N, F, generator=g), torch.randint(0, N, (2, E), generator=g)


def _sums(e, alpha, N):
    return torch.zeros(N, alpha.shape[1]).index_add_(0, e[1], alpha.detach())


def _check_alpha_is_each_heads_scorer(layer, x, e, alpha, normalize=lambda s: s.softmax(-1)):
    h = layer.lin(x).view(x.shape[0], layer.heads, layer.out_dim).detach()
    for t in range(x.shape[0]):
        idx = (e[1] == t).nonzero().view(-1)
        for j in range(layer.heads):
            s = layer.scorers[j].score(h[t, j][None], h[e[0, idx], j])[0].detach()
            torch.testing.assert_close(alpha[idx, j].detach(), normalize(s), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("heads", [1, 3])
def test_a_scorer_with_per_head_parameters_defined_here_works(heads):
    with registered(SCORERS, "test_graph_weighted_dot", WeightedDot):
        x, ei = _graph()
        layer = GraphAttention(10, 4, heads=heads, scorer={"name": "test_graph_weighted_dot", "init": 2.0})
        out, (e, alpha) = layer(x, ei, return_attention_weights=True)
        torch.testing.assert_close(_sums(e, alpha, 25), torch.ones(25, heads))
        _check_alpha_is_each_heads_scorer(layer, x, e, alpha)
        out.square().sum().backward()
        grads = [s.w.grad for s in layer.scorers]
        assert all(g is not None and g.abs().sum() > 0 for g in grads)
        if heads > 1:
            assert not torch.allclose(grads[0], grads[1])


@pytest.mark.parametrize("heads", [1, 3])
def test_a_decomposable_scorer_defined_here_takes_the_per_node_path(heads):
    with registered(SCORERS, "test_graph_tanh_terms", TanhTerms):
        x, ei = _graph()
        layer = GraphAttention(10, 4, heads=heads, scorer={"name": "test_graph_tanh_terms"})
        TanhTerms.pair_calls = 0
        out, (e, alpha) = layer(x, ei, return_attention_weights=True)
        assert TanhTerms.pair_calls == 0  # per-node terms, gathered per edge: no pairwise score
        torch.testing.assert_close(_sums(e, alpha, 25), torch.ones(25, heads))
        out.square().sum().backward()
        for name in ("a", "b"):
            grads = [getattr(s, name).grad for s in layer.scorers]
            assert all(g is not None for g in grads)
        assert all(s.a.grad.abs().sum() > 0 for s in layer.scorers)  # b cancels in the SoftMax
        _check_alpha_is_each_heads_scorer(layer, x, e, alpha)


@pytest.mark.parametrize("heads", [1, 4])
@pytest.mark.parametrize("other", [GATPerEdge, GATNoBatchedForm])
def test_gat_per_node_path_equals_the_per_edge_path(heads, other):
    with registered(SCORERS, "test_graph_gat_other", other):
        x, ei = _graph()
        fast = GraphAttention(10, 6, heads=heads)  # gat: decomposable, batched stacked_terms
        slow = GraphAttention(10, 6, heads=heads, scorer={"name": "test_graph_gat_other"})
        slow.load_state_dict(fast.state_dict())
        o1, (e1, a1) = fast(x, ei, return_attention_weights=True)
        o2, (e2, a2) = slow(x, ei, return_attention_weights=True)
        assert torch.equal(e1, e2)
        torch.testing.assert_close(a1, a2, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(o1, o2, rtol=1e-5, atol=1e-6)
        o1.square().sum().backward()
        o2.square().sum().backward()
        torch.testing.assert_close(fast.lin.weight.grad, slow.lin.weight.grad, rtol=1e-4, atol=1e-6)
        for s1, s2 in zip(fast.scorers, slow.scorers):
            torch.testing.assert_close(s1.u.grad, s2.u.grad, rtol=1e-4, atol=1e-6)
            torch.testing.assert_close(s1.v.grad, s2.v.grad, rtol=1e-4, atol=1e-6)


def test_gat_with_a_projection_is_decomposable_too():
    x, ei = _graph()
    layer = GraphAttention(10, 4, heads=2, scorer={"name": "gat", "hidden_dim": 3})
    out, (e, alpha) = layer(x, ei, return_attention_weights=True)
    _check_alpha_is_each_heads_scorer(layer, x, e, alpha)
    out.sum().backward()
    assert all(s.W.weight.grad.abs().sum() > 0 for s in layer.scorers)


def test_const_needs_no_per_edge_features(monkeypatch):
    def no_pairs(self, query, prepared):
        raise AssertionError("const scored pairs of per-edge features")

    monkeypatch.setattr(ConstScorer, "score_prepared", no_pairs)
    x, ei = _graph()
    layer = GraphAttention(10, 4, heads=2, scorer={"name": "const"})
    _, (e, alpha) = layer(x, ei, return_attention_weights=True)
    deg = torch.bincount(e[1], minlength=25).float()
    torch.testing.assert_close(alpha, (1 / deg[e[1]]).unsqueeze(-1).expand(-1, 2))


def test_each_head_scorer_is_initialised_by_its_reset_parameters():
    layer = GraphAttention(10, 6, heads=4)
    bound = (6.0 / (4 + 6)) ** 0.5  # GATConv's glorot over att (1, J, C)
    assert all(s.u.abs().max() <= bound and s.v.abs().max() <= bound for s in layer.scorers)
    # drawn with that bound, not the scorer's own 1/√C
    assert max(float(s.u.detach().abs().max()) for s in layer.scorers) > 0.8 * bound


def test_the_layer_does_not_name_scorer_classes():
    src = inspect.getsource(graph_attention)
    assert "GATScorer" not in src and "ConstScorer" not in src and "isinstance" not in src
    assert not re.search(r"\.(u|v)\b", src)  # never a scorer's parameters by name


def test_norm_normaliser_in_the_layer():
    x, ei = _graph()
    layer = GraphAttention(10, 4, heads=2, normalizer={"name": "norm", "positive": "relu"})
    assert isinstance(layer.normalizer, NormNormalizer)
    out, (e, alpha) = layer(x, ei, return_attention_weights=True)
    relu_norm = lambda s: s.relu() / (s.relu().sum() + 1e-12)  # noqa: E731
    _check_alpha_is_each_heads_scorer(layer, x, e, alpha, relu_norm)
    out.sum().backward()
    assert layer.lin.weight.grad.abs().sum() > 0


def test_a_normaliser_without_a_segment_form_is_refused_when_built():
    with registered(NORMALIZERS, "test_graph_row_only", RowOnly):
        with pytest.raises(ConfigError, match="normalizer 'test_graph_row_only'.*no segment form.*"
                                              "normalisers with one: norm, softmax"):
            GraphAttention(10, 4, normalizer={"name": "test_graph_row_only"})
