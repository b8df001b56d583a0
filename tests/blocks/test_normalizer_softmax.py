"""SoftMax normaliser: α_i = exp(a_i) / Σ_k exp(a_k) over allowed keys (Bahdanau et al. 2015, eq. (6))."""

import math

import pytest
import torch

from attnflow.blocks.normalizers.softmax import SoftmaxNormalizer
from attnflow.config.registry import NORMALIZERS

BUILDERS = {
    "registry": lambda **kw: NORMALIZERS.build({"name": "softmax", **kw}),
    "class": lambda **kw: SoftmaxNormalizer(**kw),
}


def softmax_by_hand(scores, mask=None, temperature=1.0):
    """Row-wise exp(s/T)/Σ exp(s/T) over allowed keys, 0 elsewhere, with Python loops."""
    out = torch.zeros_like(scores)
    flat_s = scores.reshape(-1, scores.shape[-1])
    flat_m = None if mask is None else mask.expand(scores.shape).reshape(-1, scores.shape[-1])
    flat_o = out.view(-1, scores.shape[-1])
    for r in range(flat_s.shape[0]):
        allowed = [i for i in range(flat_s.shape[1]) if flat_m is None or bool(flat_m[r, i])]
        if not allowed:
            continue
        e = {i: math.exp(float(flat_s[r, i]) / temperature) for i in allowed}
        z = sum(e.values())
        for i in allowed:
            flat_o[r, i] = e[i] / z
    return out


def test_literal():
    norm = SoftmaxNormalizer()
    out = norm(torch.tensor([[0.0, math.log(3.0)]]))
    torch.testing.assert_close(out, torch.tensor([[0.25, 0.75]]))


@pytest.mark.parametrize("how", list(BUILDERS))
@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 4, 3, 6), (1, 1)])
def test_equals_exp_over_sum(how, shape):
    norm = BUILDERS[how]()
    assert norm.is_softmax
    s = 3 * torch.randn(*shape, dtype=torch.float64)
    out = norm(s)
    torch.testing.assert_close(out, softmax_by_hand(s), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(out.sum(-1), torch.ones(shape[:-1], dtype=torch.float64))


def test_mask_gives_exact_zeros_and_rows_sum_to_one():
    norm = SoftmaxNormalizer()
    s = torch.randn(3, 4, 6, dtype=torch.float64)
    mask = torch.rand(3, 4, 6) > 0.4
    mask[..., 0] = True  # every row has an allowed key
    out = norm(s, mask)
    assert (out[~mask] == 0).all()
    assert (out[mask] > 0).all()
    torch.testing.assert_close(out.sum(-1), torch.ones(3, 4, dtype=torch.float64))
    torch.testing.assert_close(out, softmax_by_hand(s, mask), rtol=1e-12, atol=1e-14)


def test_broadcast_padding_mask():
    norm = SoftmaxNormalizer()
    s = torch.randn(2, 3, 5, dtype=torch.float64)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]]).unsqueeze(1)  # (B, 1, Tk)
    out = norm(s, mask)
    assert out.shape == (2, 3, 5)
    assert (out[1, :, 2:] == 0).all()
    torch.testing.assert_close(out, softmax_by_hand(s, mask), rtol=1e-12, atol=1e-14)


def test_masked_large_scores_are_ignored():
    norm = SoftmaxNormalizer()
    s = torch.tensor([[1.0, 1e30, 1.0]])
    out = norm(s, torch.tensor([[True, False, True]]))
    torch.testing.assert_close(out, torch.tensor([[0.5, 0.0, 0.5]]))


def test_fully_masked_row_gives_zeros_not_nan():
    norm = SoftmaxNormalizer()
    s = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(2, 3, 4, dtype=torch.bool)
    mask[1, 2] = False
    out = norm(s, mask)
    assert torch.isfinite(out).all()
    assert (out[1, 2] == 0).all()
    torch.testing.assert_close(out[0].sum(-1), torch.ones(3, dtype=torch.float64))
    (out * torch.randn_like(out)).sum().backward()
    assert torch.isfinite(s.grad).all()
    assert (s.grad[1, 2] == 0).all()


@pytest.mark.parametrize("how", list(BUILDERS))
@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_temperature(how, temperature):
    norm = BUILDERS[how](temperature=temperature)
    assert not norm.is_softmax  # not plain SoftMax: no fused path
    s = torch.randn(2, 3, 4, dtype=torch.float64)
    mask = torch.tensor([True, True, False, True])
    torch.testing.assert_close(norm(s, mask), softmax_by_hand(s, mask, temperature),
                               rtol=1e-12, atol=1e-14)


def test_bad_temperature():
    from attnflow.config.registry import NORMALIZERS, ConfigError

    with pytest.raises(ConfigError, match="temperature"):
        NORMALIZERS.build({"name": "softmax", "temperature": 0.0})


def test_masked_softmax_empty_rows_are_zero_with_zero_gradients():
    from attnflow.blocks.normalizers.softmax import masked_softmax

    scores = torch.randn(2, 4, requires_grad=True)
    mask = torch.tensor([[True, True, False, False], [False] * 4])  # row 2: an empty sentence
    w = masked_softmax(scores, mask)
    expected = torch.cat([torch.softmax(scores[0, :2], -1), torch.zeros(2)])
    torch.testing.assert_close(w[0], expected)
    assert torch.equal(w[1], torch.zeros(4))
    (w * torch.randn(2, 4)).sum().backward()
    assert torch.isfinite(scores.grad).all() and torch.equal(scores.grad[1], torch.zeros(4))
    assert torch.equal(scores.grad[0, 2:], torch.zeros(2))
