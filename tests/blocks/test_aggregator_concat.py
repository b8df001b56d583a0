"""Concat aggregator: c = [c¹ … cᴶ], head j at features j·D … (j+1)·D − 1 (Veličković et al. 2018, eq. (5))."""

import pytest
import torch

from attnflow.blocks.aggregators.concat import ConcatAggregator
from attnflow.config.registry import AGGREGATORS

BUILDERS = {
    "registry": lambda J, D, M: AGGREGATORS.build({"name": "concat"}, J, D, M),
    "class": lambda J, D, M: ConcatAggregator(J, D, M),
}


def test_literal():
    agg = ConcatAggregator(2, 2, 10)
    heads = torch.tensor([[[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]]])  # (1, J=2, T=2, 2)
    expected = torch.tensor([[[1.0, 2.0, 5.0, 6.0], [3.0, 4.0, 7.0, 8.0]]])
    torch.testing.assert_close(agg(heads), expected)


@pytest.mark.parametrize("how", list(BUILDERS))
@pytest.mark.parametrize("J,T,D", [(1, 3, 4), (3, 2, 5), (4, 5, 1)])
def test_head_j_fills_its_block(how, J, T, D):
    agg = BUILDERS[how](J, D, 99)
    assert agg.output_dim == J * D
    assert not list(agg.parameters())
    x = torch.randn(2, J, T, D)
    out = agg(x)
    assert out.shape == (2, T, J * D)
    for b in range(2):
        for t in range(T):
            for j in range(J):
                for d in range(D):
                    assert out[b, t, j * D + d] == x[b, j, t, d]


def test_extra_leading_dims():
    agg = ConcatAggregator(3, 2, 6)
    x = torch.randn(2, 4, 3, 5, 2)  # (A, B, J, T, D)
    out = agg(x)
    assert out.shape == (2, 4, 5, 6)
    for j in range(3):
        assert torch.equal(out[..., 2 * j:2 * (j + 1)], x[:, :, j])
