"""Transformer decoder: causal mask, memory padding, step == teacher forcing, reorder, structure."""

import pytest
import torch

from attnflow.blocks.attention.relative_multihead import RelativeMultiHeadAttention
from attnflow.blocks.decoders.transformer import TransformerDecoderLayer
from attnflow.config.registry import DECODERS

from test_encoder_transformer import ffn, ln, mha


def build(scorer=None, **kw):
    attention = {"name": "multihead", "heads": 2, **({"scorer": scorer} if scorer else {})}
    cfg = {"name": "transformer_decoder", "d_model": 8, "layers": 2, "ffn_dim": 16,
           "attention": attention, **kw}
    return DECODERS.build(cfg, 11, 6, 6).eval()


def inputs(B=3, T=5, S=4):
    tgt = torch.randint(0, 11, (B, T))
    memory = torch.randn(B, S, 6)
    mask = torch.arange(S) < torch.tensor([4, 2, 3][:B]).unsqueeze(-1)
    return tgt, memory * mask.unsqueeze(-1), mask


def test_shapes_and_weights():
    dec = build()
    tgt, memory, mask = inputs()
    logits, w = dec(tgt, memory, mask, None, need_weights=True)
    assert logits.shape == (3, 5, 11) and w.shape == (3, 5, 2, 4)
    assert torch.allclose(w.sum(-1), torch.ones(3, 5, 2), atol=1e-5)
    assert w[1, :, :, 2:].abs().sum() == 0  # padded source positions get no weight
    assert dec(tgt, memory, mask, None)[1] is None


@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "relative"])
def test_causal_mask_hides_the_future(positional):
    dec = build(positional={"name": positional})
    tgt, memory, mask = inputs()
    logits, _ = dec(tgt, memory, mask, None)
    changed = tgt.clone()
    changed[:, 3] = (changed[:, 3] + 1) % 11
    logits2, _ = dec(changed, memory, mask, None)
    assert torch.allclose(logits[:, :3], logits2[:, :3], atol=1e-5)
    assert not torch.allclose(logits[:, 3:], logits2[:, 3:], atol=1e-3)


def test_padded_memory_is_ignored():
    dec = build()
    tgt, memory, mask = inputs()
    logits, _ = dec(tgt, memory, mask, None)
    noisy = memory.clone()
    noisy[1, 2:] = 50.0
    assert torch.allclose(dec(tgt, noisy, mask, None)[0], logits, atol=1e-5)


@pytest.mark.parametrize("kw", [{}, {"norm": "pre"}, {"positional": {"name": "relative", "max_distance": 2}},
                                {"positional": {"name": "learned"}}, {"scorer": {"name": "general"}},
                                # scorers whose prepared keys differ in shape from the raw keys
                                {"scorer": {"name": "additive", "hidden_dim": 5}},
                                {"scorer": {"name": "mlp", "hidden_dim": 5}}, {"scorer": {"name": "gat"}},
                                {"scorer": {"name": "additive"},
                                 "positional": {"name": "relative", "max_distance": 2}}])
def test_step_with_cache_equals_teacher_forcing(kw):
    dec = build(**kw)
    tgt, memory, mask = inputs()
    forced, w_forced = dec(tgt, memory, mask, None, need_weights=True)
    state = dec.start(memory, mask, None)
    steps, ws = [], []
    for t in range(tgt.shape[1]):
        lg, state, w = dec.step(tgt[:, t], state, need_weights=True)
        steps.append(lg)
        ws.append(w)
    assert torch.allclose(torch.stack(steps, 1), forced, atol=1e-5)
    assert torch.allclose(torch.stack(ws, 1), w_forced, atol=1e-5)


def test_reorder_selects_rows_of_the_state():
    dec = build()
    tgt, memory, mask = inputs()
    state = dec.start(memory, mask, None)
    for t in range(2):
        _, state, _ = dec.step(tgt[:, t], state)
    index = torch.tensor([2, 2, 0])
    moved = dec.reorder(state, index)
    lg, _, _ = dec.step(tgt[index, 2], moved)
    ref = dec.start(memory[index], mask[index], None)
    for t in range(2):
        _, ref, _ = dec.step(tgt[index, t], ref)
    want, _, _ = dec.step(tgt[index, 2], ref)
    assert torch.allclose(lg, want, atol=1e-5)


def test_tied_output_and_relative_self_attention_only():
    dec = build(positional={"name": "relative"})
    assert dec.out.weight is dec.embedding.weight
    assert dec.layers[0].self_attn.max_distance == 16  # relative terms in self-attention only
    assert dec.layers[0].cross_attn.max_distance is None
    chosen = build(attention={"name": "relative_multihead", "heads": 2, "max_distance": 3})
    assert isinstance(chosen.layers[0].self_attn, RelativeMultiHeadAttention)
    assert chosen.layers[0].self_attn.max_distance == 3 and chosen.layers[0].cross_attn.max_distance is None
    assert build(tie_output=False).out.weight is not build(tie_output=False).embedding.weight


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_layer_structure_equals_hand_composition(norm):
    cfg = {"name": "multihead", "heads": 2}
    layer = TransformerDecoderLayer(8, 6, 16, cfg, None, 0.1, 0.0, norm).eval()
    for n in (layer.norm1, layer.norm2, layer.norm3):
        torch.nn.init.normal_(n.weight)
        torch.nn.init.normal_(n.bias)
    x, memory = torch.randn(2, 4, 8), torch.randn(2, 3, 6)
    mmask = torch.tensor([[True, True, True], [True, True, False]])
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    with torch.no_grad():
        got, _ = layer(x, memory, mmask.unsqueeze(1))

        def self_att(h):  # causal: query t sees keys ≤ t (the mask helper takes (B, T) per query row)
            out = torch.empty_like(h)
            for t in range(4):
                out[:, t] = mha(layer.self_attn, h[:, : t + 1], torch.ones(2, t + 1, dtype=torch.bool))[:, t]
            return out

        def cross(h):
            att = layer.cross_attn
            B, T, _ = h.shape
            J, d = att.heads, att.head_dim
            q = (h @ att.q_proj.weight.T + att.q_proj.bias).view(B, T, J, d).transpose(1, 2)
            k = (memory @ att.k_proj.weight.T + att.k_proj.bias).view(B, 3, J, d).transpose(1, 2)
            v = (memory @ att.v_proj.weight.T + att.v_proj.bias).view(B, 3, J, d).transpose(1, 2)
            s = (q @ k.transpose(-1, -2) / d ** 0.5).masked_fill(~mmask[:, None, None, :], float("-inf"))
            return att.aggregator.proj((s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, J * d))

        if norm == "post":
            a = ln(layer.norm1, x + self_att(x))
            b = ln(layer.norm2, a + cross(a))
            want = ln(layer.norm3, b + ffn(layer.ffn, b))
        else:
            a = x + self_att(ln(layer.norm1, x))
            b = a + cross(ln(layer.norm2, a))
            want = b + ffn(layer.ffn, ln(layer.norm3, b))
    assert causal.sum() == 10
    assert torch.allclose(got, want, atol=1e-5)
