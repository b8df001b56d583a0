"""The `bert` model (Devlin et al. 2019): preset sizes (≈110M / ≈340M), the tied MLM decoder, the
NSP head and the embeddings by hand, the translation encoder reused, padding, and the shared
scorer / positional / norm overrides."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnflow.blocks.encoders.transformer import TransformerEncoder
from attnflow.config.registry import ATTENTIONS, MODELS, ConfigError
from support import compose_cfg

V = 50


def preset(name, *overrides):
    """The model config of ``model=name`` with its defaults filled in (as attnflow-train builds it)."""
    return MODELS.validate(compose_cfg([f"model={name}", *overrides]).model)


def small(*overrides, vocab=V):
    cfg = preset("bert_mini", "model.d_model=32", "model.ffn_dim=64", "model.layers=2",
                 "model.max_len=16", *overrides)
    return MODELS.build(cfg, vocab_size=vocab, pad_id=0).eval()


def batch():
    """⟨CLS⟩=2 S ⟨SEP⟩=3 S′ ⟨SEP⟩ then padding 0; lengths 9, 6, 5."""
    ids = torch.tensor([[2, 10, 11, 12, 3, 20, 21, 22, 3],
                        [2, 13, 14, 3, 23, 3, 0, 0, 0],
                        [2, 15, 3, 24, 3, 0, 0, 0, 0]])
    seg = torch.tensor([[0, 0, 0, 0, 0, 1, 1, 1, 1],
                        [0, 0, 0, 0, 1, 1, 0, 0, 0],
                        [0, 0, 0, 1, 1, 0, 0, 0, 0]])
    return ids, seg, ids != 0


def count(model):
    return sum(p.numel() for p in model.parameters())  # a tied matrix counts once


def by_hand(V, d, N, f, P=512, S=2):
    """Devlin et al. 2019: embeddings (tokens, positions, segments, LN); per layer attention
    4(d² + d), FFN 2df + f + d, two LNs; pooler d² + d. Heads: MLM transform d² + d + LN, the
    decoder's bias V (its weight is the token embedding), NSP 2d + 2."""
    embeddings = V * d + P * d + S * d + 2 * d
    layer = 4 * (d * d + d) + 2 * d * f + f + d + 2 * 2 * d
    encoder_and_pooler = embeddings + N * layer + d * d + d
    return encoder_and_pooler, encoder_and_pooler + (d * d + d + 2 * d) + V + (2 * d + 2)


@pytest.mark.parametrize("name,sizes,published,hf_bert_model", [
    # bert-base-uncased / bert-large-uncased: BertModel (with pooler) has 109,482,240 and
    # 335,141,888 weights; the paper says 110M and 340M
    ("bert_base", (768, 12, 3072, 12), 110e6, 109_482_240),
    ("bert_large", (1024, 24, 4096, 16), 340e6, 335_141_888),
])
@pytest.mark.slow
def test_preset_parameter_counts(name, sizes, published, hf_bert_model):
    cfg = preset(name)
    d, N, f, J = sizes
    assert (cfg["d_model"], cfg["layers"], cfg["ffn_dim"]) == (d, N, f)
    assert ATTENTIONS.validate(cfg["attention"])["heads"] == J
    with torch.device("meta"):  # built only: no memory, no training
        model = MODELS.build(cfg, vocab_size=30522, pad_id=0)
    assert model.encoder.layers[0].self_attn.heads == J
    encoder_and_pooler, total = by_hand(30522, d, N, f)
    assert encoder_and_pooler == hf_bert_model
    heads = {"mlm_transform", "mlm_norm", "mlm_decoder", "nsp"}
    assert sum(p.numel() for n, p in model.named_parameters()
               if n.split(".")[0] not in heads) == encoder_and_pooler
    assert count(model) == total
    assert abs(total - published) / published < 0.02


def test_mini_and_small_presets():
    mini, small_ = preset("bert_mini"), preset("bert_small")
    assert (mini["d_model"], mini["layers"], mini["ffn_dim"]) == (256, 4, 1024)
    assert (small_["d_model"], small_["layers"], small_["ffn_dim"]) == (512, 4, 2048)
    assert [ATTENTIONS.validate(c["attention"])["heads"] for c in (mini, small_)] == [4, 8]
    assert mini["positional"]["name"] == "learned" and mini["activation"] == "gelu"


