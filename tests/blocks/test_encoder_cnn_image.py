"""CNN image encoder: a row-major grid of region vectors (Xu et al. 2015, §3.1.1)."""

import pytest
import torch

from attnflow.blocks.encoders.cnn_image import CNNImageEncoder
from attnflow.blocks.encoders.rnn import RNNEncoder
from attnflow.config.registry import ENCODERS, ConfigError


def build(**fields):
    in_channels = fields.pop("in_channels", 3)
    return ENCODERS.build({"name": "cnn", **fields}, in_channels).double()


def delta_weights(enc):
    """Every conv the identity on channel 0 (a centred delta kernel), no bias: a pixel's value
    moves through the stack unchanged, so only pooling decides where it lands."""
    with torch.no_grad():
        for conv in [m for m in enc.features if isinstance(m, torch.nn.Conv2d)]:
            conv.weight.zero_()
            k = conv.kernel_size[0]
            conv.weight[:, 0, k // 2, k // 2] = 1.0
            if conv.bias is not None:
                conv.bias.zero_()


@pytest.mark.parametrize("size", [(16, 16), (17, 23), (32, 8), (9, 40)])
def test_shapes_and_grid_for_several_sizes(size):
    H, W = size
    enc = build(channels=[4, 6], out_dim=5)
    assert isinstance(enc, CNNImageEncoder) and enc.input_kind == "image"
    regions, grid = enc(torch.randn(2, 3, H, W, dtype=torch.float64))
    assert grid == (H // 4, W // 4) == enc.grid(H, W)  # two 2×2 poolings, floored
    assert regions.shape == (2, grid[0] * grid[1], 5) and enc.output_dim == 5
    assert enc.region_boxes(H, W).shape == (grid[0] * grid[1], 4)
    no_pool = build(channels=[4], pooling="none", in_channels=1)
    regions, grid = no_pool(torch.randn(1, 1, H, W, dtype=torch.float64))
    assert grid == (H, W) and regions.shape == (1, H * W, 4)


def test_defaults_build_and_text_encoders_are_unmarked():
    enc = CNNImageEncoder()
    assert enc.output_dim == 128 and enc.stride == 8 and enc.in_channels == 3
    assert RNNEncoder.input_kind is None  # (token sequences)


@pytest.mark.parametrize("kernel", [1, 3, 5])
def test_a_bright_corner_lights_its_row_major_region(kernel):
    """8×12 pixels, stride 4 → a 2×3 grid: row-major and column-major orders disagree."""
    enc = build(channels=[2, 2], kernel=kernel, norm="none", in_channels=1).eval()
    delta_weights(enc)
    H, W = 8, 12
    h, w = enc.grid(H, W)
    assert (h, w) == (2, 3)
    boxes = enc.region_boxes(H, W)
    for y, x in [(H - 1, 0), (0, W - 1), (H - 1, W - 1), (5, 6), (2, 9)]:
        img = torch.zeros(1, 1, H, W, dtype=torch.float64)
        img[0, 0, y, x] = 1.0
        regions, _ = enc(img)
        lit = regions[0].abs().sum(-1).nonzero().flatten().tolist()
        expected = (y // 4) * w + x // 4  # row-major, computed here
        assert lit == [expected], (y, x)
        top, left, bottom, right = boxes[expected].tolist()
        assert top <= y < bottom and left <= x < right
        inside = (boxes[:, 0] <= y) & (y < boxes[:, 2]) & (boxes[:, 1] <= x) & (x < boxes[:, 3])
        assert inside.sum() == 1  # cells tile the image without overlap


def test_receptive_field_is_centred_on_the_cell():
    """Avg pooling, positive weights and input (every ReLU open): the pixels a region depends on
    (non-zero input gradient) span receptive_field pixels centred on region_centres."""
    enc = build(channels=[2, 2], kernel=3, norm="none", pooling="avg", in_channels=1)
    with torch.no_grad():
        for p in enc.parameters():
            p.uniform_(0.1, 1.0)
    H = W = 24
    img = torch.rand(1, 1, H, W, dtype=torch.float64, requires_grad=True) + 0.1
    img.retain_grad()
    regions, (h, w) = enc(img)
    i = 2 * w + 3  # an interior region: row 2, column 3
    regions[0, i].sum().backward()
    rows = img.grad[0, 0].abs().sum(1).nonzero().flatten()
    cols = img.grad[0, 0].abs().sum(0).nonzero().flatten()
    rf = 1 + (3 - 1) + (2 - 1) + ((3 - 1) + (2 - 1)) * 2  # by hand: conv, pool, conv, pool
    assert enc.receptive_field == rf == len(rows) == len(cols)
    cy, cx = enc.region_centres(H, W)[i].tolist()
    assert (rows.min() + rows.max()) / 2 == cy and (cols.min() + cols.max()) / 2 == cx
    assert (cy, cx) == (2 * 4 + 1.5, 3 * 4 + 1.5)


def test_gradients_reach_every_parameter_and_the_image():
    enc = build(channels=[3, 4], out_dim=5, dropout=0.1)
    img = torch.randn(2, 3, 12, 12, dtype=torch.float64, requires_grad=True)
    regions, _ = enc(img)
    regions.pow(2).mean().backward()
    assert img.grad is not None and img.grad.abs().sum() > 0
    for name, p in enc.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("fields,field", [({"kernel": 2}, "kernel"), ({"channels": []}, "channels"),
                                          ({"channels": [4, 0]}, "channels"),
                                          ({"pool_size": 0}, "pool_size"), ({"out_dim": 0}, "out_dim"),
                                          ({"pooling": "min"}, "pooling")])
def test_bad_fields_are_config_errors_naming_the_field(fields, field):
    with pytest.raises(ConfigError, match=f"'{field}'"):
        build(**fields)


def test_bad_images_are_refused_clearly():
    enc = build(channels=[2, 2, 2])
    with pytest.raises(ValueError, match="too small.*at least 8×8"):
        enc(torch.randn(1, 3, 7, 20, dtype=torch.float64))


def test_pool_fields_left_unread_warn():
    import warnings

    from attnflow.io.console import AttnflowWarning

    with pytest.warns(AttnflowWarning, match=r"encoder 'cnn': pool_size=3 is unread: pooling=none"):
        build(pooling="none", pool_size=3)
    with pytest.warns(AttnflowWarning, match=r"encoder 'cnn': pooling=avg is unread: pool_size=1"):
        build(pooling="avg", pool_size=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AttnflowWarning)
        build(pooling="none")
        build(pooling="avg", pool_size=3)
