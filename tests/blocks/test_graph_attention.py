"""Graph attention layer: equals PyG's GATConv with the `gat` scorer; neighbourhood SoftMax;
Const-GAT gives 1/deg; isolated nodes keep their self-loop; every registry scorer scores edges as
the scorer itself scores the (target, source) pair."""

import pytest
import torch
from torch_geometric.nn import GATConv

from attnflow.blocks.graph.graph_attention import GraphAttention
from attnflow.config.registry import GRAPH_LAYERS, ConfigError, SCORERS


def _graph(N=30, E=120, F=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(N, F, generator=g), torch.randint(0, N, (2, E), generator=g)


def _copy_to_gatconv(layer: GraphAttention, concat: bool) -> GATConv:
    conv = GATConv(layer.in_dim, layer.out_dim, heads=layer.heads, concat=concat)
    with torch.no_grad():
        conv.lin.weight.copy_(layer.lin.weight)
        conv.att_src.copy_(torch.stack([s.u for s in layer.scorers]).unsqueeze(0))
        conv.att_dst.copy_(torch.stack([s.v for s in layer.scorers]).unsqueeze(0))
        layer.bias.normal_()
        conv.bias.copy_(layer.bias)
    return conv


@pytest.mark.parametrize("aggregator,concat", [("concat", True), ("mean", False)])
def test_gat_scorer_equals_pyg_gatconv(aggregator, concat):
    x, ei = _graph()
    ei = torch.cat([ei, torch.tensor([[3, 5], [3, 5]])], 1)  # existing self-loops are replaced
    layer = GRAPH_LAYERS.build({"name": "attention", "heads": 4, "aggregator": {"name": aggregator}},
                               12, 6)
    conv = _copy_to_gatconv(layer, concat)
    out, (e1, a1) = layer(x, ei, return_attention_weights=True)
    ref, (e2, a2) = conv(x, ei, return_attention_weights=True)
    assert out.shape == (30, 24 if concat else 6)
    assert torch.equal(e1, e2)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(a1, a2, rtol=1e-5, atol=1e-7)
    # and the gradients of the shared weights agree
    out.square().sum().backward()
    ref.square().sum().backward()
    torch.testing.assert_close(layer.lin.weight.grad, conv.lin.weight.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(torch.stack([s.u.grad for s in layer.scorers]),
                               conv.att_src.grad[0], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("scorer", ["dot", "general", "additive", "cosine"])
def test_edge_scores_match_the_scorer_on_each_pair_per_head(scorer):
    """α_it over N(t) equals SoftMax over the scorer's own (…, 1, Tk) scores of t's neighbours,
    head by head (each head has its own scorer parameters)."""
    x, ei = _graph(N=12, E=40)
    layer = GraphAttention(12, 4, heads=2, scorer={"name": scorer}, add_self_loops=True)
    layer.eval()
    _, (e, alpha) = layer(x, ei, return_attention_weights=True)
    h = layer.lin(x).view(12, 2, 4).detach()
    for t in range(12):
        idx = (e[1] == t).nonzero().view(-1)
        for j in range(2):
            s = layer.scorers[j].score(h[t, j][None], h[e[0, idx], j])[0].detach()
            torch.testing.assert_close(alpha[idx, j].detach(), s.softmax(-1), rtol=1e-5, atol=1e-6)


def test_heads_with_parameters_get_separate_gradients():
    x, ei = _graph()
    layer = GraphAttention(12, 5, heads=3, scorer={"name": "general"})
    layer(x, ei).sum().backward()
    grads = [s.W.weight.grad for s in layer.scorers]
    assert all(g is not None and g.abs().sum() > 0 for g in grads)
    assert not torch.allclose(grads[0], grads[1])


def test_const_scorer_gives_one_over_degree():
    x, ei = _graph()
    layer = GraphAttention(12, 5, heads=2, scorer={"name": "const"})
    _, (e, alpha) = layer(x, ei, return_attention_weights=True)
    deg = torch.bincount(e[1], minlength=30).float()  # |N(t)|, the self-loop included
    torch.testing.assert_close(alpha, (1 / deg[e[1]]).unsqueeze(-1).expand(-1, 2))
    # so the layer is the mean of W h over N(t)
    layer.eval()
    out = layer(x, ei)
    h = layer.lin(x)
    mean = torch.zeros(30, 10).index_add_(0, e[1], h[e[0]]) / deg.unsqueeze(-1)
    torch.testing.assert_close(out, mean + layer.bias, rtol=1e-5, atol=1e-6)


def test_isolated_node_keeps_its_self_loop():
    x = torch.randn(5, 12)
    ei = torch.tensor([[0, 1, 2], [1, 2, 0]])  # nodes 3 and 4 are isolated
    layer = GraphAttention(12, 4, heads=2)
    layer.eval()
    out, (e, alpha) = layer(x, ei, return_attention_weights=True)
    for t in (3, 4):
        loops = ((e[0] == t) & (e[1] == t)).nonzero().view(-1)
        assert loops.numel() == 1 and torch.equal(alpha[loops[0]], torch.ones(2))
        torch.testing.assert_close(out[t], layer.lin(x[t]) + layer.bias)


def test_without_self_loops_an_isolated_node_gets_only_the_bias():
    x = torch.randn(4, 12)
    layer = GraphAttention(12, 3, heads=2, add_self_loops=False)
    out = layer(x, torch.tensor([[0, 1], [1, 0]]))
    torch.testing.assert_close(out[3], layer.bias.expand(6).detach() + 0 * out[3])


def test_attention_dropout_only_in_training():
    x, ei = _graph()
    layer = GraphAttention(12, 5, heads=2, dropout=0.5)
    layer.eval()
    a, b = layer(x, ei), layer(x, ei)
    assert torch.equal(a, b)
    layer.train()
    assert not torch.allclose(layer(x, ei), a)


def test_bad_scorer_name_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown scorer 'gatt'.*Did you mean 'gat'"):
        GRAPH_LAYERS.build({"name": "attention", "scorer": {"name": "gatt"}}, 4, 4)
    assert "const" in SCORERS.names()


def test_value_dropout_drops_the_values_not_the_scores():
    """c_t = Σ_i α_it · dropout(Wh)_i with α from the undropped Wh (the reference code's seq_fts
    dropout); in eval mode the layer is unchanged."""
    x, ei = _graph()
    layer = GraphAttention(12, 5, heads=2, value_dropout=0.5)
    plain = GraphAttention(12, 5, heads=2)
    plain.load_state_dict(layer.state_dict())
    layer.eval(), plain.eval()
    torch.testing.assert_close(layer(x, ei), plain(x, ei))
    layer.train()
    torch.manual_seed(3)
    out, (e, alpha) = layer(x, ei, return_attention_weights=True)
    _, (_, alpha_plain) = plain(x, ei, return_attention_weights=True)
    torch.testing.assert_close(alpha, alpha_plain)  # scores see the undropped features
    h = layer.lin(x).view(30, 2, 5)
    torch.manual_seed(3)
    kept = torch.nn.functional.dropout(torch.ones_like(h), 0.5)  # the same mask: 0 or 2
    msg = alpha.unsqueeze(-1) * (h * kept)[e[0]]
    ref = torch.zeros(30, 2, 5).index_add_(0, e[1], msg).reshape(30, 10) + layer.bias
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    assert (kept == 0).any()


def test_gat_scorer_bias_per_head_moves_alpha_as_by_hand():
    """scorer.bias: each head's b inside the LeakyReLU, α_it = SoftMax_i LeakyReLU(uʲWʲh_i +
    vʲWʲh_t + bʲ) — computed here edge by edge; a b that only shifted every logit after the
    LeakyReLU would leave α unchanged, this one does not."""
    x, ei = _graph(N=10, E=30)
    layer = GraphAttention(12, 4, heads=3, scorer={"name": "gat", "bias": True})
    layer.eval()
    _, (e, alpha0) = layer(x, ei, return_attention_weights=True)
    with torch.no_grad():
        for j, s in enumerate(layer.scorers):
            s.b.fill_(-3.0 + 2.0 * j)
    _, (e, alpha) = layer(x, ei, return_attention_weights=True)
    assert not torch.allclose(alpha, alpha0)
    h = layer.lin(x).view(10, 3, 4).detach()
    for t in range(10):
        idx = (e[1] == t).nonzero().view(-1)
        for j, s in enumerate(layer.scorers):
            raw = h[e[0, idx], j] @ s.u.detach() + h[t, j] @ s.v.detach() + float(s.b.detach())
            logits = torch.where(raw > 0, raw, 0.2 * raw)
            torch.testing.assert_close(alpha[idx, j].detach(), logits.softmax(-1), rtol=1e-5, atol=1e-6)