def test_mlm_decoder_is_the_token_embedding():
    model = small()
    assert model.mlm_decoder.weight is model.token_embedding.weight
    names = [n for n, _ in model.named_parameters()]
    assert "mlm_decoder.weight" not in names and "mlm_decoder.bias" in names
    for p in (model.mlm_transform.bias, model.mlm_norm.bias, model.mlm_decoder.bias):
        torch.nn.init.normal_(p)  # non-trivial, so each term matters
    h = torch.randn(3, 5, 32)
    E = model.token_embedding.weight
    t = F.layer_norm(F.gelu(h @ model.mlm_transform.weight.T + model.mlm_transform.bias), (32,),
                     model.mlm_norm.weight, model.mlm_norm.bias)
    assert torch.allclose(model.mlm_logits(h), t @ E.T + model.mlm_decoder.bias, atol=1e-5)
    model.mlm_logits(h).sum().backward()  # the MLM loss trains the embedding matrix
    assert E.grad is not None and E.grad.abs().sum() > 0


def test_nsp_head_is_Wy_tanh_Ws_z0_plus_bs_plus_by():
    model = small()
    for p in (model.pooler.bias, model.nsp.bias):
        torch.nn.init.normal_(p)
    ids, seg, mask = batch()
    hidden = model(ids, seg, mask)
    z0 = hidden[:, 0]
    pooled = torch.tanh(z0 @ model.pooler.weight.T + model.pooler.bias)
    want = pooled @ model.nsp.weight.T + model.nsp.bias
    assert torch.allclose(model.pooled(hidden), pooled, atol=1e-6)
    assert model.nsp_logits(hidden).shape == (3, 2)
    assert torch.allclose(model.nsp_logits(hidden), want, atol=1e-6)


def test_embeddings_are_LN_of_token_plus_segment_plus_position():
    model = small()
    torch.nn.init.normal_(model.embedding_norm.bias)
    ids, seg, mask = batch()
    seen = {}
    model.encoder.register_forward_pre_hook(lambda m, args: seen.update(x=args[0]))
    model(ids, seg, mask)
    e = (model.token_embedding.weight[ids] + model.segment_embedding.weight[seg]
         + model.positional.weight[: ids.shape[1]])
    want = F.layer_norm(e, (32,), model.embedding_norm.weight, model.embedding_norm.bias)
    assert torch.allclose(seen["x"], want, atol=1e-5)


def test_the_encoder_is_the_translation_encoder_with_a_gelu_ffn():
    model = small()
    translation = MODELS.build({"name": "transformer", "d_model": 16, "ffn_dim": 32,
                                "attention": {"name": "multihead", "heads": 2}},
                               src_vocab=V, tgt_vocab=V)
    assert type(model.encoder) is type(translation.encoder) is TransformerEncoder
    ffn = model.encoder.layers[0].ffn
    h = torch.randn(4, 32)
    assert torch.allclose(ffn(h), ffn.linear2(F.gelu(ffn.linear1(h))), atol=1e-6)
    tffn = translation.encoder.layers[0].ffn  # translation keeps ReLU
    h = torch.randn(4, 16)
    assert torch.allclose(tffn(h), tffn.linear2(torch.relu(tffn.linear1(h))), atol=1e-6)


def test_padding_does_not_change_real_tokens():
    model = small()
    ids, seg, mask = batch()
    hidden = model(ids, seg, mask)
    assert hidden.shape == (3, 9, 32) and hidden[1, 6:].abs().sum() == 0
    for row, n in ((1, 6), (2, 5)):
        alone = model(ids[row:row + 1, :n], seg[row:row + 1, :n], mask[row:row + 1, :n])
        assert torch.allclose(alone[0], hidden[row, :n], atol=1e-5)
    noisy = ids.masked_fill(~mask, 7)  # other ids at padding positions
    more = torch.cat([noisy, torch.full((3, 4), 9)], 1)  # and 4 more padding columns
    padded = model(more, torch.cat([seg, torch.ones(3, 4, dtype=torch.long)], 1),
                   torch.cat([mask, torch.zeros(3, 4, dtype=torch.bool)], 1))
    assert torch.allclose(padded[:, :9][mask], hidden[mask], atol=1e-5)


@pytest.mark.parametrize("overrides", [["scorer=dot"], ["positional=relative"], ["model.norm=pre"],
                                       ["positional=sinusoidal", "scorer=general"]])
def test_shared_overrides_build_and_run(overrides):
    model = small(*overrides)
    att = model.encoder.layers[0].self_attn
    if "scorer=dot" in overrides:
        assert type(att.scorer).__name__ == "DotScorer"
    if "positional=relative" in overrides:  # no absolute P; every layer carries relative terms
        assert model.positional is None
        assert all(layer.self_attn.max_distance == 16 for layer in model.encoder.layers)
    else:
        assert att.max_distance is None
    if "model.norm=pre" in overrides:
        assert isinstance(model.encoder.final_norm, torch.nn.LayerNorm) and model.encoder.layers[0].pre
    ids, seg, mask = batch()
    hidden = model.train()(ids, seg, mask)
    loss = F.cross_entropy(model.mlm_logits(hidden[mask]), ids[mask]) + \
        F.cross_entropy(model.nsp_logits(hidden), torch.tensor([0, 1, 0]))
    loss.backward()
    assert torch.isfinite(loss) and model.token_embedding.weight.grad.abs().sum() > 0


