"""Luong decoder: global/local attention from h_t, input feeding, the Gaussian window (Luong, Pham & Manning 2015, §3)."""

import math

import pytest
import torch

from attnflow.blocks.decoders.luong import LuongDecoder
from attnflow.config.registry import DECODERS, ConfigError

V, MEM, INIT, EMB, HID = 11, 8, 5, 4, 8


def build(alignment="global", cell="lstm", input_feed=True, scorer="general", window=1, **kw):
    dec = DECODERS.build({"name": "luong", "cell": cell, "embed_dim": EMB, "hidden_dim": HID,
                          "alignment": alignment, "window": window, "input_feed": input_feed,
                          "attention": {"name": "single", "scorer": {"name": scorer}}, **kw},
                         V, MEM, INIT)
    return dec.double().eval()


def inputs(B=3, S=7, T=6, lengths=(7, 4, 1)):
    memory = torch.randn(B, S, MEM, dtype=torch.float64)
    mask = torch.arange(S) < torch.tensor(lengths).unsqueeze(-1)
    memory = memory * mask.unsqueeze(-1)
    init = torch.randn(B, INIT, dtype=torch.float64)
    return torch.randint(0, V, (B, T)), memory, mask, init


@pytest.mark.parametrize("alignment", ["global", "local_m", "local_p"])
@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("input_feed", [True, False])
def test_shapes_padding_and_step_equals_forward(alignment, cell, input_feed):
    dec = build(alignment, cell, input_feed)
    tgt_in, memory, mask, init = inputs()
    logits, w = dec(tgt_in, memory, mask, init, need_weights=True)
    assert logits.shape == (3, 6, V) and w.shape == (3, 6, 1, 7)
    assert (w.masked_select(~mask.view(3, 1, 1, 7)) == 0).all()
    state = dec.start(memory, mask, init)
    for t in range(6):
        lg, state, wt = dec.step(tgt_in[:, t], state, need_weights=True)
        torch.testing.assert_close(lg, logits[:, t])
        torch.testing.assert_close(wt, w[:, t])
    no_w, none = dec(tgt_in, memory, mask, init)
    assert none is None
    torch.testing.assert_close(no_w, logits)


@pytest.mark.parametrize("alignment", ["global", "local_p"])
@pytest.mark.parametrize("input_feed", [True, False])
def test_causal(alignment, input_feed):
    dec = build(alignment, input_feed=input_feed)
    tgt_in, memory, mask, init = inputs()
    base, _ = dec(tgt_in, memory, mask, init)
    changed = tgt_in.clone()
    changed[:, 3] = (changed[:, 3] + 1) % V
    out, _ = dec(changed, memory, mask, init)
    torch.testing.assert_close(out[:, :3], base[:, :3], rtol=0, atol=0)
    assert not torch.allclose(out[:, 3], base[:, 3])


def test_global_weights_sum_to_one_and_match_general_score():
    dec = build("global", input_feed=False)
    tgt_in, memory, mask, init = inputs()
    _, w = dec(tgt_in, memory, mask, init, need_weights=True)
    torch.testing.assert_close(w.sum(-1), torch.ones(3, 6, 1, dtype=torch.float64))
    # by hand: h_t from the RNN alone (no input feeding), score h_tᵀ W_a h̄_s (general)
    h0 = torch.tanh(dec.init(init))
    states, _ = dec.rnn(dec.embedding(tgt_in), (h0.unsqueeze(0), torch.zeros_like(h0).unsqueeze(0)))
    W = dec.attention.scorer.W.weight  # general: kᵀ W q
    for b in range(3):
        L = int(mask[b].sum())
        for t in range(6):
            scores = torch.stack([memory[b, s] @ (W @ states[b, t]) for s in range(L)])
            torch.testing.assert_close(w[b, t, 0, :L], torch.softmax(scores, 0))


