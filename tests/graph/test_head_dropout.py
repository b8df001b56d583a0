"""Per-head input dropout (``model.head_dropout``): each head drops its own copy of the input, as the
GAT authors' ``attn_head`` (PetarV-/GAT utils/layers.py: ``tf.nn.dropout(seq)`` inside every head)."""

import pytest
import torch

from attnflow.blocks.graph.graph_attention import GraphAttention
from attnflow.models.gat import GAT


def _one_hot_rows(n, f, seed=0):
    """One nonzero entry per row: head j's row is then either 0 (dropped) or x·Wʲ/(1−p)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.zeros(n, f)
    x[torch.arange(n), torch.randint(0, f, (n,), generator=g)] = 1.0 + torch.rand(n, generator=g)
    return x


@pytest.mark.parametrize("dense", [False, True])
def test_each_head_keeps_or_drops_its_own_copy(dense):
    p, n = 0.5, 4000
    layer = GraphAttention(20, 3, heads=2, input_dropout=p)
    x = _one_hot_rows(n, 20) if not dense else _one_hot_rows(n, 20) + 1e-3  # dense: no zero entry
    h = layer._head_dropped_lin(x)  # (N, J, C)
    full = layer.lin(x).view(n, 2, 3) / (1 - p)
    if not dense:
        kept = (h - full).abs().amax(-1) < 1e-5          # (N, J): head j kept row n's one entry
        dropped = h.abs().amax(-1) < 1e-7
        assert (kept | dropped).all()                    # all or nothing per head and row
        both = kept.all(1).float().mean()
        assert abs(kept.float().mean() - (1 - p)) < 0.04
        assert abs(both - (1 - p) ** 2) < 0.04           # independent heads; shared mask: 0.5
    else:  # the batched path: unbiased, and the two heads' outputs differ (different masks)
        assert not torch.allclose(h[:, 0] / full[:, 0].clamp(min=1e-6),
                                  h[:, 1] / full[:, 1].clamp(min=1e-6))
        mean = torch.stack([layer._head_dropped_lin(x[:50]) for _ in range(3000)]).mean(0)
        torch.testing.assert_close(mean, layer.lin(x[:50]).view(50, 2, 3), atol=0.05, rtol=0.05)


def test_head_dropout_moves_the_input_dropout_into_the_layers_and_is_off_in_eval():
    torch.manual_seed(0)
    shared = GAT(20, 4, head_dropout=False)
    per_head = GAT(20, 4, head_dropout=True)
    per_head.load_state_dict(shared.state_dict())
    assert [b.input_dropout for b in per_head.layers] == [0.6, 0.6]
    assert [b.input_dropout for b in shared.layers] == [0.0, 0.0]
    x = torch.rand(30, 20)
    ei = torch.randint(0, 30, (2, 90))
    shared.eval(), per_head.eval()
    torch.testing.assert_close(per_head(x, ei), shared(x, ei))  # the same function in eval
    per_head.train()
    out = per_head(x, ei)
    out.sum().backward()
    assert all(p.grad is not None for p in per_head.parameters())
