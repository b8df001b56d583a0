"""No positional encoding: the input comes back unchanged."""

import torch

from attnflow.config.registry import POSITIONALS


def test_identity():
    pe = POSITIONALS.build({"name": "none"}, 4)
    x = torch.randn(2, 3, 4)
    assert torch.equal(pe(x, offset=5), x)
    assert not pe.relative and not list(pe.parameters())