@pytest.mark.parametrize("alignment", ["local_m", "local_p"])
@pytest.mark.parametrize("D", [1, 2])
def test_local_weights_zero_outside_window_and_gaussian(alignment, D):
    dec = build(alignment, input_feed=False, window=D)
    tgt_in, memory, mask, init = inputs(S=9, T=8, lengths=(9, 6, 1))
    _, w = dec(tgt_in, memory, mask, init, need_weights=True)
    w = w[:, :, 0]
    h0 = torch.tanh(dec.init(init))
    states, _ = dec.rnn(dec.embedding(tgt_in), (h0.unsqueeze(0), torch.zeros_like(h0).unsqueeze(0)))
    W = dec.attention.scorer.W.weight
    for b in range(3):
        L = int(mask[b].sum())
        for t in range(8):
            if alignment == "local_m":
                p = float(min(t, L - 1))
            else:
                p = (L - 1) / (1 + math.exp(-float(dec.v_p.weight[0] @ torch.tanh(dec.W_p.weight @ states[b, t]))))
            inside = [s for s in range(L) if abs(s - p) <= D]
            assert inside, "the window always holds a word"
            for s in range(9):
                if s not in inside:
                    assert w[b, t, s] == 0
            scores = torch.stack([memory[b, s] @ (W @ states[b, t]) for s in inside])
            gauss = torch.tensor([math.exp(-(s - p) ** 2 / (2 * (D / 2) ** 2)) for s in inside],
                                 dtype=torch.float64)
            torch.testing.assert_close(w[b, t, inside], torch.softmax(scores, 0) * gauss)


def test_local_m_is_monotonic_diagonal_with_zero_window():
    """D→small: local-m attends around s = t only (p_t = t)."""
    dec = build("local_m", input_feed=False, window=1, gaussian=False)
    tgt_in, memory, mask, init = inputs(S=9, T=8, lengths=(9, 9, 9))
    _, w = dec(tgt_in, memory, mask, init, need_weights=True)
    nz = (w[:, :, 0] > 0)
    for t in range(8):
        assert set(nz[0, t].nonzero().flatten().tolist()) <= {t - 1, t, t + 1}
    torch.testing.assert_close(w.sum(-1), torch.ones(3, 8, 1, dtype=torch.float64))


def test_dot_scorer_needs_equal_sizes():
    with pytest.raises(ConfigError, match="query_dim == key_dim, got 8 and 6"):
        DECODERS.build({"name": "luong", "hidden_dim": 8, "attention": {"name": "single", "scorer": {"name": "dot"}}},
                       V, 6, INIT)
    dec = DECODERS.build({"name": "luong", "hidden_dim": 6, "attention": {"name": "single", "scorer": {"name": "dot"}}},
                         V, 6, INIT)
    assert isinstance(dec, LuongDecoder)


def test_local_needs_single_head_and_says_why():
    with pytest.raises(ConfigError, match="needs a plain block"):
        DECODERS.build({"name": "luong", "alignment": "local_p",
                        "attention": {"name": "multihead", "heads": 2}}, V, MEM, INIT)


def test_concat_score_is_the_additive_scorer_and_multihead_global_works():
    for att, J in [({"name": "single", "scorer": {"name": "additive"}}, 1), ({"name": "multihead", "heads": 2}, 2)]:
        dec = DECODERS.build({"name": "luong", "hidden_dim": HID, "attention": att}, V, MEM, INIT).double()
        tgt_in, memory, mask, init = inputs()
        _, w = dec(tgt_in, memory, mask, init, need_weights=True)
        assert w.shape == (3, 6, J, 7)


def test_local_fields_with_global_alignment_warn_once_each():
    import warnings

    from attnflow.io.console import AttnflowWarning

    with pytest.warns(AttnflowWarning, match=r"'luong': window=3 is unread: .*alignment=global"):
        DECODERS.build({"name": "luong", "window": 3}, V, MEM, INIT)
    with pytest.warns(AttnflowWarning, match=r"decoder 'luong': gaussian=False is unread"):
        DECODERS.build({"name": "luong", "gaussian": False}, V, MEM, INIT)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AttnflowWarning)  # defaults, or a local alignment: silent
        DECODERS.build({"name": "luong"}, V, MEM, INIT)
        DECODERS.build({"name": "luong", "alignment": "local_m", "window": 3}, V, MEM, INIT)
