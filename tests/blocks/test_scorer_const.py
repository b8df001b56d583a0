"""Constant scorer: a(k, q) = 0, so SoftMax gives uniform weights (Const-GAT)."""

import torch

from attnflow.config.registry import NORMALIZERS, SCORERS


def test_scores_are_zero_with_the_broadcast_shape():
    s = SCORERS.build({"name": "const"}, 5, 3)
    out = s.score(torch.randn(2, 4, 5), torch.randn(2, 7, 3))
    assert out.shape == (2, 4, 7)
    assert torch.equal(out, torch.zeros(2, 4, 7))
    assert list(s.parameters()) == []


def test_softmax_of_const_is_the_mean_of_the_values():
    s = SCORERS.build({"name": "const"}, 4, 4)
    keys = torch.randn(3, 6, 4)
    alpha = NORMALIZERS.build({"name": "softmax"})(s.score(torch.randn(3, 2, 4), keys))
    assert torch.allclose(alpha, torch.full((3, 2, 6), 1 / 6))
    assert torch.allclose(alpha @ keys, keys.mean(-2, keepdim=True).expand(3, 2, 4), atol=1e-6)
