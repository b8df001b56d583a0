"""The captioning overlay (attnflow.viz.figures.caption_figure): its fixed size and panel count, α read on
the region grid the boxes give, the heat map's hottest pixel read back from the rendered figure,
and wrong shapes refused with the argument named."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from attnflow.viz.figures import CAPTION_SIZE, DPI, alpha_grid, caption_figure, figure_to_array

H, W, CELL = 48, 72, 24  # a 2 × 3 grid of 24-pixel cells: not square, so a transposition shows


def grid_boxes(rows: int = 2, cols: int = 3, cell: int = CELL) -> torch.Tensor:
    """Row-major [top, left, bottom, right) boxes, written out cell by cell (as an encoder's)."""
    return torch.tensor([[r * cell, c * cell, (r + 1) * cell, (c + 1) * cell]
                         for r in range(rows) for c in range(cols)])


def image_panels(fig) -> int:
    return sum(1 for ax in fig.axes if ax.images)


def test_one_panel_per_word_after_the_image_and_a_cap_with_a_count():
    alpha = torch.softmax(torch.randn(3, 6), -1)
    fig = caption_figure(torch.rand(3, H, W), ["a", "red", "circle"], alpha, grid_boxes())
    assert image_panels(fig) == 1 + 3
    assert [ax.get_title() for ax in fig.axes if ax.images] == ["image", "a", "red", "circle"]
    plt.close(fig)
    words = [f"w{i}" for i in range(20)]
    fig = caption_figure(torch.rand(3, H, W), words, torch.softmax(torch.randn(20, 6), -1),
                         grid_boxes(), title="caption")
    assert image_panels(fig) == 16  # the image and the first 15 words
    assert [ax.get_title() for ax in fig.axes if ax.images][-1] == "w14"
    assert "… 5 more" in fig._suptitle.get_text()
    plt.close(fig)
    fig = caption_figure(torch.rand(3, H, W), [], torch.zeros(0, 6), grid_boxes())  # ⟨eos⟩ first
    assert image_panels(fig) == 1
    plt.close(fig)


@pytest.mark.slow
def test_figure_size_does_not_depend_on_the_number_of_words():
    shapes = set()
    for T in (3, 12):
        fig = caption_figure(torch.rand(3, H, W), ["word"] * T,
                             torch.softmax(torch.randn(T, 6), -1), grid_boxes(), title=f"{T} words")
        shapes.add(figure_to_array(fig).shape)
    assert shapes == {(round(CAPTION_SIZE[1] * DPI), round(CAPTION_SIZE[0] * DPI), 3)}


def test_alpha_grid_puts_each_region_weight_in_its_box_cell():
    alpha = torch.rand(4, 6)
    grid = alpha_grid(alpha, grid_boxes())
    assert grid.shape == (4, 2, 3)
    for i, (top, left, _, _) in enumerate(grid_boxes().tolist()):  # cell of each box, by position
        assert torch.equal(grid[:, top // CELL, left // CELL], alpha[:, i])


def _panel(rgb: np.ndarray, ax) -> np.ndarray:
    """The pixels of the axes ``ax`` in the rendered figure ``rgb`` (rows top-down), 2 pixels in."""
    x0, y0, x1, y1 = ax.get_window_extent().extents
    height = rgb.shape[0]
    return rgb[int(np.ceil(height - y1)) + 2: int(height - y0) - 2, int(np.ceil(x0)) + 2: int(x1) - 2]


@pytest.mark.parametrize("hot", [4, 2])  # row 1 col 1; row 0 col 2
def test_the_hottest_pixel_of_the_overlay_lies_in_the_box_of_the_largest_alpha(hot):
    alpha = torch.full((1, 6), 0.04)
    alpha[0, hot] = 0.8
    # a black image: the brightness of a pixel is that of the heat map (inferno rises monotonically)
    fig = caption_figure(torch.zeros(3, H, W), ["circle"], alpha, grid_boxes())
    fig.canvas.draw()
    rgb = np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(float)
    word_ax = [ax for ax in fig.axes if ax.images][1]
    panel = _panel(rgb, word_ax).sum(-1)
    plt.close(fig)
    r, c = np.unravel_index(np.argmax(panel), panel.shape)
    y, x = (r + 2.5) * H / (panel.shape[0] + 4), (c + 2.5) * W / (panel.shape[1] + 4)  # image pixels
    top, left, bottom, right = grid_boxes()[hot].tolist()
    assert top <= y < bottom and left <= x < right, (y, x, (top, left, bottom, right))
    # and the cold regions stay dark: the far corner box is much darker than the hot box centre
    cold = 5 - hot if hot != 2 else 3
    t, l, b, rr = grid_boxes()[cold].tolist()
    sy, sx = panel.shape[0] / H, panel.shape[1] / W
    centre = lambda t, l, b, r: panel[int((t + b) / 2 * sy), int((l + r) / 2 * sx)]  # noqa: E731
    assert centre(t, l, b, rr) < 0.5 * centre(top, left, bottom, right)


def test_the_image_panel_shows_the_image():
    image = torch.zeros(3, H, W)
    image[0] = 1.0  # pure red
    fig = caption_figure(image, ["a"], torch.full((1, 6), 1 / 6), grid_boxes())
    fig.canvas.draw()
    rgb = np.asarray(fig.canvas.buffer_rgba())[..., :3]
    panel = _panel(rgb, fig.axes[0])
    plt.close(fig)
    assert (panel[..., 0] > 240).all() and (panel[..., 1:] < 15).all()


def test_column_major_boxes_are_refused_rather_than_drawn_in_the_wrong_cells():
    column_major = grid_boxes().reshape(2, 3, 4).transpose(0, 1).reshape(6, 4)
    with pytest.raises(AssertionError, match="row-major"):
        caption_figure(torch.rand(3, H, W), ["a", "red", "circle"], torch.rand(3, 6), column_major)
    plt.close("all")


def test_uniform_attention_stays_dark_and_pixels_outside_the_grid_are_not_painted():
    from attnflow.viz.figures import attention_overlay

    # the grid covers rows 0..47, columns 0..71 of a 50 × 80 image (as a CNN's floor leaves edges)
    heat = attention_overlay(torch.full((2, 6), 1 / 6), grid_boxes(), 50, 80)
    assert heat.shape == (2, 50, 80)
    assert torch.isnan(heat[:, 48:]).all() and torch.isnan(heat[:, :, 72:]).all()
    assert heat[:, :48, :72].max() < 1e-5  # no more than the uniform share anywhere: dark
    peaked = torch.tensor([[0.5, 0.1, 0.1, 0.1, 0.1, 0.1]])
    heat = attention_overlay(peaked, grid_boxes(), H, W)[0]
    assert heat[CELL // 2, CELL // 2] == pytest.approx(1.0, abs=0.05)  # the peak cell's centre
    assert (heat[:, 2 * CELL:] == 0).all()  # the far column, at the uniform share (well, below)