def test_bad_inputs_are_refused_with_the_reason():
    model = small()
    ids, seg, mask = batch()
    with pytest.raises(ValueError, match="prefix"):
        model(ids, seg, mask.flip(1))
    with pytest.raises(ValueError, match="max_len=16"):
        model(torch.full((1, 17), 5), torch.zeros(1, 17, dtype=torch.long),
              torch.ones(1, 17, dtype=torch.bool))
    with pytest.raises(ConfigError, match="positional.max_len"):
        small("model.max_len=1024")


def test_attention_maps_of_every_layer():
    model = small("attention.heads=2")
    ids, seg, mask = batch()
    hidden, maps = model(ids, seg, mask, need_weights=True)
    assert torch.allclose(hidden, model(ids, seg, mask), atol=1e-6)  # the same pass
    assert len(maps) == 2 and all(m.shape == (3, 2, 9, 9) for m in maps)
    # layer 1 by hand (eval: no dropout): softmax over real keys of (W_q x)(W_k x)ᵀ/√d per head
    att, x = model.encoder.layers[0].self_attn, model.embed(ids, seg)
    q, k = (F.linear(x, p.weight, p.bias).view(3, 9, 2, 16).transpose(1, 2)
            for p in (att.q_proj, att.k_proj))
    s = (q @ k.transpose(-1, -2) / 4.0).masked_fill(~mask[:, None, None, :], float("-inf"))
    want = s.softmax(-1)
    assert torch.allclose(maps[0][0], want[0], atol=1e-5)
    assert torch.allclose(maps[0][2, :, :5], want[2, :, :5], atol=1e-5)  # real query rows
    assert maps[1][1, :, :6, 6:].abs().sum() == 0  # padding keys get no weight


def test_token_head_is_a_linear_map_of_every_hidden_state():
    cfg = preset("bert_mini", "model.d_model=32", "model.ffn_dim=64", "model.layers=2",
                 "model.max_len=16", "model.head=token")
    model = MODELS.build(cfg, vocab_size=V, pad_id=0, num_classes=5).eval()
    assert not hasattr(model, "mlm_decoder") and not hasattr(model, "nsp")
    torch.nn.init.normal_(model.classifier.bias)
    ids, seg, mask = batch()
    hidden = model(ids, seg, mask)
    logits = model.token_logits(hidden)
    assert logits.shape == (3, 9, 5)
    W, b = model.classifier.weight, model.classifier.bias  # eval: dropout is the identity
    assert torch.allclose(logits[1, 4], W @ hidden[1, 4] + b, atol=1e-6)
    assert torch.allclose(logits, hidden @ W.T + b, atol=1e-6)
    model.train()  # classifier dropout 0.1 (the default) acts in training
    assert not torch.allclose(model.token_logits(hidden), logits)


def test_classifier_dropout_is_a_probability():
    cfg = preset("bert_mini", "model.d_model=32", "model.ffn_dim=64", "model.layers=2",
                 "model.max_len=16")
    with pytest.raises(ConfigError, match=r"field 'classifier_dropout' \(at 'model.classifier_dropout'\) "
                                          r"must be in \[0, 1\), got 1.0"):
        MODELS.build({**cfg, "head": "sequence", "classifier_dropout": 1.0}, vocab_size=V,
                     pad_id=0, num_classes=2)


def test_each_head_names_the_interface_of_its_data_and_task():
    from attnflow.config.registry import DATA, TASKS

    heads = MODELS.get("bert").head_interfaces
    assert heads["pretraining"] == DATA.get("bert_pretraining").interface == \
        TASKS.get("bert_pretraining").interface
    assert heads["sequence"] == DATA.get("text_classification").interface == \
        TASKS.get("text_classification").interface


@pytest.mark.slow
def test_the_composition_check_reads_the_head_before_any_work():
    """BERT's batches depend on model.head: the check before any work reads the config's head
    (pretraining: MLM/NSP pairs; sequence: labelled texts), so a head that does not fit the data
    is refused naming what each side works on, and the fitting ones pass."""
    from attnflow.config.registry import ConfigError
    from attnflow.training.validate import resolve_config
    from support import compose_cfg

    for fits in (["experiment=bert_pretrain_imdb"], ["experiment=bert_imdb"]):
        resolve_config(compose_cfg(fits))
    for wrong, works_on in ((["experiment=bert_imdb", "model.head=pretraining"], "sentence pairs"),
                            (["experiment=bert_pretrain_imdb", "model.head=sequence"], "labelled texts"),
                            (["experiment=han_imdb", "model=bert_mini"], "sentence pairs")):
        with pytest.raises(ConfigError, match=f"model 'bert' works on [^;]*{works_on}"):
            resolve_config(compose_cfg(wrong))
