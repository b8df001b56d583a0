"""Concat + projection aggregator: c = [c¹ … cᴶ] W + b (Vaswani et al. 2017, §3.2.2: W^O)."""

import pytest
import torch

from attnflow.blocks.aggregators.concat_proj import ConcatProjAggregator
from attnflow.config.registry import AGGREGATORS


def concat_by_hand(x):
    """(B, J, T, D) -> (B, T, J·D) with explicit loops."""
    B, J, T, D = x.shape
    out = torch.empty(B, T, J * D, dtype=x.dtype)
    for b in range(B):
        for t in range(T):
            for j in range(J):
                out[b, t, j * D:(j + 1) * D] = x[b, j, t]
    return out


@pytest.mark.parametrize("J,D,M,out_dim", [(3, 4, 12, 7), (2, 5, 6, None), (1, 3, 3, 2)])
@pytest.mark.parametrize("bias", [True, False])
def test_registry_build_and_formula(J, D, M, out_dim, bias):
    cfg = {"name": "concat_proj", "bias": bias}
    if out_dim is not None:
        cfg["out_dim"] = out_dim
    agg = AGGREGATORS.build(cfg, J, D, M).double()
    expected_dim = out_dim if out_dim is not None else M
    assert agg.output_dim == expected_dim
    assert tuple(agg.proj.weight.shape) == (expected_dim, J * D)
    assert (agg.proj.bias is not None) == bias
    x = torch.randn(2, J, 3, D, dtype=torch.float64)
    out = agg(x)
    assert out.shape == (2, 3, expected_dim)
    expected = concat_by_hand(x) @ agg.proj.weight.detach().T
    if bias:
        expected = expected + agg.proj.bias.detach()
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


def test_literal():
    agg = ConcatProjAggregator(2, 1, 1)
    with torch.no_grad():
        agg.proj.weight.copy_(torch.tensor([[10.0, 1.0]]))
        agg.proj.bias.fill_(0.5)
    heads = torch.tensor([[[[2.0]], [[3.0]]]])  # c¹ = 2, c² = 3
    # [2, 3]·[10, 1] + 0.5 = 23.5
    torch.testing.assert_close(agg(heads), torch.tensor([[[23.5]]]))


def test_class_default_out_dim_is_model_dim():
    agg = ConcatProjAggregator(4, 3, 16)
    assert agg.output_dim == 16 and agg.proj.in_features == 12


def test_extra_leading_dims():
    agg = ConcatProjAggregator(2, 3, 5).double()
    x = torch.randn(2, 4, 2, 6, 3, dtype=torch.float64)  # (A, B, J, T, D)
    out = agg(x)
    assert out.shape == (2, 4, 6, 5)
    cat = torch.cat([x[:, :, 0], x[:, :, 1]], dim=-1)
    expected = cat @ agg.proj.weight.detach().T + agg.proj.bias.detach()
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
