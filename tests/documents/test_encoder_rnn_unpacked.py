"""rnn_unpacked gives the packed rnn encoder's outputs with the same weights; length 0 is fine."""

import pytest
import torch

from attnflow.blocks.encoders.rnn_unpacked import reverse_within_length
from attnflow.config.registry import ENCODERS


def test_reverse_within_length():
    x = torch.tensor([[1, 2, 3, 0], [4, 5, 0, 0], [0, 0, 0, 0]]).unsqueeze(-1)
    out = reverse_within_length(x, torch.tensor([3, 2, 0]))
    assert out.squeeze(-1).tolist() == [[3, 2, 1, 0], [5, 4, 0, 0], [0, 0, 0, 0]]


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_matches_packed_encoder(cell):
    torch.manual_seed(0)
    unpacked = ENCODERS.build({"name": "rnn_unpacked", "cell": cell, "hidden_dim": 6}, 4)
    packed = ENCODERS.build({"name": "rnn", "cell": cell, "hidden_dim": 6}, 4)
    state = {}
    for d, suffix in enumerate(["", "_reverse"]):
        for k, v in unpacked.layers[0][d].state_dict().items():
            state[k + suffix] = v
    packed.rnn.load_state_dict(state)
    x = torch.randn(3, 7, 4)
    lengths = torch.tensor([7, 3, 1])
    a, fa = unpacked(x, lengths)
    b, fb = packed(x, lengths)
    assert torch.allclose(a, b, atol=1e-5) and torch.allclose(fa, fb, atol=1e-5)
    assert torch.all(a[1, 3:] == 0)


def test_empty_rows_are_zero():
    enc = ENCODERS.build({"name": "rnn_unpacked", "hidden_dim": 3, "layers": 2}, 2)
    out, final = enc(torch.randn(2, 4, 2), torch.tensor([0, 2]))
    assert torch.all(out[0] == 0) and torch.all(final[0] == 0) and out.shape == (2, 4, 6)
