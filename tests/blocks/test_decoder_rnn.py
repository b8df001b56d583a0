"""RNNenc decoder (no attention, c ≡ h_n): s_t = f(s_{t−1}, [E y_{t−1}; c]) (Cho et al. 2014)."""

import pytest
import torch

from attnflow.config.registry import DECODERS

V, MEM, INIT = 9, 6, 5


def build(cell="gru"):
    return DECODERS.build({"name": "rnn", "cell": cell, "embed_dim": 4, "hidden_dim": 7}, V, MEM, INIT).double().eval()


def inputs(B=3, S=5, T=4):
    return (torch.randint(0, V, (B, T)), torch.randn(B, S, MEM, dtype=torch.float64),
            torch.ones(B, S, dtype=torch.bool), torch.randn(B, INIT, dtype=torch.float64))


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_shapes_no_weights_and_step_equals_forward(cell):
    dec = build(cell)
    tgt_in, memory, mask, init = inputs()
    logits, w = dec(tgt_in, memory, mask, init, need_weights=True)
    assert logits.shape == (3, 4, V) and w is None
    state = dec.start(memory, mask, init)
    for t in range(4):
        lg, state, wt = dec.step(tgt_in[:, t], state, need_weights=True)
        assert wt is None
        torch.testing.assert_close(lg, logits[:, t])


def test_only_the_final_state_matters():
    dec = build()
    tgt_in, memory, mask, init = inputs()
    a, _ = dec(tgt_in, memory, mask, init)
    b, _ = dec(tgt_in, torch.randn_like(memory), mask, init)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    c, _ = dec(tgt_in, memory, mask, init + 1)
    assert not torch.allclose(a, c)


def test_matches_hand_recurrence_and_is_causal():
    dec = build()
    tgt_in, memory, mask, init = inputs()
    logits, _ = dec(tgt_in, memory, mask, init)
    cell = torch.nn.GRUCell(4 + INIT, 7).double()
    cell.weight_ih.data, cell.weight_hh.data = dec.rnn.weight_ih_l0.data, dec.rnn.weight_hh_l0.data
    cell.bias_ih.data, cell.bias_hh.data = dec.rnn.bias_ih_l0.data, dec.rnn.bias_hh_l0.data
    s = torch.tanh(dec.init(init))
    for t in range(4):
        e = dec.embedding(tgt_in[:, t])
        s = cell(torch.cat([e, init], -1), s)
        torch.testing.assert_close(logits[:, t], dec.out(torch.cat([s, init, e], -1)))
    changed = tgt_in.clone()
    changed[:, 2] = (changed[:, 2] + 1) % V
    out, _ = dec(changed, memory, mask, init)
    torch.testing.assert_close(out[:, :2], logits[:, :2], rtol=0, atol=0)
