"""MLP scorer: a(k, q) = MLP([k; q]) (Bahdanau et al. 2015, eq. (6): a feed-forward alignment model)."""

import math

import pytest
import torch

from attnflow.blocks.scorers.additive import AdditiveScorer
from attnflow.blocks.scorers.mlp import MLPScorer
from attnflow.config.registry import SCORERS, ConfigError


ACTS = {
    "tanh": math.tanh,
    "relu": lambda x: max(x, 0.0),
    "gelu": lambda x: 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0))),
}


def linears_of(scorer):
    """The MLP's layers as plain (W, b) tensors: first layer on [k; q], then the rest."""
    W1 = torch.cat([scorer.first_k.weight, scorer.first_q.weight], dim=1).detach()
    assert scorer.first_q.bias is None
    layers = [(W1, scorer.first_k.bias.detach())]
    for m in scorer.rest:
        if isinstance(m, torch.nn.Linear):
            layers.append((m.weight.detach(), m.bias.detach()))
    return layers


def mlp_by_hand(scorer, activation):
    layers = linears_of(scorer)
    act = ACTS[activation]

    def fn(q, k):
        x = [float(v) for v in k] + [float(v) for v in q]  # [k; q]
        for n, (W, b) in enumerate(layers):
            y = [sum(float(W[r, c]) * x[c] for c in range(W.shape[1])) + float(b[r])
                 for r in range(W.shape[0])]
            x = y if n == len(layers) - 1 else [act(v) for v in y]
        assert len(x) == 1
        return x[0]

    return fn


def test_mlp_on_concat_with_torch_ops():
    """The same formula written with torch.cat on every (query, key) pair."""
    scorer = MLPScorer(3, 4, hidden_dim=5, layers=2, activation="relu").double()
    q = torch.randn(2, 3, 3, dtype=torch.float64)
    k = torch.randn(2, 6, 4, dtype=torch.float64)
    pairs = torch.cat([k.unsqueeze(1).expand(2, 3, 6, 4), q.unsqueeze(2).expand(2, 3, 6, 3)], -1)
    x = pairs
    layers = linears_of(scorer)
    for n, (W, b) in enumerate(layers):
        x = x @ W.T + b
        if n < len(layers) - 1:
            x = torch.relu(x)
    torch.testing.assert_close(scorer.score(q, k), x.squeeze(-1), rtol=1e-12, atol=1e-12)


def test_literal_one_hidden_unit():
    scorer = MLPScorer(1, 1, hidden_dim=1, activation="relu")
    with torch.no_grad():
        scorer.first_k.weight.fill_(2.0)
        scorer.first_k.bias.fill_(-1.0)
        scorer.first_q.weight.fill_(3.0)
        scorer.rest[-1].weight.fill_(0.5)
        scorer.rest[-1].bias.fill_(10.0)
    q = torch.tensor([[[1.0], [-2.0]]])
    k = torch.tensor([[[1.0], [0.0]]])
    # 0.5·relu(2k + 3q − 1) + 10: (q=1,k=1) 0.5·4+10 = 12; (1,0) 0.5·2+10 = 11;
    # (q=−2,k=1) relu(−5) -> 10; (−2,0) relu(−7) -> 10
    expected = torch.tensor([[[12.0, 11.0], [10.0, 10.0]]])
    torch.testing.assert_close(scorer.score(q, k), expected)


@pytest.mark.parametrize("activation", ["tanh", "relu", "gelu"])
@pytest.mark.parametrize("layers", [1, 2])
def test_matches_loop(by_hand, activation, layers):
    scorer = MLPScorer(3, 4, hidden_dim=5, layers=layers, activation=activation).double()
    n_linear = sum(isinstance(m, torch.nn.Linear) for m in scorer.rest)
    assert n_linear == layers  # (layers − 1) hidden-to-hidden + the output layer
    q = torch.randn(2, 3, 3, dtype=torch.float64)
    k = torch.randn(2, 4, 4, dtype=torch.float64)
    out = scorer.score(q, k)
    assert out.shape == (2, 3, 4)
    torch.testing.assert_close(out, by_hand(mlp_by_hand(scorer, activation), q, k),
                               rtol=1e-10, atol=1e-10)


def test_one_tanh_layer_without_biases_is_additive():
    mlp = MLPScorer(3, 4, hidden_dim=6, layers=1, activation="tanh").double()
    add = AdditiveScorer(3, 4, hidden_dim=6, bias=False).double()
    with torch.no_grad():
        mlp.first_k.bias.zero_()
        mlp.rest[-1].bias.zero_()
        add.U.weight.copy_(mlp.first_k.weight)
        add.V.weight.copy_(mlp.first_q.weight)
        add.w.weight.copy_(mlp.rest[-1].weight)
    q = torch.randn(2, 3, 3, dtype=torch.float64)
    k = torch.randn(2, 5, 4, dtype=torch.float64)
    torch.testing.assert_close(mlp.score(q, k), add.score(q, k), rtol=1e-12, atol=1e-12)


def test_bad_config():
    with pytest.raises(ConfigError, match="layers"):
        SCORERS.build({"name": "mlp", "layers": 0}, 3, 3)
    with pytest.raises(ConfigError):
        SCORERS.build({"name": "mlp", "activation": "sigmoid"}, 3, 3)
