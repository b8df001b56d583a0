"""RNN decoder with attention (RNNsearch): s_t = f(s_{t−1}, [E y_{t−1}; c_t]) (Bahdanau et al. 2015, §3.1)."""

import pytest
import torch

from attnflow.blocks.decoders.rnn_attention import AttentionRNNDecoder
from attnflow.config.registry import DECODERS

V, MEM, INIT, EMB, HID = 11, 6, 5, 4, 8
ATTENTIONS = {
    "single": ({"name": "single", "scorer": {"name": "additive", "hidden_dim": 16}}, 1),
    "single_general": ({"name": "single", "scorer": {"name": "general"}}, 1),
    "multihead": ({"name": "multihead", "heads": 2}, 2),
}


def build(attention="single", cell="gru", how="class", gate=False):
    cfg = ATTENTIONS[attention][0]
    if how == "registry":
        dec = DECODERS.build({"name": "rnn_attention", "cell": cell, "embed_dim": EMB,
                              "hidden_dim": HID, "attention": cfg, "gate": gate}, V, MEM, INIT)
    else:
        dec = AttentionRNNDecoder(V, MEM, INIT, cell=cell, embed_dim=EMB, hidden_dim=HID,
                                  attention=cfg, gate=gate)
    return dec.double().eval()


def inputs(B=3, S=5, T=4, lengths=(5, 3, 1)):
    memory = torch.randn(B, S, MEM, dtype=torch.float64)
    mask = torch.arange(S) < torch.tensor(lengths).unsqueeze(-1)
    init = torch.randn(B, INIT, dtype=torch.float64)
    tgt_in = torch.randint(0, V, (B, T))
    return tgt_in, memory, mask, init


@pytest.mark.parametrize("attention", list(ATTENTIONS))
@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("how", ["class", "registry"])
def test_forward_shapes(attention, cell, how):
    dec = build(attention, cell, how)
    J = ATTENTIONS[attention][1]
    tgt_in, memory, mask, init = inputs()
    logits, w = dec(tgt_in, memory, mask, init, need_weights=True)
    assert logits.shape == (3, 4, V)
    assert w.shape == (3, 4, J, 5)
    logits2, none = dec(tgt_in, memory, mask, init)
    assert none is None
    torch.testing.assert_close(logits2, logits)


@pytest.mark.parametrize("attention", list(ATTENTIONS))
def test_weights_zero_on_padding_and_rows_sum_to_one(attention):
    dec = build(attention)
    lengths = (5, 3, 1)
    tgt_in, memory, mask, init = inputs(lengths=lengths)
    _, w = dec(tgt_in, memory, mask, init, need_weights=True)
    for b, L in enumerate(lengths):
        assert (w[b, ..., L:] == 0).all()
        assert (w[b, ..., :L] > 0).all()
    torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1], dtype=torch.float64))
    assert (w[2, ..., 0] == 1).all()  # one real source token takes all the weight


