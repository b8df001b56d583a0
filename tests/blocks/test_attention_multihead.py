"""Multi-head attention: cʲ = Attn(W_qʲ q, W_kʲ H, W_vʲ H), then an aggregator (Vaswani et al. 2017, §3.2.2)."""

import math

import pytest
import torch
import torch.nn.functional as F

from attnflow.blocks.attention.multihead import MultiHeadAttention
from attnflow.config.registry import ATTENTIONS


def build(qd, kd, vd, **kw):
    return ATTENTIONS.build({"name": "multihead", **kw}, qd, kd, vd)


def pad_mask(lengths, T):
    return (torch.arange(T) < torch.tensor(lengths).unsqueeze(-1)).unsqueeze(1)  # (B, 1, T)


def head_rows(linear, j, d):
    W = linear.weight.detach()[j * d:(j + 1) * d]
    b = None if linear.bias is None else linear.bias.detach()[j * d:(j + 1) * d]
    return W, b


def apply(x, Wb):
    W, b = Wb
    y = x @ W.T
    return y if b is None else y + b


def mha_by_hand(att, q, k, v, mask=None, causal=False, score=None):
    """Explicit loop over heads; α_j = exp(s)/Σexp(s) over allowed keys; then aggregate."""
    J, d = att.heads, att.head_dim
    v_lin = att.k_proj if att.v_proj is None else att.v_proj
    Tq, Tk = q.shape[1], k.shape[1]
    allowed = torch.ones(q.shape[0], Tq, Tk, dtype=torch.bool)
    if mask is not None:
        allowed = allowed & mask
    if causal:
        allowed = allowed & torch.tensor([[i <= t for i in range(Tk)] for t in range(Tq)])
    contexts, alphas = [], []
    for j in range(J):
        qj = apply(q, head_rows(att.q_proj, j, d))
        kj = apply(k, head_rows(att.k_proj, j, d))
        vj = apply(v, head_rows(v_lin, j, d))
        s = (qj @ kj.transpose(1, 2)) / math.sqrt(d) if score is None else score(qj, kj)
        e = torch.where(allowed, torch.exp(s), torch.zeros_like(s))
        z = e.sum(-1, keepdim=True)
        alpha = torch.where(z > 0, e / z, torch.zeros_like(e))
        alphas.append(alpha)
        contexts.append(alpha @ vj)
    name = type(att.aggregator).registry_name
    if name == "mean":
        total = contexts[0]
        for c in contexts[1:]:
            total = total + c
        out = total / J
    else:
        out = torch.cat(contexts, dim=-1)
        if name == "concat_proj":
            out = out @ att.aggregator.proj.weight.detach().T + att.aggregator.proj.bias.detach()
    return out, torch.stack(alphas, dim=1)


@pytest.mark.parametrize("aggregator,expected_dim", [("mean", 4), ("concat", 12), ("concat_proj", 12)])
def test_shapes_per_aggregator(aggregator, expected_dim):
    att = build(12, 10, 7, heads=3, aggregator={"name": aggregator})
    assert isinstance(att, MultiHeadAttention)
    assert att.head_dim == 4 and att.output_dim == expected_dim
    q, k, v = torch.randn(2, 5, 12), torch.randn(2, 6, 10), torch.randn(2, 6, 7)
    for nw in (True, False):
        ctx, w = att(q, k, v, need_weights=nw)
        assert ctx.shape == (2, 5, expected_dim)
        assert (w.shape == (2, 3, 5, 6)) if nw else (w is None)


def test_head_dim_and_out_dim_fields():
    att = build(6, 6, 6, heads=2, head_dim=5, aggregator={"name": "concat_proj", "out_dim": 9})
    assert att.q_proj.out_features == 10 and att.output_dim == 9
    assert att(torch.randn(1, 2, 6), torch.randn(1, 3, 6), torch.randn(1, 3, 6))[0].shape == (1, 2, 9)
    with pytest.raises(ValueError, match="divisible"):
        build(7, 7, 7, heads=2)


@pytest.mark.parametrize("aggregator", ["mean", "concat", "concat_proj"])
@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("masked,causal", [(False, False), (True, False), (True, True)])
def test_matches_hand_computation(aggregator, need_weights, masked, causal):
    att = build(6, 5, 7, heads=3, head_dim=4, aggregator={"name": aggregator}).double()
    q = torch.randn(2, 4, 6, dtype=torch.float64)
    k = torch.randn(2, 4, 5, dtype=torch.float64)
    v = torch.randn(2, 4, 7, dtype=torch.float64)
    mask = pad_mask([4, 2], 4) if masked else None
    ctx, w = att(q, k, v, mask, causal=causal, need_weights=need_weights)
    exp_ctx, exp_w = mha_by_hand(att, q, k, v, mask, causal)
    torch.testing.assert_close(ctx, exp_ctx, rtol=1e-10, atol=1e-12)
    if need_weights:
        torch.testing.assert_close(w, exp_w, rtol=1e-10, atol=1e-12)


