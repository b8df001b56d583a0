"""The ensemble of encoder–decoder models (attnflow.models.ensemble): greedy decoding and beam search
on it choose tokens by the mean of the members' next-token distributions, checked against the
members' own teacher-forced distributions; members of different kinds (RNN, Transformer) mix."""

import itertools

import pytest
import torch

from attnflow.blocks.decoders.decoding import beam_search, greedy_decode
from attnflow.models.ensemble import Ensemble
from attnflow.models.seq2seq import Seq2Seq
from attnflow.config.registry import MODELS

BOS, EOS, V = 1, 2, 7


def rnn(seed, cell="gru"):
    torch.manual_seed(seed)
    return Seq2Seq(V, V, 0, embed_dim=8, encoder={"name": "rnn", "hidden_dim": 8},
                   decoder={"name": "rnn_attention", "embed_dim": 8, "hidden_dim": 16, "cell": cell}
                   ).double().eval()


def transformer(seed):
    torch.manual_seed(seed)
    cfg = {"name": "transformer", "d_model": 16, "ffn_dim": 32, "encoder_layers": 2,
           "decoder_layers": 2, "attention": {"name": "multihead", "heads": 2}, "dropout": 0.0}
    return MODELS.build(cfg, src_vocab=V, tgt_vocab=V, pad_id=0).double().eval()


def batch(seed=1):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([6, 4, 2, 5])
    src = torch.randint(3, V, (4, 6), generator=g)
    src[torch.arange(6) >= lengths.unsqueeze(1)] = 0
    return src, lengths


def mean_logp(members, src, lengths, ys):
    """log (1/M) Σ_m p_m(y_t | y_<t, x) at every position, each member teacher-forced on ys."""
    tgt_in = torch.cat([torch.full((len(ys), 1), BOS), ys[:, :-1]], 1)
    probs = torch.stack([torch.softmax(m(src, lengths, tgt_in)[0], -1) for m in members])
    return probs.mean(0).log()  # (B, T, V)


def upto_eos(row):
    n = (row == EOS).nonzero()
    return int(n[0]) + 1 if len(n) else len(row)


def test_one_member_decodes_as_the_model():
    m = rnn(0)
    src, lengths = batch()
    one = Ensemble([m])
    assert torch.equal(greedy_decode(one, src, lengths, BOS, EOS, 9)[0],
                       greedy_decode(m, src, lengths, BOS, EOS, 9)[0])
    assert torch.equal(beam_search(one, src, lengths, BOS, EOS, 9, 3, 0.6)[0],
                       beam_search(m, src, lengths, BOS, EOS, 9, 3, 0.6)[0])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_takes_the_argmax_of_the_members_mean_distribution(seed):
    members = [rnn(seed), rnn(seed + 10, cell="lstm"), transformer(seed + 20)]
    src, lengths = batch(seed)
    tokens, _ = greedy_decode(Ensemble(members), src, lengths, BOS, EOS, 8)
    logp = mean_logp(members, src, lengths, tokens)
    for b in range(len(tokens)):
        n = upto_eos(tokens[b])
        assert tokens[b, :n].tolist() == logp[b, :n].argmax(-1).tolist()


def test_the_check_above_can_tell_an_ensemble_from_its_first_member():
    """Over the seeds above, the ensemble's output differs from its first member's somewhere, so
    an Ensemble that decoded with one member only would fail the test above."""
    differ = []
    for seed in (0, 1, 2):
        members = [rnn(seed), rnn(seed + 10, cell="lstm"), transformer(seed + 20)]
        src, lengths = batch(seed)
        ens = greedy_decode(Ensemble(members), src, lengths, BOS, EOS, 8)[0]
        first = greedy_decode(members[0], src, lengths, BOS, EOS, 8)[0]
        differ.append(ens.shape != first.shape or not torch.equal(ens, first))
    assert any(differ)


def test_a_full_beam_finds_the_ensembles_most_probable_output():
    members = [rnn(3), transformer(4)]
    src, lengths = batch(5)
    L = 3
    seqs = torch.tensor(list(itertools.product(range(V), repeat=L)))
    for b in range(2):
        s, n = src[b:b + 1].expand(len(seqs), -1), lengths[b:b + 1].expand(len(seqs))
        per_token = mean_logp(members, s, n, seqs).gather(-1, seqs.unsqueeze(-1))[..., 0]
        scores = torch.stack([per_token[i, :upto_eos(seqs[i])].sum() for i in range(len(seqs))])
        tok, _, score = beam_search(Ensemble(members), src[b:b + 1], lengths[b:b + 1], BOS, EOS, L,
                                    beam_size=V ** 2, return_scores=True)
        torch.testing.assert_close(score[0].double(), scores.max(), rtol=1e-6, atol=1e-6)


def test_beam_search_on_a_batch_equals_one_sentence_at_a_time():
    ens = Ensemble([rnn(6), transformer(7)])
    src, lengths = batch(8)
    tok, _ = beam_search(ens, src, lengths, BOS, EOS, 8, beam_size=3, length_penalty=0.6)
    for b in range(4):
        one, _ = beam_search(ens, src[b:b + 1, :int(lengths[b])], lengths[b:b + 1], BOS, EOS, 8,
                             beam_size=3, length_penalty=0.6)
        assert tok[b, :one.shape[1]].tolist() == one[0].tolist()


def test_it_is_for_generation_only():
    with pytest.raises(TypeError, match="for generation"):
        Ensemble([rnn(0)])(*batch(), torch.ones(4, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="at least one"):
        Ensemble([])
