"""Teacher forcing with ``positions`` (the decoder protocol's optional argument): the logits of the
asked positions only, equal to the full logits indexed by the mask, for every decoder — those that
take ``positions`` (Transformer, RNN with attention, Luong with and without input feeding) and
those indexed after (RNNenc's) — and the seq2seq task's loss equal to the cross-entropy over the
full logits with the padding ignored."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnflow.blocks.decoders.base import takes_positions
from attnflow.config.registry import MODELS
from support import PAD, pair_batch, tiny_translation_task

SMALL = {"embed_dim": 8, "hidden_dim": 8}
MODELS_ = {
    "transformer": ({"name": "transformer", "d_model": 16, "ffn_dim": 32, "encoder_layers": 1,
                     "decoder_layers": 1, "attention": {"name": "multihead", "heads": 2}}, True),
    "rnn_attention": ({"name": "seq2seq", "embed_dim": 8, "encoder": {"name": "rnn", "hidden_dim": 8},
                       "decoder": {"name": "rnn_attention", **SMALL}}, True),
    "luong, input feeding": ({"name": "seq2seq", "embed_dim": 8, "encoder": {"name": "rnn", "hidden_dim": 8},
                              "decoder": {"name": "luong", **SMALL, "input_feed": True}}, True),
    "luong, no feeding": ({"name": "seq2seq", "embed_dim": 8, "encoder": {"name": "rnn", "hidden_dim": 8},
                           "decoder": {"name": "luong", **SMALL, "input_feed": False}}, True),
    "rnn (RNNenc)": ({"name": "seq2seq", "embed_dim": 8, "encoder": {"name": "rnn", "hidden_dim": 8},
                      "decoder": {"name": "rnn", **SMALL}}, False),
}


@pytest.mark.parametrize("name", list(MODELS_))
def test_positions_give_the_indexed_logits(name):
    cfg, selects = MODELS_[name]
    torch.manual_seed(0)
    model = MODELS.build(cfg, src_vocab=12, tgt_vocab=12, pad_id=PAD, path="model").eval()
    assert takes_positions(model.decoder) == selects
    b = pair_batch()
    mask = b["tgt_out"] != PAD
    with torch.no_grad():
        full, w_full = model(b["src"], b["src_lengths"], b["tgt_in"], need_weights=True)
        some, w_some = model(b["src"], b["src_lengths"], b["tgt_in"], need_weights=True, positions=mask)
    assert some.shape == (int(mask.sum()), 12)
    assert torch.allclose(some, full[mask], atol=1e-6)
    assert (w_full is None) == (w_some is None)
    if w_full is not None:
        assert torch.allclose(w_some, w_full, atol=1e-6)


def test_the_task_loss_is_the_padded_cross_entropy():
    task = tiny_translation_task(label_smoothing=0.2)
    b = pair_batch()
    task.eval()
    with torch.no_grad():
        logits, _ = task.model(b["src"], b["src_lengths"], b["tgt_in"])
        want = F.cross_entropy(logits.transpose(1, 2), b["tgt_out"], ignore_index=PAD, label_smoothing=0.2)
        assert torch.allclose(task._loss(b, "val"), want, atol=1e-6)
