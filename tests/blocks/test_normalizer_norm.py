"""Plain norm: α_i = p_i / Σ_k p_k over a positive score; with p = exp(a) it is SoftMax."""

import math

import pytest
import torch

from attnflow.blocks.normalizers.norm import NormNormalizer
from attnflow.config.registry import NORMALIZERS, ConfigError

BUILDERS = {
    "registry": lambda **kw: NORMALIZERS.build({"name": "norm", **kw}),
    "class": lambda **kw: NormNormalizer(**kw),
}

POSITIVE = {
    "exp": math.exp,
    "relu": lambda x: max(x, 0.0),
    "softplus": lambda x: math.log1p(math.exp(x)),
    "none": lambda x: x,
}


def norm_by_hand(scores, positive, mask=None):
    """p = positive(s) on allowed keys, 0 elsewhere; p / Σ p (a zero row stays zero)."""
    f = POSITIVE[positive]
    out = torch.zeros_like(scores)
    n = scores.shape[-1]
    flat_s = scores.reshape(-1, n)
    flat_m = None if mask is None else mask.expand(scores.shape).reshape(-1, n)
    flat_o = out.view(-1, n)
    for r in range(flat_s.shape[0]):
        p = [f(float(flat_s[r, i])) if flat_m is None or bool(flat_m[r, i]) else 0.0 for i in range(n)]
        z = sum(p)
        if z > 0:
            for i in range(n):
                flat_o[r, i] = p[i] / z
    return out


def softmax_by_hand(scores):
    e = [[math.exp(float(x)) for x in row] for row in scores.reshape(-1, scores.shape[-1])]
    return torch.tensor([[x / sum(row) for x in row] for row in e], dtype=scores.dtype).reshape(scores.shape)


def test_literal_none():
    out = NormNormalizer(positive="none")(torch.tensor([[1.0, 3.0, 0.0, 4.0]]))
    torch.testing.assert_close(out, torch.tensor([[0.125, 0.375, 0.0, 0.5]]))


def test_literal_relu():
    out = NormNormalizer(positive="relu")(torch.tensor([[-5.0, 1.0, 3.0]]))
    torch.testing.assert_close(out, torch.tensor([[0.0, 0.25, 0.75]]))


def test_exp_of_dot_product_makes_norm_softmax():
    """With a(h, h′) = exp(hᵀh′), norm becomes SoftMax of hᵀh′."""
    h = torch.randn(2, 5, 4, dtype=torch.float64)  # keys
    hq = torch.randn(2, 3, 4, dtype=torch.float64)  # queries
    dots = torch.einsum("bqd,bkd->bqk", hq, h)
    p = torch.exp(dots)
    out = NormNormalizer(positive="none")(p)
    torch.testing.assert_close(out, softmax_by_hand(dots), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(out, torch.softmax(dots, -1), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("how", list(BUILDERS))
def test_exp_equals_softmax(how):
    s = 2 * torch.randn(3, 4, 5, dtype=torch.float64)
    out = BUILDERS[how](positive="exp")(s)
    torch.testing.assert_close(out, softmax_by_hand(s), rtol=1e-12, atol=1e-14)


def test_exp_does_not_overflow():
    s = torch.tensor([[1000.0, 1000.0 + math.log(3.0)]], dtype=torch.float64)
    out = NormNormalizer(positive="exp")(s)
    torch.testing.assert_close(out, torch.tensor([[0.25, 0.75]], dtype=torch.float64))


@pytest.mark.parametrize("how", list(BUILDERS))
@pytest.mark.parametrize("positive", ["exp", "relu", "softplus"])
@pytest.mark.parametrize("masked", [False, True])
def test_matches_loop(how, positive, masked):
    norm = BUILDERS[how](positive=positive)
    assert not norm.is_softmax
    s = torch.randn(2, 3, 6, dtype=torch.float64)
    s[..., 0] = s[..., 0].abs() + 0.1  # every row has a positive allowed score (relu)
    mask = None
    if masked:
        mask = torch.rand(2, 3, 6) > 0.4
        mask[..., 0] = True
    out = norm(s, mask)
    torch.testing.assert_close(out, norm_by_hand(s, positive, mask), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(out.sum(-1), torch.ones(2, 3, dtype=torch.float64))
    assert (out >= 0).all()
    if masked:
        assert (out[~mask] == 0).all()


def test_default_is_softplus():
    norm = NORMALIZERS.build({"name": "norm"})
    assert norm.positive == "softplus"
    s = torch.randn(2, 4, dtype=torch.float64)
    torch.testing.assert_close(norm(s), norm_by_hand(s, "softplus"), rtol=1e-10, atol=1e-12)


def test_none_with_positive_scores_and_mask():
    p = torch.rand(2, 3, 5, dtype=torch.float64) + 0.1
    mask = torch.tensor([True, False, True, True, False])
    out = NormNormalizer(positive="none")(p, mask)
    torch.testing.assert_close(out, norm_by_hand(p, "none", mask), rtol=1e-12, atol=1e-14)
    assert (out[..., ~mask] == 0).all()


@pytest.mark.parametrize("positive", ["exp", "relu", "softplus", "none"])
def test_fully_masked_row_gives_zeros(positive):
    s = torch.rand(2, 3, 4, dtype=torch.float64) + 0.1
    mask = torch.ones(2, 3, 4, dtype=torch.bool)
    mask[0, 1] = False
    out = NormNormalizer(positive=positive)(s, mask)
    assert torch.isfinite(out).all()
    assert (out[0, 1] == 0).all()
    torch.testing.assert_close(out[1].sum(-1), torch.ones(3, dtype=torch.float64))


def test_bad_positive_is_config_error():
    with pytest.raises(ConfigError, match="positive"):
        NORMALIZERS.build({"name": "norm", "positive": "square"})
