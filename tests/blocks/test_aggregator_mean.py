"""Mean aggregator: c = 1/J Σ_j cʲ (GAT's output layer, Veličković et al. 2018, eq. (6))."""

import pytest
import torch

from attnflow.blocks.aggregators.mean import MeanAggregator
from attnflow.config.registry import AGGREGATORS

BUILDERS = {
    "registry": lambda J, D, M: AGGREGATORS.build({"name": "mean"}, J, D, M),
    "class": lambda J, D, M: MeanAggregator(J, D, M),
}


def test_literal():
    agg = MeanAggregator(2, 2, 10)
    heads = torch.tensor([[[[1.0, 2.0]], [[3.0, 6.0]]]])  # (B=1, J=2, T=1, D=2)
    torch.testing.assert_close(agg(heads), torch.tensor([[[2.0, 4.0]]]))


@pytest.mark.parametrize("how", list(BUILDERS))
@pytest.mark.parametrize("J,T,D", [(1, 3, 4), (3, 2, 5), (4, 1, 1)])
def test_equals_hand_mean(how, J, T, D):
    agg = BUILDERS[how](J, D, 99)
    assert agg.output_dim == D
    assert not list(agg.parameters())
    x = torch.randn(2, J, T, D, dtype=torch.float64)
    total = torch.zeros(2, T, D, dtype=torch.float64)
    for j in range(J):
        total = total + x[:, j]
    out = agg(x)
    assert out.shape == (2, T, D)
    torch.testing.assert_close(out, total / J, rtol=1e-12, atol=1e-14)


def test_extra_leading_dims():
    agg = MeanAggregator(3, 4, 12)
    x = torch.randn(2, 5, 3, 6, 4, dtype=torch.float64)  # (A, B, J, T, D)
    out = agg(x)
    assert out.shape == (2, 5, 6, 4)
    torch.testing.assert_close(out, (x[:, :, 0] + x[:, :, 1] + x[:, :, 2]) / 3, rtol=1e-12, atol=1e-14)
