"""Greedy decoding and batched beam search (attnflow.blocks.decoders.decoding) through the decoder protocol."""

import itertools

import pytest
import torch

from attnflow.blocks.decoders.base import reorder_state
from attnflow.blocks.decoders.decoding import beam_search, greedy_decode, length_penalty_factor
from attnflow.models.seq2seq import Seq2Seq

BOS, EOS, V = 1, 2, 7


def model(decoder="rnn_attention", seed=0, **dec):
    torch.manual_seed(seed)
    m = Seq2Seq(V, V, 0, embed_dim=8, encoder={"name": "rnn", "hidden_dim": 8},
                decoder={"name": decoder, "embed_dim": 8, "hidden_dim": 16, **dec})
    return m.double().eval()


def batch(B=4, S=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([S, 4, 2, 5][:B])
    src = torch.randint(3, V, (B, S), generator=g)
    src[torch.arange(S) >= lengths.unsqueeze(1)] = 0
    return src, lengths


def seq_logprob(m, src, lengths, ys):
    """log p(y | x) by teacher forcing, summed up to and including the first ⟨EOS⟩."""
    tgt_in = torch.cat([torch.full((len(ys), 1), BOS), ys[:, :-1]], 1)
    logp = torch.log_softmax(m(src, lengths, tgt_in)[0], -1).gather(-1, ys.unsqueeze(-1))[..., 0]
    out = []
    for b in range(len(ys)):
        n = (ys[b] == EOS).nonzero()
        n = int(n[0]) + 1 if len(n) else ys.shape[1]
        out.append(logp[b, :n].sum())
    return torch.stack(out)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_step_matches_teacher_forcing(cell):
    m = model(cell=cell)
    src, lengths = batch()
    memory, mask, final = m.encode(src, lengths)
    tgt_in = torch.randint(0, V, (4, 5))
    full, w_full = m.decoder(tgt_in, memory, mask, final, need_weights=True)
    state = m.decoder.start(memory, mask, final)
    for t in range(5):
        logits, state, w = m.decoder.step(tgt_in[:, t], state, need_weights=True)
        torch.testing.assert_close(logits, full[:, t])
        torch.testing.assert_close(w, w_full[:, t])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_one_equals_greedy(seed):
    m = model(seed=seed)
    src, lengths = batch(seed=seed)
    g, gw = greedy_decode(m, src, lengths, BOS, EOS, 9, need_weights=True)
    b, bw = beam_search(m, src, lengths, BOS, EOS, 9, beam_size=1, need_weights=True)
    assert torch.equal(g, b)
    torch.testing.assert_close(gw, bw)
    assert torch.equal(m.greedy(src, lengths, BOS, EOS, 9)[0], g)


def test_reorder_selects_rows():
    m = model()
    src, lengths = batch()
    memory, mask, final = m.encode(src, lengths)
    state = m.decoder.start(memory, mask, final)
    idx = torch.tensor([2, 2, 0])
    picked = m.decoder.reorder(state, idx)
    direct = m.decoder.start(memory[idx], mask[idx], final[idx])
    y = torch.tensor([3, 4, 5])
    torch.testing.assert_close(m.decoder.step(y, picked)[0], m.decoder.step(y, direct)[0])


def test_beam_search_is_exact_with_a_full_beam():
    """With K ≥ V^(L−1) hypotheses kept, beam search finds the most probable sequence of at most
    L tokens (checked by enumerating every sequence), and never scores below greedy."""
    m = model(seed=3)
    src, lengths = batch(B=2)
    L = 3
    seqs = torch.tensor(list(itertools.product(range(V), repeat=L)))
    for b in range(2):
        scores = seq_logprob(m, src[b:b + 1].expand(len(seqs), -1), lengths[b:b + 1].expand(len(seqs)), seqs)
        # sequences that differ only after ⟨EOS⟩ are the same hypothesis
        best = scores.max()
        tok, _, sc = beam_search(m, src[b:b + 1], lengths[b:b + 1], BOS, EOS, L, beam_size=V ** 2,
                                 return_scores=True)
        torch.testing.assert_close(sc[0].double(), best, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(seq_logprob(m, src[b:b + 1], lengths[b:b + 1],
                                               torch.nn.functional.pad(tok, (0, L - tok.shape[1]), value=EOS)),
                                   best.unsqueeze(0), rtol=1e-5, atol=1e-5)
    g, _ = greedy_decode(m, src, lengths, BOS, EOS, L)
    _, _, sc4 = beam_search(m, src, lengths, BOS, EOS, L, beam_size=4, return_scores=True)
    gs = seq_logprob(m, src, lengths, torch.nn.functional.pad(g, (0, L - g.shape[1]), value=EOS))
    assert (sc4.double() >= gs - 1e-6).all()


def test_batched_beam_equals_one_sentence_at_a_time():
    m = model(seed=4)
    src, lengths = batch()
    tok, _ = beam_search(m, src, lengths, BOS, EOS, 8, beam_size=3, length_penalty=0.6)
    for b in range(4):
        one, _ = beam_search(m, src[b:b + 1, :int(lengths[b])], lengths[b:b + 1], BOS, EOS, 8,
                             beam_size=3, length_penalty=0.6)
        n = one.shape[1]
        assert tok[b, :n].tolist() == one[0].tolist()
        assert (tok[b, n:] == EOS).all()


def test_length_penalty_values():
    torch.testing.assert_close(length_penalty_factor(torch.tensor([1, 7]), 1.0),
                               torch.tensor([1.0, 2.0]))
    assert length_penalty_factor(torch.tensor([9]), 0.0).item() == 1.0


def test_decoder_without_attention_gives_no_weights():
    m = model("rnn")
    src, lengths = batch()
    g, gw = greedy_decode(m, src, lengths, BOS, EOS, 6, need_weights=True)
    b, bw = beam_search(m, src, lengths, BOS, EOS, 6, beam_size=1, need_weights=True)
    assert gw is None and bw is None and torch.equal(g, b)


def test_full_beam_with_length_penalty_maximises_the_normalised_score():
    """With α > 0 the best hypothesis maximises log p(y | x) / lp(|y|) (|y| counts ⟨EOS⟩; a
    sequence without ⟨EOS⟩ has length L) over every sequence of at most L tokens — finished
    hypotheses wait in their own buffer instead of taking beam slots from longer prefixes."""
    m = model(seed=5)
    src, lengths = batch(B=2)
    L, alpha = 3, 1.5
    seqs = torch.tensor(list(itertools.product(range(V), repeat=L)))
    first_eos = [(s == EOS).nonzero() for s in seqs]
    n = torch.tensor([int(e[0]) + 1 if len(e) else L for e in first_eos])
    for b in range(2):
        logp = seq_logprob(m, src[b:b + 1].expand(len(seqs), -1), lengths[b:b + 1].expand(len(seqs)), seqs)
        norm = logp / length_penalty_factor(n, alpha).double()
        tok, _, sc = beam_search(m, src[b:b + 1], lengths[b:b + 1], BOS, EOS, L, beam_size=V ** 2,
                                 length_penalty=alpha, return_scores=True)
        torch.testing.assert_close(sc[0].double(), norm.max(), rtol=1e-5, atol=1e-5)
        padded = torch.nn.functional.pad(tok, (0, L - tok.shape[1]), value=EOS)[0]
        assert norm[(seqs == padded).all(1)].max() == norm.max()


class _MarkovDecoder(torch.nn.Module):
    """p(y_t | y_<t) depends on y_{t−1} only, from a fixed table; no attention."""

    def __init__(self, table):
        super().__init__()
        self.logp = torch.log(torch.tensor(table, dtype=torch.float64).clamp_min(1e-12))

    def start(self, memory, mask, init):
        return {"rows": torch.arange(memory.shape[0])}

    def step(self, y, state, need_weights=False):
        return self.logp[y], state, None

    def reorder(self, state, rows):
        return reorder_state(state, rows)


class _MarkovModel(torch.nn.Module):
    def __init__(self, table):
        super().__init__()
        self.decoder = _MarkovDecoder(table)

    def encode(self, src, lengths):
        return torch.zeros(len(src), 1, 1), torch.ones(len(src), 1, dtype=torch.bool), None


def test_finished_hypotheses_do_not_take_beam_slots():
    """K = 1, α = 5: after ⟨BOS⟩, ⟨EOS⟩ (p = .5) is the best first token, but "a ⟨EOS⟩" (p = .27)
    has the better normalised score log p / lp(|y|). Beam search must keep "a" live beside the
    finished "⟨EOS⟩" and return the maximiser found by enumerating every sequence of ≤ 3 tokens."""
    a, b = 3, 4
    table = [[0, 0, 1, 0, 0], [0, 0, .5, .3, .2], [0, 0, 1, 0, 0], [0, 0, .9, .1, 0], [0, 0, .9, 0, .1]]
    m = _MarkovModel(table)
    L, alpha = 3, 5.0
    tok, _, sc = beam_search(m, torch.zeros(1, 1, dtype=torch.long), torch.ones(1), BOS, EOS, L,
                             beam_size=1, length_penalty=alpha, return_scores=True)
    lp = m.decoder.logp
    best, best_seq = -float("inf"), None
    for seq in itertools.product(range(len(table)), repeat=L):
        s, prev, n = 0.0, BOS, L
        for i, y in enumerate(seq):
            s += float(lp[prev, y])
            prev = y
            if y == EOS:
                n = i + 1
                break
        norm = s / float(length_penalty_factor(torch.tensor([n]), alpha))
        if norm > best + 1e-12:
            best, best_seq = norm, list(seq[:n])
    assert best_seq == [a, EOS]
    assert tok[0].tolist()[:2] == best_seq
    assert abs(float(sc[0]) - best) < 1e-6


@pytest.mark.parametrize("decoder", ["rnn_attention", "luong", "rnn"])
def test_static_state_is_not_reordered_and_changes_nothing(decoder, monkeypatch):
    """Beam search leaves the decoder's static_state (memory, masks) in place after the first
    expansion; the result equals reordering every entry."""
    m = model(decoder)
    assert m.decoder.static_state
    src, lengths = batch()
    fast = beam_search(m, src, lengths, BOS, EOS, 8, beam_size=3, length_penalty=0.6,
                       need_weights=True, return_scores=True)
    moved = []
    original = type(m.decoder).reorder

    def spy(self, state, index):
        moved.append(set(state))
        return original(self, state, index)

    monkeypatch.setattr(type(m.decoder), "reorder", spy)
    beam_search(m, src, lengths, BOS, EOS, 8, beam_size=3)
    assert moved and all(not (keys & set(m.decoder.static_state)) for keys in moved[1:])
    monkeypatch.setattr(type(m.decoder), "static_state", ())
    full = beam_search(m, src, lengths, BOS, EOS, 8, beam_size=3, length_penalty=0.6,
                       need_weights=True, return_scores=True)
    assert torch.equal(fast[0], full[0]) and torch.equal(fast[2], full[2])
    assert (fast[1] is None) == (full[1] is None)
    if fast[1] is not None:
        assert torch.equal(fast[1], full[1])


def test_zero_max_len_gives_empty_outputs():
    m = model()
    src, lengths = batch()
    tokens, weights = greedy_decode(m, src, lengths, BOS, EOS, 0, need_weights=True)
    assert tokens.shape == (4, 0) and weights is None
