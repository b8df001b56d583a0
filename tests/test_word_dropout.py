"""Word dropout in the seq2seq tasks (task.src_word_dropout, task.tgt_word_dropout): which tokens
may be dropped, how often, that only training sees it (the loss against the model run by hand on
the dropped batch), that the loss's targets stay, and the refusals."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnflow.config.registry import ConfigError
from attnflow.tasks.seq2seq import word_dropout
from support import BOS, EOS, PAD, pair_batch as batch, tiny_translation_task as make_task


def test_specials_are_kept_and_the_rate_is_p():
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 50, (400, 50), generator=g)
    before = tokens.clone()
    torch.manual_seed(1)
    out = word_dropout(tokens, 0.25, PAD, (PAD, BOS, EOS))
    assert torch.equal(tokens, before)  # the input is not changed in place
    special = (tokens == PAD) | (tokens == BOS) | (tokens == EOS)
    assert torch.equal(out[special], tokens[special])
    changed = out != tokens
    assert (out[changed] == PAD).all()
    # 20,000 tokens, 18,800 of them droppable: a binomial(18,800, 0.25) is 4,700 ± 59 (1 sd)
    n = int(changed.sum())
    assert abs(n - 0.25 * int((~special).sum())) < 5 * 59, n
    assert word_dropout(tokens, 0.0, PAD, (PAD,)) is tokens
    assert torch.equal(word_dropout(tokens, 1.0, 7, (PAD, BOS, EOS)),
                       torch.where(special, tokens, torch.full_like(tokens, 7)))


def hand_loss(task, src, tgt_in, tgt_out):
    logits, _ = task.model(src, torch.tensor([4, 3]), tgt_in)
    return F.cross_entropy(logits.transpose(1, 2), tgt_out, ignore_index=PAD, label_smoothing=0.1)


@pytest.mark.parametrize("side", ["src", "tgt", "both"])
def test_training_loss_sees_the_dropped_tokens_and_validation_does_not(side):
    """p = 0.5: the training loss is the model's on the batch with the tokens dropped that the same
    random draws pick (torch.rand per side, source first; ⟨BOS⟩/⟨EOS⟩/⟨pad⟩ kept, the targets
    untouched), computed here by hand; the val loss is the plain batch's."""
    sides = ("src", "tgt") if side == "both" else (side,)
    task = make_task(**{f"{s}_word_dropout": 0.5 for s in sides})
    b = batch()
    torch.manual_seed(1)
    task.train()
    got = task._loss(b, "train")
    torch.manual_seed(1)  # the same draws, applied by hand
    inputs = {"src": b["src"].clone(), "tgt": b["tgt_in"].clone()}
    for s in sides:
        t = inputs[s]
        drop = (torch.rand(t.shape) < 0.5) & (t != PAD) & (t != BOS) & (t != EOS)
        assert 0 < int(drop.sum()) < int(((t != PAD) & (t != BOS) & (t != EOS)).sum())
        t[drop] = PAD
    want = hand_loss(task, inputs["src"], inputs["tgt"], b["tgt_out"])
    plain = hand_loss(task, b["src"], b["tgt_in"], b["tgt_out"])
    assert torch.allclose(got, want, atol=1e-6)
    assert not torch.allclose(want, plain, atol=1e-3)  # the dropping changed the loss
    assert torch.equal(b["src"], batch()["src"]) and torch.equal(b["tgt_in"], batch()["tgt_in"])
    task.eval()
    with torch.no_grad():
        assert torch.allclose(task._loss(b, "val"), plain, atol=1e-6)


def test_the_overrides_reach_the_task_and_bad_values_are_refused():
    from attnflow.training.validate import resolve_config
    from support import compose_cfg

    cfg = resolve_config(compose_cfg(["experiment=mt_transformer", "task.src_word_dropout=0.1",
                                      "task.tgt_word_dropout=0.2"]))
    assert (cfg["task"]["src_word_dropout"], cfg["task"]["tgt_word_dropout"]) == (0.1, 0.2)
    with pytest.raises(ConfigError, match="tgt_word_dropout"):
        resolve_config(compose_cfg(["experiment=mt_transformer", "task.tgt_word_dropout=1.5"]))


def test_a_captioning_source_has_no_tokens_to_drop():
    """An image source: src_word_dropout is unread (a warning); tgt_word_dropout is read."""
    from attnflow.config.registry import AttnflowWarning
    from attnflow.training.validate import resolve_config
    from support import compose_cfg

    base = ["data=shapes", "model=captioner", "task=captioning"]
    with pytest.warns(AttnflowWarning, match=r"task.src_word_dropout=0.1 is unread"):
        resolve_config(compose_cfg([*base, "task.src_word_dropout=0.1"]))
    assert resolve_config(compose_cfg([*base, "task.tgt_word_dropout=0.1"]))["task"]["tgt_word_dropout"] == 0.1
