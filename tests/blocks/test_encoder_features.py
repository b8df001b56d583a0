"""Precomputed region features: optional normalisation and projection, a row-major grid
(Xu et al. 2015, §3.1.1)."""

import pytest
import torch

from attnflow.blocks.encoders.features import FeatureEncoder
from attnflow.config.registry import ENCODERS, ConfigError


def build(input_dim=5, **fields):
    return ENCODERS.build({"name": "features", **fields}, input_dim).double()


@pytest.mark.parametrize("L,grid,expected", [(196, None, (14, 14)), (1, None, (1, 1)),
                                             (6, [2, 3], (2, 3)), (12, [4, 3], (4, 3))])
def test_shapes_and_grid(L, grid, expected):
    enc = build(out_dim=7, grid=grid)
    assert isinstance(enc, FeatureEncoder) and enc.input_kind == "image_features"
    regions, got = enc(torch.randn(2, L, 5, dtype=torch.float64))
    assert got == expected and got[0] * got[1] == L
    assert regions.shape == (2, L, 7) and enc.output_dim == 7


def test_defaults_pass_the_features_through():
    enc = build()
    x = torch.randn(2, 9, 5, dtype=torch.float64)
    regions, grid = enc(x)
    assert grid == (3, 3) and enc.output_dim == 5 and torch.equal(regions, x)


def test_projection_is_x_W_plus_b():
    enc = build(input_dim=5, out_dim=3)
    W = torch.randn(5, 3, dtype=torch.float64)
    b = torch.randn(3, dtype=torch.float64)
    with torch.no_grad():
        enc.project.weight.copy_(W.T)
        enc.project.bias.copy_(b)
    x = torch.randn(2, 4, 5, dtype=torch.float64)
    regions, _ = enc(x)
    by_hand = torch.stack([torch.stack([x[n, i] @ W + b for i in range(4)]) for n in range(2)])
    torch.testing.assert_close(regions, by_hand, rtol=1e-12, atol=1e-12)


def test_norms():
    x = 3 * torch.randn(2, 4, 5, dtype=torch.float64) + 1
    l2, _ = build(norm="l2")(x)
    torch.testing.assert_close(l2.norm(dim=-1), torch.ones(2, 4, dtype=torch.float64))
    torch.testing.assert_close(l2 * x.norm(dim=-1, keepdim=True), x)  # same direction
    layer, _ = build(norm="layer")(x)  # LN's initial gain 1, bias 0
    torch.testing.assert_close(layer.mean(-1), torch.zeros(2, 4, dtype=torch.float64))
    torch.testing.assert_close(layer.var(-1, unbiased=False), torch.ones(2, 4, dtype=torch.float64),
                               rtol=1e-4, atol=1e-4)


def test_region_boxes_are_row_major_cells():
    """A pixel in the bottom-left corner of a 20×30 image on a 2×3 grid is in region 3 (row 1,
    column 0); column-major order would put it in region 1."""
    enc = build(grid=[2, 3])
    boxes = enc.region_boxes(6, 20, 30)
    assert boxes.shape == (6, 4)
    for (y, x), expected in [((19.5, 0.5), 3), ((0.5, 29.5), 2), ((12.0, 15.0), 4)]:
        inside = (boxes[:, 0] <= y) & (y < boxes[:, 2]) & (boxes[:, 1] <= x) & (x < boxes[:, 3])
        assert inside.nonzero().flatten().tolist() == [expected]
    torch.testing.assert_close(boxes[3], torch.tensor([10.0, 0.0, 20.0, 10.0], dtype=torch.float64))


def test_gradients_flow():
    enc = build(out_dim=3, norm="layer", dropout=0.1)
    x = torch.randn(2, 4, 5, dtype=torch.float64, requires_grad=True)
    regions, _ = enc(x)
    regions.pow(2).mean().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    for name, p in enc.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("grid", [[2], [0, 3], [2, 3, 1], [-1, 4]])
def test_bad_grid_field_is_refused_naming_it(grid):
    with pytest.raises(ConfigError, match="field 'grid'"):
        build(grid=grid)


def test_regions_that_do_not_fit_the_grid_are_refused():
    with pytest.raises(ConfigError, match=r"field 'grid' is \[2, 3\].*L = 5"):
        build(grid=[2, 3])(torch.randn(1, 5, 5, dtype=torch.float64))
    with pytest.raises(ConfigError, match="L = 5 regions is not a square.*'grid'"):
        build()(torch.randn(1, 5, 5, dtype=torch.float64))
    with pytest.raises(ConfigError, match="'out_dim'"):
        build(out_dim=0)
    with pytest.raises(ValueError, match=r"expects features \(B, L, 5\)"):
        build()(torch.randn(1, 4, 6, dtype=torch.float64))
