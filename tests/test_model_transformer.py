"""The `transformer` model: interface, tied embeddings, base size (~65M), greedy == teacher forcing,
positional=relative, and clear errors where an option cannot apply."""

from __future__ import annotations

import pytest
import torch

from attnflow.config.registry import ATTENTIONS, MODELS, ConfigError
from attnflow.training.validate import resolve_config
from omegaconf import OmegaConf
from support import compose_cfg


def small(**kw):
    attention = {"name": "multihead", "heads": 2, **({"scorer": kw.pop("scorer")} if "scorer" in kw else {})}
    cfg = {"name": "transformer", "d_model": 16, "ffn_dim": 32, "encoder_layers": 2,
           "decoder_layers": 2, "attention": attention, **kw}
    return MODELS.build(cfg, src_vocab=13, tgt_vocab=13, pad_id=0)


def batch():
    src = torch.randint(3, 13, (3, 6))
    lengths = torch.tensor([6, 4, 2])
    src = src.masked_fill(torch.arange(6) >= lengths.unsqueeze(-1), 0)
    return src, lengths, torch.randint(3, 13, (3, 5))


def test_interface_shapes():
    model = small()
    src, lengths, tgt = batch()
    logits, weights = model(src, lengths, tgt, need_weights=True)
    assert logits.shape == (3, 5, 13) and weights.shape == (3, 5, 2, 6)
    memory, mask, final = model.encode(src, lengths)
    assert memory.shape == (3, 6, 16) and mask.dtype == torch.bool and final.shape == (3, 16)
    assert mask.tolist()[2] == [True, True, False, False, False, False]


def test_tied_embeddings_share_one_matrix():
    model = small()
    E = model.src_embedding.weight
    assert model.decoder.embedding.weight is E and model.decoder.out.weight is E
    untied = small(tie_embeddings="none")
    names = {n for n, _ in untied.named_parameters()}
    assert {"decoder.embedding.weight", "decoder.out.weight"} <= names
    n_tied = sum(p.numel() for p in model.parameters())
    assert sum(p.numel() for p in untied.parameters()) == n_tied + 2 * 13 * 16


def test_tie_all_needs_a_shared_vocabulary():
    with pytest.raises(ConfigError, match="shared vocabulary"):
        MODELS.build({"name": "transformer", "d_model": 16}, src_vocab=10, tgt_vocab=12)
    model = MODELS.build({"name": "transformer", "d_model": 16, "tie_embeddings": "decoder"},
                         src_vocab=10, tgt_vocab=12)
    assert model.decoder.out.weight is model.decoder.embedding.weight
    assert model.decoder.embedding.weight is not model.src_embedding.weight


def test_embeddings_are_scaled_by_sqrt_d():
    model = small(dropout=0.0, positional={"name": "none"}).eval()
    src, lengths, _ = batch()
    seen = {}
    model.encoder.input_proj.register_forward_hook(lambda m, i, o: seen.setdefault("x", i[0]))
    model.encode(src, lengths)
    assert torch.allclose(seen["x"], model.src_embedding(src) * 4.0)  # √16


def test_base_preset_has_about_65M_parameters_with_a_37k_shared_vocabulary():
    cfg = MODELS.validate(compose_cfg(["model=transformer_base"]).model)  # defaults filled in
    assert (cfg["d_model"], cfg["ffn_dim"], cfg["encoder_layers"]) == (512, 2048, 6)
    assert ATTENTIONS.validate(cfg["attention"])["heads"] == 8
    with torch.device("meta"):  # no memory, no initialisation work
        model = MODELS.build(cfg, src_vocab=37000, tgt_vocab=37000, pad_id=0)
    n = sum(p.numel() for p in model.parameters())
    # by hand: embeddings 37000·512; encoder layer 4·(512²+512) + 2·512·2048 + 2048 + 512 + 4·512;
    # decoder layer one more attention and LayerNorm; output bias 37000
    att, ffn = 4 * (512 * 512 + 512), 2 * 512 * 2048 + 2048 + 512
    by_hand = 37000 * 512 + 6 * (att + ffn + 4 * 512) + 6 * (2 * att + ffn + 6 * 512) + 37000
    assert n == by_hand
    assert 60e6 < n < 66e6  # Vaswani et al. 2017, Table 3: 65M


@pytest.mark.parametrize("kw", [{}, {"positional": {"name": "relative", "max_distance": 3}},
                                {"norm": "pre"}])
def test_greedy_equals_teacher_forced_argmax_on_its_own_prefix(kw):
    model = small(**kw).eval()
    src, lengths, _ = batch()
    tokens, weights = model.greedy(src, lengths, bos_id=1, eos_id=2, max_len=7, need_weights=True)
    tgt_in = torch.cat([torch.ones(3, 1, dtype=torch.long), tokens[:, :-1]], 1)
    logits, forced_w = model(src, lengths, tgt_in, need_weights=True)
    done = torch.zeros(3, dtype=torch.bool)
    for t in range(tokens.shape[1]):  # until a row has produced ⟨EOS⟩ the tokens are the argmax
        assert torch.equal(tokens[~done, t], logits[~done, t].argmax(-1))
        done |= tokens[:, t] == 2
    assert torch.allclose(weights, forced_w, atol=1e-5)


