"""Single-head attention: c = Σ_i v_i norm_i a(k_i, q) (Bahdanau et al. 2015, eq. (5)–(6))."""

import math

import pytest
import torch
import torch.nn.functional as F

from attnflow.blocks.attention.single import Attention
from attnflow.config.registry import ATTENTIONS


def build(scorer="dot", qd=4, kd=4, vd=3, **kw):
    cfg = {"name": "single", "scorer": {"name": scorer} if isinstance(scorer, str) else scorer, **kw}
    return ATTENTIONS.build(cfg, qd, kd, vd)


def attention_by_hand(q, k, v, score, mask=None, causal=False):
    """Loops: α_ti = exp(a_ti) / Σ_allowed exp(a_tk); c_t = Σ_i α_ti v_i."""
    B, Tq, _ = q.shape
    Tk, Dv = k.shape[1], v.shape[2]
    ctx = torch.zeros(B, Tq, Dv, dtype=q.dtype)
    alpha = torch.zeros(B, Tq, Tk, dtype=q.dtype)
    for b in range(B):
        for t in range(Tq):
            allowed = [i for i in range(Tk)
                       if (mask is None or bool(mask[b, 0 if mask.shape[1] == 1 else t, i]))
                       and (not causal or i <= t)]
            if not allowed:
                continue
            e = {i: math.exp(score(q[b, t], k[b, i])) for i in allowed}
            z = sum(e.values())
            for i in allowed:
                alpha[b, t, i] = e[i] / z
                ctx[b, t] += alpha[b, t, i] * v[b, i]
    return ctx, alpha


def dot(q, k):
    return float((q * k).sum())


def data(B=2, Tq=3, Tk=5, qd=4, kd=4, vd=3, dtype=torch.float64):
    return (torch.randn(B, Tq, qd, dtype=dtype), torch.randn(B, Tk, kd, dtype=dtype),
            torch.randn(B, Tk, vd, dtype=dtype))


def pad_mask(lengths, T):
    return (torch.arange(T) < torch.tensor(lengths).unsqueeze(-1)).unsqueeze(1)  # (B, 1, T)


@pytest.fixture
def sdpa_calls(monkeypatch):
    """Count calls of the fused kernel (the attention module reaches it via torch.nn.functional)."""
    calls = []
    real = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    return calls


def test_build_through_registry_and_class():
    att = build("dot", 4, 4, 3)
    assert isinstance(att, Attention)
    assert att.output_dim == 3 and att.heads == 1
    assert type(Attention(4, 4, 3).scorer).registry_name == "additive"  # the default scorer


def test_literal_two_keys():
    att = build("dot", 2, 2, 2)
    q = torch.tensor([[[1.0, 0.0]]])
    k = torch.tensor([[[math.log(3.0), 0.0], [0.0, 5.0]]])  # scores ln 3 and 0 -> α = [3/4, 1/4]
    v = torch.tensor([[[4.0, 0.0], [0.0, 8.0]]])
    ctx, w = att(q, k, v, need_weights=True)
    torch.testing.assert_close(w, torch.tensor([[[0.75, 0.25]]]))
    torch.testing.assert_close(ctx, torch.tensor([[[3.0, 2.0]]]))


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("scorer", ["dot", "scaled_dot", "general"])
def test_context_is_weighted_sum_of_values(scorer, need_weights):
    att = build(scorer).double()
    q, k, v = data()
    if scorer == "dot":
        score = dot
    elif scorer == "scaled_dot":
        def score(a, b):
            return dot(a, b) / 2.0  # √4
    else:
        W = att.scorer.W.weight.detach()

        def score(a, b):
            return float(b @ (W @ a))
    ctx, w = att(q, k, v, need_weights=need_weights)
    exp_ctx, exp_w = attention_by_hand(q, k, v, score)
    assert ctx.shape == (2, 3, 3)
    torch.testing.assert_close(ctx, exp_ctx, rtol=1e-10, atol=1e-12)
    if need_weights:
        assert w.shape == (2, 3, 5)
        torch.testing.assert_close(w, exp_w, rtol=1e-10, atol=1e-12)
    else:
        assert w is None


