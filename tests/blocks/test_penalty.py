"""Diversity penalty P = ‖AAᵀ − I‖²_F (Lin et al. 2017, the penalization term)."""

import pytest
import torch

from attnflow.blocks.attention.penalty import diversity_penalty


def frobenius_by_hand(A):
    """‖AAᵀ − I‖²_F of one J × n matrix, with loops."""
    J, n = A.shape
    total = 0.0
    for s in range(J):
        for j in range(J):
            g = sum(float(A[s, i]) * float(A[j, i]) for i in range(n))
            total += (g - (1.0 if s == j else 0.0)) ** 2
    return total


@pytest.mark.parametrize("B,J,n", [(1, 2, 3), (4, 3, 5), (3, 1, 4)])
def test_random_matches_loop(B, J, n):
    A = torch.softmax(torch.randn(B, J, n, dtype=torch.float64), -1)
    expected = sum(frobenius_by_hand(A[b]) for b in range(B)) / B
    out = diversity_penalty(A)
    assert out.shape == ()
    assert out.item() == pytest.approx(expected, rel=1e-12)


def test_orthogonal_one_hot_rows_give_zero():
    A = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    assert diversity_penalty(A).item() == 0.0


def test_identical_rows_literal():
    # AAᵀ = [[1, 1], [1, 1]], minus I = [[0, 1], [1, 0]] -> 2
    A = torch.tensor([[[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]])
    assert diversity_penalty(A).item() == pytest.approx(2.0)


def test_uniform_rows_literal():
    # J = 2 rows of 1/2 over n = 2: every entry of AAᵀ is 1/2 -> (−1/2)² · 2 + (1/2)² · 2 = 1
    A = torch.full((1, 2, 2), 0.5)
    assert diversity_penalty(A).item() == pytest.approx(1.0)


def test_positive_for_non_orthogonal():
    A = torch.softmax(torch.randn(5, 3, 6), -1)
    assert diversity_penalty(A).item() > 0


def test_valid_mask_excludes_matrices():
    A = torch.softmax(torch.randn(4, 3, 5, dtype=torch.float64), -1)
    A[2] = 100.0  # huge, would dominate if counted
    valid = torch.tensor([True, True, False, True])
    expected = sum(frobenius_by_hand(A[b]) for b in (0, 1, 3)) / 3
    assert diversity_penalty(A, valid).item() == pytest.approx(expected, rel=1e-12)


def test_valid_mask_with_extra_leading_dims():
    A = torch.softmax(torch.randn(2, 3, 4, 5, dtype=torch.float64), -1)  # (B, T, J, n)
    valid = torch.tensor([[True, False, True], [False, False, True]])
    picks = [(0, 0), (0, 2), (1, 2)]
    expected = sum(frobenius_by_hand(A[b, t]) for b, t in picks) / len(picks)
    assert diversity_penalty(A, valid).item() == pytest.approx(expected, rel=1e-12)
    all_expected = sum(frobenius_by_hand(A[b, t]) for b in range(2) for t in range(3)) / 6
    assert diversity_penalty(A).item() == pytest.approx(all_expected, rel=1e-12)


def test_no_valid_matrix_gives_zero():
    A = torch.rand(3, 2, 4)
    out = diversity_penalty(A, torch.zeros(3, dtype=torch.bool))
    assert torch.isfinite(out) and out.item() == 0.0


def test_gradient_flows():
    logits = torch.randn(2, 3, 4, requires_grad=True)
    diversity_penalty(torch.softmax(logits, -1)).backward()
    assert torch.isfinite(logits.grad).all() and logits.grad.abs().sum() > 0


# -- doubly stochastic regulariser (Xu et al. 2015, eq. (14)) ---------------------------------------
from attnflow.blocks.attention.penalty import doubly_stochastic_penalty  # noqa: E402


def doubly_stochastic_by_hand(alpha, valid):
    """Σ_i (1 − Σ_t α_ti)² of one caption, α (T, J, L) averaged over heads, with loops."""
    T, J, L = alpha.shape
    total = 0.0
    for i in range(L):
        received = 0.0
        for t in range(T):
            if valid[t]:
                received += sum(float(alpha[t, j, i]) for j in range(J)) / J
        total += (1.0 - received) ** 2
    return total


@pytest.mark.parametrize("B,T,J,L", [(1, 3, 1, 4), (3, 5, 2, 6)])
def test_doubly_stochastic_matches_loop_with_padding(B, T, J, L):
    alpha = torch.softmax(torch.randn(B, T, J, L, dtype=torch.float64), -1)
    lengths = torch.randint(1, T + 1, (B,))
    valid = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)
    expected = sum(doubly_stochastic_by_hand(alpha[b], valid[b]) for b in range(B)) / B
    assert doubly_stochastic_penalty(alpha, valid).item() == pytest.approx(expected, rel=1e-12)
    # padding counts when no mask is given: a different value
    full = sum(doubly_stochastic_by_hand(alpha[b], [True] * T) for b in range(B)) / B
    assert doubly_stochastic_penalty(alpha).item() == pytest.approx(full, rel=1e-12)


def test_doubly_stochastic_zero_when_every_region_gets_one_unit():
    """T = L steps each attending to a different region: every region receives exactly 1."""
    L = 4
    alpha = torch.eye(L).view(1, L, 1, L)
    assert doubly_stochastic_penalty(alpha).item() == 0.0
    # always the same region: that one receives L, the others 0 → (1 − L)² + (L − 1)·1
    same = torch.zeros(1, L, 1, L)
    same[..., 0] = 1.0
    assert doubly_stochastic_penalty(same).item() == pytest.approx((1 - L) ** 2 + (L - 1))


def test_doubly_stochastic_gradient_pushes_towards_unattended_regions():
    scores = torch.zeros(1, 2, 1, 3, requires_grad=True)
    with torch.no_grad():
        scores[..., 0] = 3.0  # both steps look at region 0
    doubly_stochastic_penalty(torch.softmax(scores, -1)).backward()
    assert (scores.grad[..., 0] > 0).all() and (scores.grad[..., 1:] < 0).all()
