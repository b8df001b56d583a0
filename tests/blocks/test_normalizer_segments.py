"""The normalisers' segment form: weights over the entries (edges) that share an index (target
node), as graph attention needs them — against a hand computation on a tiny graph."""

import math

import pytest
import torch

from attnflow.blocks.normalizers.base import Normalizer
from attnflow.blocks.normalizers.norm import NormNormalizer
from attnflow.blocks.normalizers.softmax import SoftmaxNormalizer

# 7 edges into 4 nodes (node 3 has no edge), in no particular order; 2 heads
INDEX = torch.tensor([0, 1, 0, 2, 1, 1, 0])
SCORES = torch.tensor([[0.5, -1.0], [2.0, 0.0], [-0.3, 3.0], [1.2, -2.0],
                       [0.0, 0.7], [-1.5, 1.1], [0.9, -0.4]], dtype=torch.float64)

POSITIVE = {"exp": math.exp, "relu": lambda x: max(x, 0.0),
            "softplus": lambda x: math.log1p(math.exp(x)), "none": lambda x: x}


def by_hand(scores, index, p):
    """w[e, j] = p(s[e, j]) / Σ_{e′: index[e′] = index[e]} p(s[e′, j]), one edge at a time."""
    out = torch.zeros_like(scores)
    for e in range(scores.shape[0]):
        for j in range(scores.shape[1]):
            total = sum(p(float(scores[f, j])) for f in range(scores.shape[0]) if index[f] == index[e])
            out[e, j] = p(float(scores[e, j])) / total if total > 0 else 0.0
    return out


def test_softmax_per_target_node():
    out = SoftmaxNormalizer().normalize_segments(SCORES, INDEX, 4)
    torch.testing.assert_close(out, by_hand(SCORES, INDEX, math.exp))
    sums = torch.zeros(4, 2, dtype=torch.float64).index_add_(0, INDEX, out)
    torch.testing.assert_close(sums, torch.tensor([[1.0, 1.0]] * 3 + [[0.0, 0.0]], dtype=torch.float64))


def test_softmax_temperature_divides_the_scores():
    out = SoftmaxNormalizer(temperature=2.0).normalize_segments(SCORES, INDEX, 4)
    torch.testing.assert_close(out, by_hand(SCORES / 2, INDEX, math.exp))


@pytest.mark.parametrize("positive", ["softplus", "exp", "relu"])
def test_norm_per_target_node(positive):
    out = NormNormalizer(positive=positive).normalize_segments(SCORES, INDEX, 4)
    torch.testing.assert_close(out, by_hand(SCORES, INDEX, POSITIVE[positive]))
    if positive == "relu":  # node 2's one edge has a negative score in head 1: weight 0, not NaN
        assert out[3, 1] == 0


def test_norm_none_uses_the_scores_as_they_are_and_eps_keeps_a_zero_segment_at_zero():
    scores = SCORES.abs()
    scores[INDEX == 2] = 0.0  # node 2: all p = 0, so its weights stay 0 (not NaN)
    out = NormNormalizer(positive="none").normalize_segments(scores, INDEX, 4)
    torch.testing.assert_close(out, by_hand(scores, INDEX, POSITIVE["none"]))
    assert torch.equal(out[INDEX == 2], torch.zeros(1, 2, dtype=torch.float64))


def test_norm_exp_is_the_segment_softmax_even_for_huge_scores():
    big = SCORES * 1000  # exp overflows without the per-segment shift
    out = NormNormalizer(positive="exp").normalize_segments(big, INDEX, 4)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, SoftmaxNormalizer().normalize_segments(big, INDEX, 4))


def test_segment_form_matches_the_row_form_on_a_dense_neighbourhood():
    """One segment holding all edges is one row: normalize_segments == forward over that row."""
    s = torch.randn(6, 3)
    for norm in (SoftmaxNormalizer(), NormNormalizer(), NormNormalizer(positive="exp")):
        seg = norm.normalize_segments(s, torch.zeros(6, dtype=torch.long), 1)
        torch.testing.assert_close(seg, norm(s.t()).t())


def test_gradients_flow_through_the_segment_form():
    s = SCORES.clone().requires_grad_()
    w = torch.arange(14.0, dtype=torch.float64).view(7, 2)
    (NormNormalizer().normalize_segments(s, INDEX, 4) * w).sum().backward()
    assert torch.isfinite(s.grad).all() and s.grad.abs().sum() > 0


def test_has_segment_form():
    class RowOnly(Normalizer):
        def forward(self, scores, mask=None):
            return scores

    assert SoftmaxNormalizer.has_segment_form() and NormNormalizer.has_segment_form()
    assert not RowOnly.has_segment_form()
    with pytest.raises(NotImplementedError, match="no segment form"):
        RowOnly().normalize_segments(SCORES, INDEX, 4)
