"""Shared fixtures for the block tests: a fixed seed and a by-hand pairwise scorer loop."""

import itertools

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture
def by_hand():
    """``by_hand(fn, query, keys)``: scores[..., t, i] = fn(query[..., t, :], keys[..., i, :]).

    An explicit Python loop over every leading index, every query t and every key i, so a test
    can state a scorer's formula for one pair of vectors and nothing else.
    """

    def run(fn, query, keys):
        lead = query.shape[:-2]
        assert keys.shape[:-2] == lead
        tq, tk = query.shape[-2], keys.shape[-2]
        out = torch.empty(*lead, tq, tk, dtype=query.dtype)
        for idx in itertools.product(*(range(n) for n in lead)):
            for t in range(tq):
                for i in range(tk):
                    out[idx + (t, i)] = fn(query[idx + (t,)], keys[idx + (i,)])
        return out

    return run
