"""dropout_nonzero: F.dropout's distribution on bag-of-words features with draws for the nonzero
entries only (attnflow/blocks/graph/sparse_input.py)."""

import pytest
import torch
import torch.nn.functional as F

from attnflow.blocks.graph.sparse_input import DENSE_ABOVE, dropout_nonzero


def bag_of_words(n=400, f=300, density=0.02, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, f, generator=g) * (torch.rand(n, f, generator=g) < density)


def test_identity_in_eval_and_at_p_zero():
    x = bag_of_words()
    assert dropout_nonzero(x, 0.6, training=False) is x
    assert dropout_nonzero(x, 0.0, training=True) is x
    assert (dropout_nonzero(x, 1.0, training=True) == 0).all()


def test_zeros_stay_zero_and_kept_entries_are_scaled_by_one_over_keep_probability():
    p = 0.6
    x = bag_of_words()
    torch.manual_seed(1)
    y = dropout_nonzero(x, p, training=True)
    assert (y[x == 0] == 0).all()
    nz = x != 0
    kept = y[nz] != 0
    torch.testing.assert_close(y[nz][kept], x[nz][kept] / (1 - p))
    # a Binomial(nnz, 1 − p) count of kept entries: within 5 standard deviations of its mean
    n = int(nz.sum())
    mean, sd = n * (1 - p), (n * p * (1 - p)) ** 0.5
    assert abs(int(kept.sum()) - mean) < 5 * sd


def test_unbiased_like_dropout_over_many_draws():
    x = bag_of_words(n=50, f=40, density=0.05)
    torch.manual_seed(2)
    avg = torch.stack([dropout_nonzero(x, 0.5, training=True) for _ in range(4000)]).mean(0)
    # each entry: mean of 4000 draws of x·2·Bernoulli(½): sd x/√4000 ≈ 0.016·x
    torch.testing.assert_close(avg, x, atol=0.08, rtol=0.0)


def test_draws_as_many_random_numbers_as_nonzeros():
    """The point of it: nnz Bernoulli draws, not N·F (the next draw from the generator tells)."""
    x = bag_of_words()
    nnz = int((x != 0).sum())
    torch.manual_seed(3)
    dropout_nonzero(x, 0.6, training=True)
    after = torch.rand(1)
    torch.manual_seed(3)
    torch.empty(nnz).bernoulli_(0.4)
    assert torch.equal(after, torch.rand(1))


@pytest.mark.parametrize("dense_reason", ["density", "requires_grad"])
def test_dense_or_activation_inputs_take_f_dropout(dense_reason):
    x = bag_of_words(density=min(1.0, DENSE_ABOVE * 3) if dense_reason == "density" else 0.02)
    if dense_reason == "requires_grad":
        x.requires_grad_(True)
    torch.manual_seed(4)
    y = dropout_nonzero(x, 0.6, training=True)
    torch.manual_seed(4)
    torch.testing.assert_close(y, F.dropout(x, p=0.6, training=True))
    if dense_reason == "requires_grad":
        y.sum().backward()
        assert x.grad is not None
