"""The scorer contract (attnflow/blocks/scorers/base.py), checked on every scorer the registry
holds: the built-in ones, one a user drops into attnflow/blocks/scorers/ and one a plug-in
registers are checked with no edit here. Each scorer's own formula is tested in its own file
(test_scorer_<name>.py); this test checks what every scorer owes its parents, each check against
a computation of its own (pair by pair, slice by slice, the capability's formula)."""

from __future__ import annotations

import pytest
import torch

from attnflow.blocks.graph.graph_attention import GraphAttention
from attnflow.blocks.scorers.base import Scorer
from attnflow.config.registry import SCORERS, ConfigError

D = 4  # query and key width where a scorer needs them equal


def _inputs(*lead, tq=3, tk=5, qd=D, kd=D):
    return (torch.randn(*lead, tq, qd, dtype=torch.float64),
            torch.randn(*lead, tk, kd, dtype=torch.float64))


def _built(name: str, qd: int = D, kd: int = D) -> Scorer:
    torch.manual_seed(0)
    return SCORERS.build({"name": name}, qd, kd).double()


def _check_registry_build_is_the_class(name):
    """Built from its name with every field at its default: the registered class, as the class
    itself builds it (same parameters from the same seed, same scores)."""
    cls = SCORERS.get(name)
    scorer = _built(name)
    assert type(scorer) is cls and isinstance(scorer, Scorer) and cls.registry_name == name
    assert (scorer.query_dim, scorer.key_dim) == (D, D)
    torch.manual_seed(0)
    direct = cls(D, D).double()
    assert direct.state_dict().keys() == scorer.state_dict().keys()
    assert all(torch.equal(v, direct.state_dict()[k]) for k, v in scorer.state_dict().items())
    q, k = _inputs(2)
    torch.testing.assert_close(direct.score(q, k), scorer.score(q, k), rtol=0, atol=0)


