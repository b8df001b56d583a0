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