def test_self_attention_one_matmul_path_by_hand():
    """keys is values (self-attention): k and v projections are fused; still per-head by hand."""
    att = build(8, 8, 8, heads=2).double()
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    mask = pad_mask([5, 3, 1], 5)
    ctx, w = att(x, x, x, mask, need_weights=True)
    exp_ctx, exp_w = mha_by_hand(att, x, x, x, mask)
    torch.testing.assert_close(ctx, exp_ctx, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(w, exp_w, rtol=1e-10, atol=1e-12)


def test_no_bias():
    att = build(8, 8, 8, heads=2, bias=False).double()
    assert att.q_proj.bias is None and att.k_proj.bias is None and att.v_proj.bias is None
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    torch.testing.assert_close(att(x, x, x)[0], mha_by_hand(att, x, x, x)[0], rtol=1e-10, atol=1e-12)


def test_other_scorer_and_normalizer_per_head():
    att = build(6, 6, 6, heads=2, scorer={"name": "general"},
                normalizer={"name": "norm", "positive": "exp"}, aggregator={"name": "concat"}).double()
    W = att.scorer.W.weight.detach()  # (d, d), shared by the heads
    q = torch.randn(2, 3, 6, dtype=torch.float64)
    k = torch.randn(2, 4, 6, dtype=torch.float64)
    mask = pad_mask([4, 3], 4)
    ctx, w = att(q, k, k.clone(), mask, need_weights=True)
    exp_ctx, exp_w = mha_by_hand(att, q, k, k, mask, score=lambda qj, kj: qj @ W.T @ kj.transpose(1, 2))
    torch.testing.assert_close(ctx, exp_ctx, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(w, exp_w, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("masked,causal", [(False, False), (True, False), (False, True), (True, True)])
def test_fused_equals_explicit(monkeypatch, masked, causal):
    calls = []
    real = F.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda *a, **kw: calls.append(1) or real(*a, **kw))
    att = build(16, 16, 16, heads=4)
    x = torch.randn(3, 6, 16)
    mask = pad_mask([6, 4, 2], 6) if masked else None
    fused, _ = att(x, x, x, mask, causal=causal)
    assert len(calls) == 1
    explicit, _ = att(x, x, x, mask, causal=causal, need_weights=True)
    assert len(calls) == 1
    torch.testing.assert_close(fused, explicit, rtol=1e-5, atol=1e-5)


def torch_mha_like(att, kdim=None, vdim=None):
    E = att.q_proj.in_features
    ref = torch.nn.MultiheadAttention(E, att.heads, batch_first=True, kdim=kdim, vdim=vdim)
    with torch.no_grad():
        if kdim is None:
            ref.in_proj_weight.copy_(torch.cat([att.q_proj.weight, att.k_proj.weight, att.v_proj.weight]))
        else:
            ref.q_proj_weight.copy_(att.q_proj.weight)
            ref.k_proj_weight.copy_(att.k_proj.weight)
            ref.v_proj_weight.copy_(att.v_proj.weight)
        ref.in_proj_bias.copy_(torch.cat([att.q_proj.bias, att.k_proj.bias, att.v_proj.bias]))
        ref.out_proj.weight.copy_(att.aggregator.proj.weight)
        ref.out_proj.bias.copy_(att.aggregator.proj.bias)
    return ref.eval()


@pytest.mark.parametrize("causal", [False, True])
def test_matches_torch_multihead_attention_self(causal):
    att = build(16, 16, 16, heads=4).eval()
    ref = torch_mha_like(att)
    B, T = 3, 6
    x = torch.randn(B, T, 16)
    lengths = [6, 4, 2]
    mask = pad_mask(lengths, T)
    key_padding_mask = ~mask.squeeze(1)  # torch: True = ignore
    attn_mask = torch.ones(T, T, dtype=torch.bool).triu(1) if causal else None
    with torch.no_grad():
        ref_out, ref_w = ref(x, x, x, key_padding_mask=key_padding_mask, attn_mask=attn_mask,
                             need_weights=True, average_attn_weights=True)
        out_fused, _ = att(x, x, x, mask, causal=causal)
        out, w = att(x, x, x, mask, causal=causal, need_weights=True)
    torch.testing.assert_close(out_fused, ref_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    assert w.shape == (B, 4, T, T)
    torch.testing.assert_close(w.mean(dim=1), ref_w, rtol=1e-5, atol=1e-5)


def test_matches_torch_multihead_attention_cross():
    att = build(12, 5, 7, heads=3).eval()
    ref = torch_mha_like(att, kdim=5, vdim=7)
    q, k, v = torch.randn(2, 4, 12), torch.randn(2, 6, 5), torch.randn(2, 6, 7)
    mask = pad_mask([6, 3], 6)
    with torch.no_grad():
        ref_out, ref_w = ref(q, k, v, key_padding_mask=~mask.squeeze(1))
        out, w = att(q, k, v, mask, need_weights=True)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w.mean(dim=1), ref_w, rtol=1e-5, atol=1e-5)


def test_padded_keys_get_zero_weight_and_do_not_leak():
    att = build(8, 8, 8, heads=2).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    mask = pad_mask([5, 3], 5)
    ctx, w = att(x, x, x, mask, need_weights=True)
    assert (w[1, :, :, 3:] == 0).all()
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 2, 5, dtype=torch.float64))
    x2 = x.clone()
    x2[1, 3:] = 1e3 * torch.randn(2, 8, dtype=torch.float64)
    for nw in (True, False):
        out2, _ = att(x, x2, x2, mask, need_weights=nw)
        torch.testing.assert_close(out2, ctx, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("need_weights", [True, False])
def test_shared_kv(need_weights):
    att = build(6, 8, 8, heads=2, shared_kv=True).double()
    assert att.v_proj is None
    assert sum(p.numel() for p in att.parameters()) == (
        6 * 6 + 6 + 8 * 6 + 6 + 6 * 6 + 6)  # q_proj, k_proj, concat_proj: no v_proj
    q = torch.randn(2, 3, 6, dtype=torch.float64)
    k = torch.randn(2, 4, 8, dtype=torch.float64)
    mask = pad_mask([4, 2], 4)
    for v in (k, torch.randn(2, 4, 8, dtype=torch.float64)):  # same tensor, and separate values
        ctx, _ = att(q, k, v, mask, need_weights=need_weights)
        exp_ctx, _ = mha_by_hand(att, q, k, v, mask)  # uses k_proj for the values
        torch.testing.assert_close(ctx, exp_ctx, rtol=1e-10, atol=1e-12)


def test_shared_kv_needs_equal_dims():
    with pytest.raises(ValueError, match="shared_kv"):
        build(6, 8, 5, heads=2, shared_kv=True)


def test_query_by_query_mask_shape():
    att = build(8, 8, 8, heads=2).double()
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    mask = torch.rand(2, 4, 4) > 0.3
    mask[..., 0] = True
    ctx, w = att(x, x, x, mask, need_weights=True)
    assert (w.masked_select(~mask.unsqueeze(1).expand_as(w)) == 0).all()
    torch.testing.assert_close(ctx, mha_by_hand(att, x, x, x, mask)[0], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("autocast", [True, False])
def test_bf16_attention_on_the_cpu_computes_in_float32(autocast):
    """On the CPU the fused kernel runs in float32 for bf16 inputs (its bf16 backward is several
    times slower there), under bf16 autocast (``bf16-mixed``) and with bf16 tensors
    (``bf16-true``): the context is float32 attention of the same inputs rounded once to bf16 (a
    bf16 kernel rounds inside and differs), and gradients flow back in bf16."""
    from attnflow.blocks.attention.functional import sdpa

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 7, 8).to(torch.bfloat16).requires_grad_() for _ in range(3))
    mask = torch.arange(7) < torch.tensor([7, 4]).view(2, 1, 1, 1)  # (B, 1, 1, Tk)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        out = sdpa(q, k, v, attn_mask=mask, scale=0.5)
    by_hand = (q.float() @ k.float().transpose(-1, -2) * 0.5).masked_fill(~mask, float("-inf"))
    expected = (by_hand.softmax(-1) @ v.float()).to(torch.bfloat16)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, F.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), attn_mask=mask, scale=0.5).to(torch.bfloat16))
    assert (out.float() - expected.float()).abs().max() <= 2 ** -7 * expected.float().abs().max()
    bf16_kernel = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.5)
    assert not torch.equal(out, bf16_kernel)  # the rounding inside the bf16 kernel shows
    out.float().sum().backward()
    assert q.grad.dtype == torch.bfloat16 and q.grad.abs().sum() > 0


def test_a_multihead_block_under_bf16_autocast_trains_on_the_cpu():
    att = build(16, 16, 16, heads=4, scorer={"name": "scaled_dot"}, aggregator={"name": "concat_proj"})
    x = torch.randn(2, 5, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = att(x, x, x, mask=pad_mask([5, 3], 5))
    assert out.dtype == torch.bfloat16
    out.float().square().sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in att.parameters())
