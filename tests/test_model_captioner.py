"""The captioning model (Xu et al. 2015): an image encoder's L regions as the memory of
translation's decoders. Shapes and masks, the initial state from the mean annotation vector,
the encoder fitting what the data gives (refused before any data is made), and every scorer,
attention block and decoder by override."""

from __future__ import annotations

import pytest
import torch

from attnflow.config.registry import MODELS, ConfigError
from attnflow.training.validate import resolve_config
from support import compose_cfg

V = 11


def build(**model):
    cfg = {"name": "captioner", "encoder": {"name": "cnn", "channels": [4, 8]},
           "decoder": {"name": "rnn_attention", "cell": "lstm", "embed_dim": 6, "hidden_dim": 8},
           **model}
    torch.manual_seed(0)
    return MODELS.build(cfg, tgt_vocab=V, pad_id=0, in_channels=3, path="model")


def test_forward_gives_logits_and_a_distribution_over_the_regions():
    m = build().eval()
    images = torch.rand(2, 3, 20, 24)  # two 2×2 poolings: a 5 × 6 grid
    tgt_in = torch.tensor([[1, 4, 5, 0], [1, 6, 0, 0]])
    logits, w = m(images, None, tgt_in, need_weights=True)
    assert logits.shape == (2, 4, V)
    assert w.shape == (2, 4, 1, 30) and m.grid(images) == (5, 6)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 1))
    memory, mask, init = m.encode(images)
    assert memory.shape == (2, 30, 8) and bool(mask.all()) and mask.shape == (2, 30)
    # Xu et al. §3.1.2: the initial state from the mean annotation vector (1/L) Σ_i a_i
    regions, _ = m.encoder(images)
    torch.testing.assert_close(init, regions.sum(1) / 30)
    h0 = m.decoder.start(memory, mask, init)["hidden"][0]
    torch.testing.assert_close(h0, torch.tanh(m.decoder.init(regions.mean(1))))
    # region boxes: row-major 4-pixel cells of the 20 × 24 image
    boxes = m.region_boxes(images)
    assert boxes.shape == (30, 4) and boxes[7].tolist() == [4, 4, 8, 8]


def test_greedy_decoding_is_the_argmax_of_teacher_forcing_on_its_own_output():
    m = build().eval()
    images = torch.rand(3, 3, 16, 16)
    tokens, w = m.greedy(images, None, bos_id=1, eos_id=2, max_len=5, need_weights=True)
    tgt_in = torch.cat([torch.ones(3, 1, dtype=torch.long), tokens[:, :-1]], 1)
    logits, w_tf = m(images, None, tgt_in, need_weights=True)
    first_eos = [(row == 2).nonzero()[0].item() if (row == 2).any() else len(row) for row in tokens]
    for b, n in enumerate(first_eos):
        assert torch.equal(logits[b, : n + 1].argmax(-1)[: tokens.shape[1]], tokens[b, : n + 1])
        torch.testing.assert_close(w[b, : n + 1], w_tf[b, : n + 1])
    beam, _ = m.beam_search(images, None, 1, 2, 5, beam_size=1)
    assert torch.equal(beam, tokens)


def test_the_output_depends_on_the_image():
    m = build().eval()
    tgt_in = torch.tensor([[1, 4, 5]])
    a, _ = m(torch.zeros(1, 3, 16, 16), None, tgt_in)
    b, _ = m(torch.ones(1, 3, 16, 16), None, tgt_in)
    assert not torch.allclose(a, b)


@pytest.mark.parametrize("override", ["scorer=dot", "scorer=general", "scorer=additive",
                                      "scorer=scaled_dot", "attention=multihead",
                                      "model.decoder.name=luong"])
@pytest.mark.slow
def test_every_scorer_and_attention_block_by_override(override):
    # (dot and scaled_dot compare the decoder state with the regions directly: equal sizes)
    cfg = resolve_config(compose_cfg(["experiment=caption_shapes", override,
                                      "model.encoder.channels=[8,16]", "model.decoder.hidden_dim=16"]))
    if override == "attention=multihead":
        assert cfg["model"]["decoder"]["attention"]["name"] == "multihead"
    elif override.startswith("scorer"):
        assert cfg["model"]["decoder"]["attention"]["scorer"]["name"] == override.split("=")[1]
    m = MODELS.build(cfg["model"], tgt_vocab=V, pad_id=0, in_channels=3, path="model")
    _, w = m(torch.rand(2, 3, 16, 16), None, torch.tensor([[1, 4], [1, 5]]), need_weights=True)
    assert w.shape[-1] == 16  # (16 / 4)² regions
    torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))


def test_transformer_decoder_over_regions():
    m = build(encoder={"name": "cnn", "channels": [4, 8], "out_dim": 16},
              decoder={"name": "transformer_decoder", "d_model": 16, "layers": 1, "ffn_dim": 32,
                       "attention": {"name": "multihead", "heads": 2}})
    logits, w = m(torch.rand(2, 3, 16, 16), None, torch.tensor([[1, 4, 5], [1, 6, 7]]),
                  need_weights=True)
    assert logits.shape == (2, 3, V) and w.shape[-1] == 16


def test_precomputed_features():
    cfg = {"name": "captioner", "encoder": {"name": "features", "out_dim": 8, "norm": "layer"},
           "decoder": {"name": "rnn_attention", "cell": "lstm", "hidden_dim": 8}}
    m = MODELS.build(cfg, tgt_vocab=V, pad_id=0, feature_dim=12, path="model")
    feats = torch.rand(2, 9, 12)
    logits, w = m(feats, None, torch.tensor([[1, 4], [1, 5]]), need_weights=True)
    assert logits.shape == (2, 2, V) and w.shape == (2, 2, 1, 9) and m.grid(feats) == (3, 3)
    assert m.region_boxes(feats, pixel_size=(30, 30))[4].tolist() == [10, 10, 20, 20]


def test_encoder_that_does_not_read_what_the_data_gives_is_refused_before_any_data():
    with pytest.raises(ConfigError, match=r"model.encoder: encoder 'features' reads region features, "
                                          r"but the data gives pixels.*model.encoder.name=cnn"):
        resolve_config(compose_cfg(["experiment=caption_shapes", "model.encoder.name=features"]))
    with pytest.raises(ConfigError, match=r"encoder 'rnn' reads token sequences.*name=cnn"):
        resolve_config(compose_cfg(["experiment=caption_shapes", "model.encoder.name=rnn"]))
    with pytest.raises(ConfigError, match=r"encoder 'cnn' reads pixels.*data gives region features"):
        MODELS.build({"name": "captioner"}, tgt_vocab=V, feature_dim=12, path="model")


def test_captioner_on_sequence_data_is_refused():
    with pytest.raises(ConfigError, match=r"do not fit together.*captioning"):
        resolve_config(compose_cfg(["model=captioner", "task=captioning"]))
