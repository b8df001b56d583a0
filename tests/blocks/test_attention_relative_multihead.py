"""Relative-position multi-head attention (Shaw et al. 2018) against plain attention and a hand loop."""

import math

import pytest
import torch

from attnflow.config.registry import ATTENTIONS, DECODERS, ConfigError


def build(d=8, heads=2, delta=2, **kw):
    return ATTENTIONS.build({"name": "relative_multihead", "heads": heads, "max_distance": delta, **kw},
                            d, d, d, True)


def test_with_zero_relative_embeddings_equals_plain_multihead():
    rel = build(d=8, heads=2)
    plain = ATTENTIONS.build({"name": "multihead", "heads": 2}, 8, 8, 8)
    missing = plain.load_state_dict(rel.state_dict(), strict=False)
    assert set(missing.unexpected_keys) == {"rel_k", "rel_v"} and not missing.missing_keys
    with torch.no_grad():
        rel.rel_k.zero_()
        rel.rel_v.zero_()
    x = torch.randn(3, 6, 8)
    mask = (torch.arange(6) < torch.tensor([6, 4, 2]).unsqueeze(-1)).unsqueeze(1)
    for kw in ({}, {"causal": True}, {"need_weights": True}):
        a, wa = rel(x, x, x, mask, **kw)
        b, wb = plain(x, x, x, mask, **kw)
        assert torch.allclose(a, b, atol=1e-5)
        if wa is not None:
            assert torch.allclose(wa, wb, atol=1e-6)


def clip(i, j, delta):
    return max(-delta, min(delta, i - j)) + delta


@pytest.mark.parametrize("scorer", ["scaled_dot", "general"])
def test_scores_and_context_equal_a_hand_loop_over_i_and_j(scorer):
    delta, d, J = 2, 8, 2
    att = build(d=d, heads=J, delta=delta, scorer={"name": scorer}, aggregator={"name": "concat"})
    x = torch.randn(2, 6, d)
    mask = (torch.arange(6) < torch.tensor([6, 5]).unsqueeze(-1)).unsqueeze(1)
    out, weights = att(x, x, x, mask, need_weights=True)
    hd = att.head_dim
    q = (x @ att.q_proj.weight.T + att.q_proj.bias).detach()
    k = (x @ att.k_proj.weight.T + att.k_proj.bias).detach()
    v = (x @ att.v_proj.weight.T + att.v_proj.bias).detach()
    wk, wv = att.rel_k.detach(), att.rel_v.detach()
    for b in range(2):
        for h in range(J):
            sl = slice(h * hd, (h + 1) * hd)
            for j in range(6):
                scores = []
                for i in range(6):
                    key = k[b, i, sl] + wk[clip(i, j, delta)]
                    if scorer == "scaled_dot":
                        scores.append(float(key @ q[b, j, sl]) / math.sqrt(hd))
                    else:
                        scores.append(float(key @ (att.scorer.W.weight.detach() @ q[b, j, sl])))
                real = int(mask[b, 0].sum())
                e = [math.exp(s) if i < real else 0.0 for i, s in enumerate(scores)]
                alpha = [x_ / sum(e) for x_ in e]
                assert torch.allclose(weights[b, h, j], torch.tensor(alpha), atol=1e-5)
                c = sum(alpha[i] * (v[b, i, sl] + wv[clip(i, j, delta)]) for i in range(6))
                assert torch.allclose(out[b, j, sl], c, atol=1e-5)


def test_sdpa_scorer_path_equals_generic_path():
    fast = build(d=8, heads=2, scorer={"name": "dot"})
    slow = build(d=8, heads=2, scorer={"name": "general"})
    slow.load_state_dict(fast.state_dict(), strict=False)
    with torch.no_grad():
        slow.scorer.W.weight.copy_(torch.eye(4))  # kᵀ I q = kᵀq
    x = torch.randn(2, 5, 8)
    assert torch.allclose(fast(x, x, x)[0], slow(x, x, x)[0], atol=1e-5)


def test_query_offset_gives_the_rows_of_the_full_sequence():
    att = build(d=8, heads=2, delta=3)
    x = torch.randn(2, 7, 8)
    full, _ = att(x, x, x, causal=True)
    memory = att.prepare(x[:, :5], x[:, :5])
    row, _ = att.attend(x[:, 4:5], memory, None, query_offset=4)
    assert torch.allclose(row, full[:, 4:5], atol=1e-5)


def test_gradients_reach_relative_embeddings_and_distance_clips():
    att = build(d=8, heads=2, delta=1)
    assert att.rel_k.shape == (3, 4)
    x = torch.randn(1, 6, 8)
    att(x, x, x)[0].sum().backward()
    assert att.rel_k.grad.abs().sum() > 0 and att.rel_v.grad.abs().sum() > 0


def test_in_an_rnn_decoder_it_is_a_config_error_saying_why():
    with pytest.raises(ConfigError, match="i − j"):
        DECODERS.build({"name": "rnn_attention", "attention": {"name": "relative_multihead"}}, 10, 8, 8)