@pytest.mark.parametrize("attention", list(ATTENTIONS))
def test_padded_memory_does_not_matter(attention):
    dec = build(attention)
    tgt_in, memory, mask, init = inputs(lengths=(5, 3, 1))
    logits, _ = dec(tgt_in, memory, mask, init)
    memory2 = memory.clone()
    memory2[~mask] = 1e3 * torch.randn(int((~mask).sum()), MEM, dtype=torch.float64)
    logits2, _ = dec(tgt_in, memory2, mask, init)
    torch.testing.assert_close(logits2, logits, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("attention", ["single", "multihead"])
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_teacher_forcing_is_causal(attention, cell):
    dec = build(attention, cell)
    tgt_in, memory, mask, init = inputs(T=5)
    base, _ = dec(tgt_in, memory, mask, init)
    for t in range(4):
        changed = tgt_in.clone()
        changed[:, t + 1] = (changed[:, t + 1] + 1) % V
        out, _ = dec(changed, memory, mask, init)
        torch.testing.assert_close(out[:, :t + 1], base[:, :t + 1], rtol=0, atol=0)
        assert not torch.allclose(out[:, t + 1], base[:, t + 1])


def test_init_state_is_used():
    dec = build()
    tgt_in, memory, mask, init = inputs()
    a, _ = dec(tgt_in, memory, mask, init)
    b, _ = dec(tgt_in, memory, mask, init + 1.0)
    assert not torch.allclose(a[:, 0], b[:, 0])


@pytest.mark.parametrize("attention", ["single", "multihead"])
def test_greedy_shapes_and_agrees_with_teacher_forcing(attention):
    dec = build(attention)
    _, memory, mask, init = inputs()
    bos, eos, max_len = 1, 2, 6
    tokens, w = dec.greedy(memory, mask, init, bos, eos, max_len, need_weights=True)
    B, L = tokens.shape
    assert B == 3 and 1 <= L <= max_len
    assert w.shape == (3, L, ATTENTIONS[attention][1], 5)
    # feeding greedy's own output back with teacher forcing reproduces it (up to each row's ⟨EOS⟩)
    tgt_in = torch.cat([torch.full((3, 1), bos), tokens[:, :-1]], dim=1)
    logits, _ = dec(tgt_in, memory, mask, init)
    for b in range(3):
        for t in range(L):
            assert logits[b, t].argmax().item() == tokens[b, t].item()
            if tokens[b, t].item() == eos:
                break


def test_greedy_stops_when_all_rows_emitted_eos():
    dec = build()
    eos = 3
    with torch.no_grad():
        dec.out.weight.zero_()
        dec.out.bias.zero_()
        dec.out.bias[eos] = 10.0
    _, memory, mask, init = inputs()
    tokens, _ = dec.greedy(memory, mask, init, bos_id=1, eos_id=eos, max_len=7)
    assert tokens.shape == (3, 1)
    assert (tokens == eos).all()


def test_greedy_runs_to_max_len_without_eos():
    dec = build()
    with torch.no_grad():
        dec.out.weight.zero_()
        dec.out.bias.zero_()
        dec.out.bias[5] = 10.0
    _, memory, mask, init = inputs()
    tokens, _ = dec.greedy(memory, mask, init, bos_id=1, eos_id=3, max_len=7)
    assert tokens.shape == (3, 7)
    assert (tokens == 5).all()


def test_greedy_keeps_finished_rows_at_eos():
    """Row 0 wants ⟨EOS⟩ first and, after ⟨EOS⟩, token 3; it must stay at ⟨EOS⟩. Row 1 never stops.

    The output layer sees [s_t; c_t; E y_{t−1}]; with one-hot embeddings and constant memory rows
    (c_t = m_b whatever α is) the logits are 5·c_t + 10·[y_{t−1} = eos]·e_3.
    """
    Vs, bos, eos = 4, 0, 1
    dec = AttentionRNNDecoder(Vs, 4, 2, embed_dim=4, hidden_dim=6, attention={"name": "single"}).double()
    with torch.no_grad():
        dec.embedding.weight.copy_(torch.eye(4))
        dec.out.weight.zero_()
        dec.out.bias.zero_()
        dec.out.weight[:, 6:10] = 5 * torch.eye(4)  # context part
        dec.out.weight[3, 10 + eos] = 10.0  # previous token ⟨EOS⟩ -> token 3
    memory = torch.zeros(2, 3, 4, dtype=torch.float64)
    memory[0, :, eos] = 1.0  # row 0: context e_eos
    memory[1, :2, 2] = 1.0  # row 1: context e_2 on its 2 real positions
    memory[1, 2, 3] = 100.0  # padding that would push token 3 if attended
    mask = torch.tensor([[True, True, True], [True, True, False]])
    init = torch.randn(2, 2, dtype=torch.float64)
    tokens, _ = dec.greedy(memory, mask, init, bos_id=bos, eos_id=eos, max_len=5)
    assert tokens.tolist() == [[eos] * 5, [2] * 5]
    # without the rule, row 0 would emit 3 after its ⟨EOS⟩
    logits, _ = dec(torch.tensor([[bos, eos]]), memory[:1], mask[:1], init[:1])
    assert logits[0].argmax(-1).tolist() == [eos, 3]


def bahdanau_by_hand(dec, tgt_in, memory, mask, init):
    """Loops over batch and steps: α_t from s_{t−1} (additive scorer), c_t = Σ α_ti h_i,
    s_t = cell([E y_{t−1}; c_t], s_{t−1}), logits = W_o [s_t; c_t; E y_{t−1}] + b_o, s_0 = tanh(W_init h̄)."""
    sc = dec.attention.scorer
    U, bU, Vw, w = sc.U.weight, sc.U.bias, sc.V.weight, sc.w.weight[0]
    lstm = dec.cell_type == "lstm"
    B, T = tgt_in.shape
    logits = torch.zeros(B, T, dec.out.out_features, dtype=torch.float64)
    alphas = torch.zeros(B, T, memory.shape[1], dtype=torch.float64)
    for b in range(B):
        s = torch.tanh(dec.init.weight @ init[b] + dec.init.bias)
        cstate = torch.zeros_like(s)
        real = [i for i in range(memory.shape[1]) if mask[b, i]]
        for t in range(T):
            scores = {i: float(w @ torch.tanh(U @ memory[b, i] + bU + Vw @ s)) for i in real}
            top = max(scores.values())
            e = {i: torch.exp(torch.tensor(scores[i] - top, dtype=torch.float64)) for i in real}
            z = sum(e.values())
            ctx = torch.zeros(memory.shape[2], dtype=torch.float64)
            for i in real:
                alphas[b, t, i] = e[i] / z
                ctx = ctx + alphas[b, t, i] * memory[b, i]
            if dec.gate is not None:  # Xu et al. 2015 §4.2.1: β_t = σ(w_β · s_{t−1} + b_β)
                beta = 1 / (1 + torch.exp(-(dec.gate.weight[0] @ s + dec.gate.bias[0])))
                ctx = beta * ctx
            emb = dec.embedding.weight[tgt_in[b, t]]
            x = torch.cat([emb, ctx]).unsqueeze(0)
            if lstm:
                h, cs = dec.cell(x, (s.unsqueeze(0), cstate.unsqueeze(0)))
                s, cstate = h[0], cs[0]
            else:
                s = dec.cell(x, s.unsqueeze(0))[0]
            logits[b, t] = dec.out.weight @ torch.cat([s, ctx, emb]) + dec.out.bias
    return logits, alphas


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_matches_hand_recurrence(cell):
    dec = build("single", cell)
    tgt_in, memory, mask, init = inputs(lengths=(5, 3, 1))
    with torch.no_grad():
        logits, w = dec(tgt_in, memory, mask, init, need_weights=True)
        exp_logits, exp_w = bahdanau_by_hand(dec, tgt_in, memory, mask, init)
    torch.testing.assert_close(w[:, :, 0], exp_w, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(logits, exp_logits, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_gated_context_matches_hand_recurrence(cell):
    """``gate=true``: the context is scaled by β_t = σ(w_β · s_{t−1} + b_β) (Xu et al. 2015)."""
    dec = build("single", cell, how="registry", gate=True)
    with torch.no_grad():
        dec.gate.bias.fill_(-1.5)  # β clearly below 1: a missing gate would show
    tgt_in, memory, mask, init = inputs(lengths=(5, 3, 1))
    with torch.no_grad():
        logits, w = dec(tgt_in, memory, mask, init, need_weights=True)
        exp_logits, exp_w = bahdanau_by_hand(dec, tgt_in, memory, mask, init)
        ungated = build("single", cell)
        ungated.load_state_dict({k: v for k, v in dec.state_dict().items() if not k.startswith("gate")})
        plain, _ = ungated(tgt_in, memory, mask, init)
    torch.testing.assert_close(w[:, :, 0], exp_w, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(logits, exp_logits, rtol=1e-10, atol=1e-12)
    assert not torch.allclose(logits, plain)
