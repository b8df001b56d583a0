"""GATv2 scorer against its formula, and the graph layer with it against PyG's GATv2Conv."""

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import GATv2Conv

from attnflow.blocks.graph.graph_attention import GraphAttention
from attnflow.config.registry import SCORERS, ConfigError


def test_scores_by_hand():
    torch.manual_seed(0)
    s = SCORERS.build({"name": "gatv2"}, 4, 4)
    q, k = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    out = s.score(q, k)
    assert out.shape == (2, 3, 5)
    for b in range(2):
        for i in range(3):
            for j in range(5):
                z = q[b, i] + k[b, j]
                expected = (torch.where(z > 0, z, 0.2 * z) * s.a).sum()
                torch.testing.assert_close(out[b, i, j], expected)


def test_projections_and_dimension_check():
    torch.manual_seed(1)
    s = SCORERS.build({"name": "gatv2", "hidden_dim": 6, "negative_slope": 0.1}, 3, 5)
    q, k = torch.randn(4, 3), torch.randn(7, 5)
    z = s.V(q)[:, None] + s.U(k)[None]  # (4, 7, 6)
    torch.testing.assert_close(s.score(q, k), F.leaky_relu(z, 0.1) @ s.a)
    with pytest.raises(ConfigError, match="needs query_dim == key_dim"):
        SCORERS.build({"name": "gatv2"}, 3, 5)


def test_dynamic_attention_ranks_keys_differently_per_query():
    """The point of GATv2 (Brody et al.): with GAT's score every query ranks the keys alike; with
    GATv2's the ranking can change with the query."""
    s = SCORERS.build({"name": "gatv2"}, 2, 2)
    with torch.no_grad():
        s.a.copy_(torch.tensor([1.0, -1.0]))
    keys = torch.tensor([[1.0, 0.0], [0.0, -2.0]])  # A, B
    first = s.score(torch.tensor([[0.0, -10.0]]), keys)[0]   # A: 3.0, B: 2.4
    second = s.score(torch.tensor([[-10.0, 0.0]]), keys)[0]  # A: -1.8, B: -1.6
    torch.testing.assert_close(first, torch.tensor([3.0, 2.4]))
    torch.testing.assert_close(second, torch.tensor([-1.8, -1.6]))
    assert first.argmax() != second.argmax()
    gat = SCORERS.build({"name": "gat"}, 2, 2)  # static: uᵀk decides the order for every query
    orders = {int(gat.score(q, keys)[0].argmax()) for q in (torch.tensor([[0.0, -10.0]]),
                                                            torch.tensor([[-10.0, 0.0]]))}
    assert len(orders) == 1


def test_graph_layer_with_gatv2_equals_pyg_gatv2conv_with_shared_weights():
    torch.manual_seed(2)
    x, ei = torch.randn(20, 6), torch.randint(0, 20, (2, 70))
    layer = GraphAttention(6, 4, heads=3, scorer={"name": "gatv2"})
    conv = GATv2Conv(6, 4, heads=3, share_weights=True)
    with torch.no_grad():
        conv.lin_l.weight.copy_(layer.lin.weight)
        conv.lin_l.bias.zero_()
        conv.att.copy_(torch.stack([s.a for s in layer.scorers]).unsqueeze(0))
        layer.bias.normal_()
        conv.bias.copy_(layer.bias)
    out, (e1, a1) = layer(x, ei, return_attention_weights=True)
    ref, (e2, a2) = conv(x, ei, return_attention_weights=True)
    assert torch.equal(e1, e2)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(a1, a2, rtol=1e-5, atol=1e-6)