def test_positional_relative_makes_every_self_attention_relative():
    cfg = OmegaConf.to_container(compose_cfg(["model=transformer", "positional=relative",
                                              "positional.max_distance=4"]).model, resolve=True)
    model = MODELS.build(cfg, src_vocab=10, tgt_vocab=10)
    for layer in [*model.encoder.layers, *model.decoder.layers]:
        assert layer.self_attn.max_distance == 4 and layer.self_attn.rel_k.shape == (9, 32)
    for layer in model.decoder.layers:
        assert layer.cross_attn.max_distance is None and not hasattr(layer.cross_attn, "rel_k")
    assert not model.encoder.positional.encoding(5).any()  # no absolute encoding


def test_scorer_override_reaches_every_head():
    cfg = OmegaConf.to_container(compose_cfg(["model=transformer", "scorer=dot"]).model, resolve=True)
    model = MODELS.build(cfg, src_vocab=10, tgt_vocab=10)
    names = {type(m.scorer).registry_name for m in model.modules() if hasattr(m, "scorer")}
    assert names == {"dot"}


@pytest.mark.parametrize("overrides, expected", [
    (["positional=relative"], ["positional=relative", "model 'seq2seq' does not use", "attention"]),
    (["positional=learned"], ["positional=learned", "does nothing"]),
    (["model=transformer", "model.d_model=30"], ["not divisible by heads 8", "attention.heads"]),
    (["model=transformer", "attention=single", "positional=relative"], ["'single' has no relative"]),
    (["model=transformer", "attention=relative_multihead", "attention.max_distance=3",
      "positional=relative", "positional.max_distance=4"], ["max_distance=3", "δ=4"]),
])
def test_options_that_cannot_apply_are_config_errors(overrides, expected):
    with pytest.raises(ConfigError) as err:
        cfg = resolve_config(compose_cfg(overrides))
        MODELS.build(cfg["model"], src_vocab=10, tgt_vocab=10)
    for text in expected:
        assert text in str(err.value)


def test_rnn_decoder_with_relative_attention_is_a_config_error():
    cfg = OmegaConf.to_container(compose_cfg(["attention=relative_multihead"]).model, resolve=True)
    with pytest.raises(ConfigError, match="i − j"):
        MODELS.build(cfg, src_vocab=10, tgt_vocab=10)


@pytest.mark.parametrize("kw", [{}, {"scorer": {"name": "additive"}}])
def test_beam_search_one_is_greedy_and_static_memory_changes_nothing(kw, monkeypatch):
    from attnflow.blocks.decoders.decoding import beam_search, greedy_decode

    torch.manual_seed(0)
    model = small(**kw).double().eval()
    src, lengths, _ = batch()
    g, gw = greedy_decode(model, src, lengths, 1, 2, 7, need_weights=True)
    b, bw = beam_search(model, src, lengths, 1, 2, 7, beam_size=1, need_weights=True)
    assert torch.equal(g, b) and torch.allclose(gw, bw)
    fast = beam_search(model, src, lengths, 1, 2, 7, beam_size=3, length_penalty=0.6,
                       need_weights=True, return_scores=True)
    monkeypatch.setattr(type(model.decoder), "static_state", ())
    full = beam_search(model, src, lengths, 1, 2, 7, beam_size=3, length_penalty=0.6,
                       need_weights=True, return_scores=True)
    assert torch.equal(fast[0], full[0]) and torch.equal(fast[1], full[1]) and torch.equal(fast[2], full[2])


@pytest.mark.parametrize("overrides, gives, wants", [
    (["experiment=reverse_transformer", "aggregator=mean"], 16, 64),
    (["experiment=reverse_transformer", "aggregator.out_dim=32"], 32, 64),
    (["experiment=reverse_transformer", "aggregator=concat", "attention.head_dim=8"], 32, 64),
    (["experiment=bert_pretrain_imdb", "aggregator=mean"], 64, 256),
])
def test_an_aggregator_that_does_not_give_d_model_is_refused_before_any_work(overrides, gives, wants,
                                                                             tmp_path):
    """A Transformer layer adds the attention's output to its d_model residual: `aggregator=mean`
    (one head's size) passed the meta-device build and failed at the sanity check with a tensor
    size RuntimeError, after config.yaml was written and the data made."""
    from attnflow.training.run import train

    model = OmegaConf.to_container(compose_cfg(overrides).model, resolve=True)
    attention = ATTENTIONS.build(model["attention"], wants, wants, wants)  # what a layer would get
    assert attention.output_dim == gives != wants
    with pytest.raises(ConfigError) as err:
        train(compose_cfg(overrides), tmp_path)
    message = str(err.value)
    assert f"gives {gives} features" in message and f"residual stream of {wants} features" in message
    assert "concat_proj" in message
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("extra", [["aggregator=concat"], ["aggregator.out_dim=64"], []])
def test_aggregators_that_give_d_model_still_build_and_run(extra):
    cfg = resolve_config(compose_cfg(["experiment=reverse_transformer", *extra]))["model"]
    model = MODELS.build(cfg, src_vocab=13, tgt_vocab=13, pad_id=0)
    src, lengths, tgt = batch()
    assert model(src, lengths, tgt)[0].shape[:2] == (3, 5)
