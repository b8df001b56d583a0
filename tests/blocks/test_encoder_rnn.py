"""Recurrent encoder: RNN/GRU/LSTM, optionally bidirectional, h_j = [h→_j; h←_j] (Bahdanau et al. 2015, §3.2)."""

import pytest
import torch
from torch import nn

from attnflow.blocks.encoders.rnn import RNNEncoder
from attnflow.config.registry import ENCODERS, ConfigError

CELLS = ["gru", "lstm", "rnn"]
TORCH_CELLS = {"gru": nn.GRU, "lstm": nn.LSTM, "rnn": nn.RNN}


def build(cell, bidirectional, hidden=5, layers=1, input_dim=3):
    return ENCODERS.build({"name": "rnn", "cell": cell, "hidden_dim": hidden, "layers": layers,
                           "bidirectional": bidirectional}, input_dim).double()


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("layers", [1, 2])
def test_shapes(cell, bidirectional, layers):
    enc = build(cell, bidirectional, hidden=5, layers=layers)
    assert isinstance(enc, RNNEncoder)
    dirs = 2 if bidirectional else 1
    assert enc.output_dim == 5 * dirs
    x = torch.randn(3, 7, 3, dtype=torch.float64)
    out, final = enc(x, torch.tensor([7, 4, 2]))
    assert out.shape == (3, 7, 5 * dirs)
    assert final.shape == (3, 5 * dirs)


def test_class_defaults():
    enc = RNNEncoder(4)
    assert isinstance(enc.rnn, nn.GRU) and enc.rnn.bidirectional and enc.output_dim == 256


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("bidirectional", [True, False])
def test_padding_is_zero_and_does_not_leak(cell, bidirectional):
    enc = build(cell, bidirectional, layers=2)
    lengths = [3, 7, 5]  # unsorted on purpose
    x = torch.randn(3, 7, 3, dtype=torch.float64)
    out, final = enc(x, torch.tensor(lengths))
    x_noisy = x.clone()
    for b, L in enumerate(lengths):
        assert (out[b, L:] == 0).all()
        assert (out[b, :L] != 0).any(dim=-1).all()
        x_noisy[b, L:] = 100 * torch.randn(7 - L, 3, dtype=torch.float64)
        alone_out, alone_final = enc(x[b:b + 1, :L], torch.tensor([L]))
        torch.testing.assert_close(out[b:b + 1, :L], alone_out, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(final[b:b + 1], alone_final, rtol=1e-10, atol=1e-12)
    # what stands at padded positions does not matter either
    out2, final2 = enc(x_noisy, torch.tensor(lengths))
    torch.testing.assert_close(out2, out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(final2, final, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("layers", [1, 2])
def test_final_is_forward_last_and_backward_first(cell, layers):
    H = 4
    enc = build(cell, True, hidden=H, layers=layers)
    lengths = [2, 6, 4]
    x = torch.randn(3, 6, 3, dtype=torch.float64)
    out, final = enc(x, torch.tensor(lengths))
    for b, L in enumerate(lengths):
        torch.testing.assert_close(final[b, :H], out[b, L - 1, :H])  # h→ at the last real token
        torch.testing.assert_close(final[b, H:], out[b, 0, H:])  # h← at the first token


@pytest.mark.parametrize("cell", CELLS)
def test_final_unidirectional_is_last_real_output(cell):
    enc = build(cell, False, hidden=4)
    lengths = [2, 6, 4]
    x = torch.randn(3, 6, 3, dtype=torch.float64)
    out, final = enc(x, torch.tensor(lengths))
    for b, L in enumerate(lengths):
        torch.testing.assert_close(final[b], out[b, L - 1])


@pytest.mark.parametrize("cell", CELLS)
def test_directions_by_hand(cell):
    """The forward half is a plain RNN over x_1..x_L, the backward half one over x_L..x_1."""
    H = 4
    enc = build(cell, True, hidden=H)
    fwd = TORCH_CELLS[cell](3, H, batch_first=True).double()
    bwd = TORCH_CELLS[cell](3, H, batch_first=True).double()
    with torch.no_grad():
        for name, p in fwd.named_parameters():
            p.copy_(getattr(enc.rnn, name))
        for name, p in bwd.named_parameters():
            p.copy_(getattr(enc.rnn, name + "_reverse"))
    lengths = [5, 2, 3]
    x = torch.randn(3, 5, 3, dtype=torch.float64)
    out, _ = enc(x, torch.tensor(lengths))
    for b, L in enumerate(lengths):
        seq = x[b:b + 1, :L]
        f_out, _ = fwd(seq)
        b_out, _ = bwd(seq.flip(1))
        torch.testing.assert_close(out[b, :L, :H], f_out[0], rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(out[b, :L, H:], b_out[0].flip(0), rtol=1e-10, atol=1e-12)


def test_bad_cell_is_config_error():
    with pytest.raises(ConfigError, match="cell"):
        ENCODERS.build({"name": "rnn", "cell": "transformer"}, 4)


@pytest.mark.parametrize("name", ["rnn", "rnn_unpacked"])
def test_dropout_with_one_layer_warns_as_unread(name):
    import warnings

    from attnflow.io.console import AttnflowWarning

    with pytest.warns(AttnflowWarning, match=rf"'{name}': dropout=0.3 is unread: .*layers=1"):
        ENCODERS.build({"name": name, "dropout": 0.3}, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AttnflowWarning)
        ENCODERS.build({"name": name}, 4)
        ENCODERS.build({"name": name, "dropout": 0.3, "layers": 2}, 4)