def test_additive_scorer_by_hand():
    att = build({"name": "additive", "hidden_dim": 6}, 4, 5, 3).double()
    U, bU = att.scorer.U.weight.detach(), att.scorer.U.bias.detach()
    V, w = att.scorer.V.weight.detach(), att.scorer.w.weight.detach()[0]

    def score(a, b):
        return float(w @ torch.tanh(U @ b + bU + V @ a))

    q, k, v = data(qd=4, kd=5)
    mask = pad_mask([5, 2], 5)
    ctx, alpha = att(q, k, v, mask, need_weights=True)
    exp_ctx, exp_alpha = attention_by_hand(q, k, v, score, mask)
    torch.testing.assert_close(alpha, exp_alpha, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(ctx, exp_ctx, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("scorer", ["dot", "additive", "cosine"])
def test_padding_mask(scorer, need_weights):
    att = build(scorer).double()
    q, k, v = data()
    mask = pad_mask([5, 3], 5)
    ctx, w = att(q, k, v, mask, need_weights=True)
    assert (w[1, :, 3:] == 0).all()
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, dtype=torch.float64))
    # padded keys and values of sequence 1 do not matter
    k2, v2 = k.clone(), v.clone()
    k2[1, 3:] = 100 * torch.randn(2, 4, dtype=torch.float64)
    v2[1, 3:] = 1e6
    out1, _ = att(q, k, v, mask, need_weights=need_weights)
    out2, _ = att(q, k2, v2, mask, need_weights=need_weights)
    torch.testing.assert_close(out1, out2, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out1, ctx, rtol=1e-10, atol=1e-12)
    # sequence 1 alone, cut to its length, gives the same context
    alone, _ = att(q[1:], k[1:, :3], v[1:, :3], need_weights=need_weights)
    torch.testing.assert_close(out1[1:], alone, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("scorer", ["dot", "scaled_dot", "cosine", "general"])
def test_fused_path_is_taken_only_when_allowed(sdpa_calls, scorer):
    att = build(scorer)
    q, k, v = data(dtype=torch.float32)
    att(q, k, v)
    assert len(sdpa_calls) == 1
    att(q, k, v, need_weights=True)
    assert len(sdpa_calls) == 1  # weights asked for: explicit path


@pytest.mark.parametrize("cfg", [
    {"scorer": {"name": "additive"}},
    {"scorer": {"name": "gat"}},
    {"scorer": {"name": "dot"}, "backend": "explicit"},
    {"scorer": {"name": "dot"}, "normalizer": {"name": "norm", "positive": "exp"}},
    {"scorer": {"name": "dot"}, "normalizer": {"name": "softmax", "temperature": 2.0}},
])
def test_no_fused_path_for_other_blocks(sdpa_calls, cfg):
    att = ATTENTIONS.build({"name": "single", **cfg}, 4, 4, 3)
    att(*data(dtype=torch.float32))
    assert sdpa_calls == []


@pytest.mark.parametrize("scorer", ["dot", "scaled_dot"])
@pytest.mark.parametrize("masked,causal", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("tq,tk", [(4, 4), (3, 6)])
def test_fused_equals_explicit(sdpa_calls, scorer, masked, causal, tq, tk):
    att = build(scorer, 8, 8, 5)
    q, k, v = data(B=3, Tq=tq, Tk=tk, qd=8, kd=8, vd=5, dtype=torch.float32)
    mask = pad_mask([tk, 2, 1], tk) if masked else None
    fused, none = att(q, k, v, mask, causal=causal)
    assert none is None and len(sdpa_calls) == 1
    explicit, w = att(q, k, v, mask, causal=causal, need_weights=True)
    torch.testing.assert_close(fused, explicit, rtol=1e-5, atol=1e-5)
    # and both equal the loop
    score = dot if scorer == "dot" else (lambda a, b: dot(a, b) / math.sqrt(8))
    exp_ctx, exp_w = attention_by_hand(q.double(), k.double(), v.double(), score, mask, causal)
    torch.testing.assert_close(explicit.double(), exp_ctx, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w.double(), exp_w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("need_weights", [True, False])
def test_fully_masked_query_row_gives_zero_context(need_weights):
    att = build("dot")
    q, k, v = data(dtype=torch.float32)
    mask = torch.ones(2, 3, 5, dtype=torch.bool)
    mask[0, 1] = False
    ctx, w = att(q, k, v, mask, need_weights=need_weights)
    assert torch.isfinite(ctx).all()
    assert (ctx[0, 1] == 0).all()


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("scorer", ["dot", "additive"])
def test_causal_future_does_not_matter(scorer, need_weights):
    att = build(scorer, 4, 4, 3).double()
    T = 5
    x = torch.randn(2, T, 4, dtype=torch.float64)
    v = torch.randn(2, T, 3, dtype=torch.float64)
    base, _ = att(x, x, v, causal=True, need_weights=need_weights)
    for t in range(T - 1):
        k2, v2 = x.clone(), v.clone()
        k2[:, t + 1:] = torch.randn(2, T - t - 1, 4, dtype=torch.float64)
        v2[:, t + 1:] = torch.randn(2, T - t - 1, 3, dtype=torch.float64)
        out, _ = att(x, k2, v2, causal=True, need_weights=need_weights)
        torch.testing.assert_close(out[:, :t + 1], base[:, :t + 1], rtol=1e-12, atol=1e-12)
        assert not torch.allclose(out[:, t + 1:], base[:, t + 1:])
    _, w = att(x, x, v, causal=True, need_weights=True)
    assert (w.triu(1) == 0).all()
    assert (w[:, 0, 0] == 1).all()


def test_prepare_then_attend_equals_forward():
    att = build({"name": "additive", "hidden_dim": 5}, 4, 6, 3).double()
    q, k, v = data(kd=6)
    mask = pad_mask([5, 4], 5)
    memory = att.prepare(k, v)
    ctx1, w1 = att.attend(q, memory, mask, need_weights=True)
    ctx2, w2 = att(q, k, v, mask, need_weights=True)
    torch.testing.assert_close(ctx1, ctx2)
    torch.testing.assert_close(w1, w2)


def test_dropout_only_in_training():
    att = build("dot", dropout=0.9)
    ref = build("dot")
    q, k, v = data(dtype=torch.float32)
    att.eval()
    for nw in (True, False):
        torch.testing.assert_close(att(q, k, v, need_weights=nw)[0], ref(q, k, v, need_weights=nw)[0])
    att.train()
    ctx, w = att(q, k, v, need_weights=True)
    # weights are returned before dropout; the context used dropped weights
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 3))
    assert not torch.allclose(ctx, ref(q, k, v)[0])
