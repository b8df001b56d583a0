"""Transformer encoder: shapes, padding, post-LN / pre-LN structure by hand, relative positions."""

import pytest
import torch
import torch.nn.functional as F

from attnflow.blocks.attention.multihead import MultiHeadAttention
from attnflow.blocks.encoders.transformer import TransformerEncoderLayer
from attnflow.blocks.positional.sinusoidal import sinusoid_table
from attnflow.blocks.scorers.general import GeneralScorer
from attnflow.config.registry import ENCODERS


def build(norm="post", scorer=None, **kw):
    attention = {"name": "multihead", "heads": 2, **({"scorer": scorer} if scorer else {})}
    return ENCODERS.build({"name": "transformer_encoder", "layers": 2, "ffn_dim": 16,
                           "norm": norm, "attention": attention, **kw}, 8).eval()


def lengths_mask(lengths, T):
    return torch.arange(T) < torch.tensor(lengths).unsqueeze(-1)


def test_shapes_zero_padding_and_final_is_the_mean_of_real_outputs():
    enc = build()
    x = torch.randn(3, 5, 8)
    out, final = enc(x, torch.tensor([5, 3, 1]))
    assert out.shape == (3, 5, 8) and final.shape == (3, 8) and enc.output_dim == 8
    assert out[1, 3:].abs().sum() == 0 and out[2, 1:].abs().sum() == 0
    assert torch.allclose(final[1], out[1, :3].mean(0), atol=1e-6)


def test_padding_positions_do_not_change_real_outputs():
    enc = build()
    x = torch.randn(2, 6, 8)
    lengths = torch.tensor([6, 3])
    out, _ = enc(x, lengths)
    y = x.clone()
    y[1, 3:] = torch.randn(3, 8) * 100
    out2, _ = enc(y, lengths)
    assert torch.allclose(out, out2, atol=1e-5)
    alone, _ = enc(x[1:2, :3], torch.tensor([3]))  # the same sentence without padding
    assert torch.allclose(alone[0], out[1, :3], atol=1e-5)


def mha(att, x, mask):
    """Attention by hand from the block's weights: J heads, softmax over real keys, W^O."""
    B, T, D = x.shape
    J, d = att.heads, att.head_dim
    q, k, v = (F.linear(x, p.weight, p.bias).view(B, T, J, d).transpose(1, 2)
               for p in (att.q_proj, att.k_proj, att.v_proj))
    s = q @ k.transpose(-1, -2) / d ** 0.5
    s = s.masked_fill(~mask[:, None, None, :], float("-inf"))
    c = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, J * d)
    return att.aggregator.proj(c)


def ffn(f, h):
    return f.linear2(torch.relu(f.linear1(h)))


def ln(norm, h):
    mu = h.mean(-1, keepdim=True)
    var = ((h - mu) ** 2).mean(-1, keepdim=True)
    return (h - mu) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_layer_structure_equals_hand_composition(norm):
    layer = TransformerEncoderLayer(8, 16, {"name": "multihead", "heads": 2}, None, 0.1, 0.0, norm).eval()
    for n in (layer.norm1, layer.norm2):  # non-trivial γ, β so LN placement matters
        torch.nn.init.normal_(n.weight)
        torch.nn.init.normal_(n.bias)
    x = torch.randn(2, 5, 8)
    mask = lengths_mask([5, 3], 5)
    with torch.no_grad():
        got = layer(x, mask.unsqueeze(1))
        if norm == "post":  # h″ = LN(h + MH(h)), z = LN(h″ + FFN(h″))
            h2 = ln(layer.norm1, x + mha(layer.self_attn, x, mask))
            want = ln(layer.norm2, h2 + ffn(layer.ffn, h2))
        else:  # h″ = h + MH(LN h), z = h″ + FFN(LN h″)
            h2 = x + mha(layer.self_attn, ln(layer.norm1, x), mask)
            want = h2 + ffn(layer.ffn, ln(layer.norm2, h2))
    assert torch.allclose(got[0], want[0], atol=1e-5)
    assert torch.allclose(got[1, :3], want[1, :3], atol=1e-5)


def test_stack_adds_sinusoids_and_pre_ln_ends_with_a_norm():
    enc = build(norm="pre")
    x = torch.randn(1, 4, 8)
    h = x + sinusoid_table(4, 8)
    for layer in enc.layers:
        h = layer(h, None)
    want = enc.final_norm(h)
    got, _ = enc(x, torch.tensor([4]))
    assert torch.allclose(got, want, atol=1e-5)
    assert isinstance(build(norm="post").final_norm, torch.nn.Identity)


def test_relative_positional_switches_attention_and_scorer_override():
    enc = build(positional={"name": "relative", "max_distance": 3}, scorer={"name": "general"})
    att = enc.layers[0].self_attn
    assert isinstance(att, MultiHeadAttention) and att.max_distance == 3
    assert isinstance(att.scorer, GeneralScorer)
    out, _ = enc(torch.randn(2, 5, 8), torch.tensor([5, 2]))
    assert out.shape == (2, 5, 8)
    plain = build().layers[0].self_attn
    assert type(plain) is MultiHeadAttention and plain.max_distance is None


def test_input_projection_and_dropout_train_mode():
    enc = ENCODERS.build({"name": "transformer_encoder", "d_model": 16, "layers": 1,
                          "attention": {"name": "multihead", "heads": 4}, "ffn_dim": 32}, 8)
    assert enc.output_dim == 16
    x = torch.randn(2, 4, 8)
    a, _ = enc(x, torch.tensor([4, 4]))
    b, _ = enc(x, torch.tensor([4, 4]))
    assert not torch.allclose(a, b)  # dropout 0.1 is on in training mode