def _check_each_score_is_its_own_pair(scorer):
    """(B, Tq, D) × (B, Tk, D) -> (B, Tq, Tk), finite; entry [b, t, i] is the score of the pair
    (q[b, t], k[b, i]) scored alone, so no key or query changes another's score; forward is score."""
    q, k = _inputs(2)
    out = scorer.score(q, k)
    assert out.shape == (2, 3, 5) and out.dtype == torch.float64 and torch.isfinite(out).all()
    for b in range(2):
        for t in range(3):
            for i in range(5):
                alone = scorer.score(q[b, t][None, None], k[b, i][None, None])
                torch.testing.assert_close(out[b, t, i], alone[0, 0, 0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(scorer(q, k), out, rtol=0, atol=0)


def _check_leading_dims_are_slices(scorer):
    """Extra leading dims (B, J, T, D), as multi-head attention passes them: slice j scored alone."""
    q, k = _inputs(2, 3)
    out = scorer.score(q, k)
    assert out.shape == (2, 3, 3, 5)
    for j in range(3):
        torch.testing.assert_close(out[:, j], scorer.score(q[:, j], k[:, j]), rtol=1e-12, atol=1e-12)


def _check_prepared_keys(scorer):
    """score_prepared(q, prepare_keys(k)) is score(q, k) (a decoder prepares its keys once)."""
    q, k = _inputs(2)
    prepared = scorer.prepare_keys(k)
    torch.testing.assert_close(scorer.score_prepared(q, prepared), scorer.score(q, k), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(scorer.score_prepared(q[:, :1], prepared), scorer.score(q[:, :1], k),
                               rtol=1e-12, atol=1e-12)


def _check_capabilities(scorer):
    """What its class attributes promise: sdpa_scale s: a = s·qᵀk; dot_product: a = q̃ᵀ k̃;
    decomposable: a = combine(f(k), g(q)), f also off the prepared keys; else key_terms refuses."""
    q, k = _inputs(2)
    out = scorer.score(q, k)
    if scorer.sdpa_scale is not None:
        torch.testing.assert_close(out, scorer.sdpa_scale * q @ k.transpose(-1, -2), rtol=1e-12, atol=1e-12)
    if scorer.dot_product:
        torch.testing.assert_close(out, scorer.dot_query(q) @ scorer.prepare_keys(k).transpose(-1, -2),
                                   rtol=1e-12, atol=1e-12)
    if scorer.decomposable:
        f, g = scorer.key_terms(k), scorer.query_terms(q)
        assert f.shape == (2, 5) and g.shape == (2, 3)
        torch.testing.assert_close(scorer.combine_terms(f.unsqueeze(-2), g.unsqueeze(-1)), out,
                                   rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(scorer.prepared_terms(scorer.prepare_keys(k)), f, rtol=1e-12, atol=1e-12)
    else:
        with pytest.raises(NotImplementedError, match=f"scorer '{scorer.registry_name}' is not decomposable"):
            scorer.key_terms(k)


def _check_gradients_and_reset(scorer):
    """Backward reaches the query and every trainable parameter (a scorer with none may return
    scores without a graph); reset_parameters(heads) keeps each shape, and a scorer that does not
    override it keeps the constructor's values."""
    q, k = _inputs(2)
    out = scorer.score(q.requires_grad_(True), k)
    trainable = [(n, p) for n, p in scorer.named_parameters() if p.requires_grad]
    assert out.requires_grad or not trainable
    if out.requires_grad:
        out.square().sum().backward()
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for _, p in trainable), trainable
    before = {n: v.clone() for n, v in scorer.state_dict().items()}
    scorer.reset_parameters(8)
    after = scorer.state_dict()
    assert {n: v.shape for n, v in after.items()} == {n: v.shape for n, v in before.items()}
    if type(scorer).reset_parameters is Scorer.reset_parameters:
        assert all(torch.equal(before[n], v) for n, v in after.items())


def _check_dims(name):
    """Unequal query and key widths: refused, naming them, by a scorer that requires_equal_dims;
    another builds with the widths it was given, or refuses them with a ConfigError."""
    cls = SCORERS.get(name)
    if cls.requires_equal_dims:
        with pytest.raises(ConfigError, match=f"scorer '{name}' compares query and key directly.*got 3 and 5"):
            SCORERS.build({"name": name}, 3, 5)
        return
    try:
        scorer = SCORERS.build({"name": name}, 3, 5).double()
    except ConfigError as err:
        assert "query_dim" in str(err) or "key_dim" in str(err), err
        return
    q, k = _inputs(2, qd=3, kd=5)
    assert scorer.score(q, k).shape == (2, 3, 5)


def _check_in_graph_attention(name):
    """As a graph layer's per-head scorer: α over each node's in-edges (with its self-loop) sums
    to 1 for every head (summed edge by edge here)."""
    g = torch.Generator().manual_seed(0)
    x, edges = torch.randn(20, 6, generator=g), torch.randint(0, 20, (2, 60), generator=g)
    layer = GraphAttention(6, 4, heads=2, scorer={"name": name})
    out, (e, alpha) = layer(x, edges, return_attention_weights=True)
    assert out.shape[0] == 20 and alpha.shape == (e.shape[1], 2) and (alpha >= 0).all()
    torch.testing.assert_close(torch.zeros(20, 2).index_add_(0, e[1], alpha), torch.ones(20, 2))


@pytest.mark.parametrize("name", SCORERS.names())
def test_every_registered_scorer_keeps_the_scorer_contract(name):
    _check_registry_build_is_the_class(name)
    scorer = _built(name)
    _check_each_score_is_its_own_pair(scorer)
    _check_leading_dims_are_slices(scorer)
    _check_prepared_keys(scorer)
    _check_capabilities(scorer)
    _check_gradients_and_reset(scorer)
    _check_dims(name)
    _check_in_graph_attention(name)


class _Sum(Scorer):
    """a(k, q) = Σq − Σk: a pairwise score, as the contract asks."""

    def score_prepared(self, query, prepared):
        return query.sum(-1, keepdim=True) - prepared.sum(-1).unsqueeze(-2)


class _AgainstTheMean(_Sum):
    """Each key scored against the mean of all keys: the score of a pair depends on the others."""

    def prepare_keys(self, keys):
        return keys - keys.mean(-2, keepdim=True)


@pytest.mark.parametrize("cls, keeps", [(_Sum, True), (_AgainstTheMean, False)])
def test_a_scorer_a_user_registers_is_held_to_the_contract(cls, keeps):
    """The contract reads the registry, so a scorer registered later is checked by it; one that
    breaks it (scores that depend on the other keys) fails it."""
    SCORERS.register("contract_probe")(cls)
    try:
        assert "contract_probe" in SCORERS.names()
        if keeps:
            test_every_registered_scorer_keeps_the_scorer_contract("contract_probe")
        else:
            with pytest.raises(AssertionError):
                test_every_registered_scorer_keeps_the_scorer_contract("contract_probe")
    finally:
        SCORERS.unregister("contract_probe")
