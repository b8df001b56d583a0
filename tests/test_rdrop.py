"""R-Drop in the seq2seq tasks (task.rdrop_alpha; Liang et al. 2021, Eq. 3): the training loss
against the two dropout passes computed here by hand, validation untouched, the symmetric KL
against torch's KL, and the refusals."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnflow.config.registry import ConfigError
from attnflow.tasks.seq2seq import rdrop_terms
from support import PAD, pair_batch as batch, tiny_translation_task


def make_task(dropout=0.3, **task):
    return tiny_translation_task(dropout, **task)


def ce(logits, target):
    return F.cross_entropy(logits.transpose(1, 2), target, ignore_index=PAD, label_smoothing=0.1)


def kl(log_p, log_q, valid):
    """KL(P‖Q) per real token, averaged: torch's kl_div(input=ln Q, target=ln P)."""
    return F.kl_div(log_q, log_p, log_target=True, reduction="none").sum(-1)[valid].mean()


def test_the_two_terms_against_torch_s_cross_entropy_and_kl():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 5, 9, generator=g)
    target = torch.randint(3, 9, (6, 5), generator=g)
    target[:3, 3:] = PAD
    target[1, 2] = PAD
    target[3:] = target[:3]  # the batch stacked on itself
    valid = target != PAD
    ce_, kl_, hits = rdrop_terms(logits[valid], target[valid], 0.1)
    assert torch.allclose(ce_, ce(logits, target), atol=1e-6)
    lp, lq = F.log_softmax(logits[:3], -1), F.log_softmax(logits[3:], -1)
    assert torch.allclose(kl_, (kl(lp, lq, valid[:3]) + kl(lq, lp, valid[:3])) / 2, atol=1e-6)
    assert torch.equal(hits, (logits.argmax(-1) == target)[valid])
    same = torch.cat([logits[:3], logits[:3]])
    assert rdrop_terms(same[valid], target[valid])[1] == 0


def test_training_loss_is_eq3_halved_over_two_dropout_passes_and_validation_is_plain():
    """α = 4, model dropout 0.3: the loss is ½ [CE(P₁) + CE(P₂) + α · ½ (KL(P₁‖P₂) + KL(P₂‖P₁))]
    where P₁, P₂ are the model's outputs for the two copies of the batch in one pass (the same
    dropout draws, replayed here by hand from the same seed)."""
    alpha = 4.0
    task = make_task(rdrop_alpha=alpha)
    b = batch()
    task.train()
    torch.manual_seed(1)
    got = task._loss(b, "train")
    torch.manual_seed(1)
    logits, _ = task.model(*(torch.cat([b[k], b[k]]) for k in ("src", "src_lengths", "tgt_in")))
    l1, l2 = logits.chunk(2)
    assert not torch.allclose(l1, l2, atol=1e-3)  # two different dropout draws
    valid = b["tgt_out"] != PAD
    lp, lq = F.log_softmax(l1, -1), F.log_softmax(l2, -1)
    want = 0.5 * (ce(l1, b["tgt_out"]) + ce(l2, b["tgt_out"])
                  + alpha * 0.5 * (kl(lp, lq, valid) + kl(lq, lp, valid)))
    assert torch.allclose(got, want, atol=1e-5), (got, want)
    got.backward()  # the consistency term is differentiable
    assert all(p.grad is not None for p in task.model.parameters() if p.requires_grad)
    task.eval()
    with torch.no_grad():
        plain, _ = task.model(b["src"], b["src_lengths"], b["tgt_in"])
        assert torch.allclose(task._loss(b, "val"), ce(plain, b["tgt_out"]), atol=1e-6)


def test_alpha_zero_runs_the_batch_once():
    task = make_task(rdrop_alpha=0.0)
    seen = []
    task.model.register_forward_hook(lambda m, args, out: seen.append(args[0].shape[0]))
    task.train()
    task._loss(batch(), "train")
    assert seen == [2]
    task.rdrop_alpha = 1.0
    task._loss(batch(), "train")
    assert seen == [2, 4]


@pytest.mark.parametrize("base", [["experiment=mt_transformer", "model.dropout=0"],
                                  ["data=shapes", "model=captioner", "task=captioning",
                                   "model.dropout=0", "model.encoder.dropout=0"]])
@pytest.mark.slow
def test_a_warning_without_any_dropout(base):
    """R-Drop with nothing that drops out (the model's defaults filled in) warns; with word
    dropout, or with the model's dropout above 0, it does not."""
    import warnings

    from attnflow.config.registry import AttnflowWarning
    from attnflow.training.validate import resolve_config
    from support import compose_cfg

    base = [*base, "task.rdrop_alpha=2"]
    with pytest.warns(AttnflowWarning, match=r"task.rdrop_alpha=2.0 is unread: nothing drops out"):
        resolve_config(compose_cfg(base))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", "task.rdrop_alpha", AttnflowWarning)
        resolve_config(compose_cfg([*base, "task.tgt_word_dropout=0.1"]))
        resolve_config(compose_cfg([b.replace("model.dropout=0", "model.dropout=0.2") for b in base]))


def test_the_override_reaches_the_task_and_a_negative_alpha_is_refused():
    from attnflow.training.validate import resolve_config
    from support import compose_cfg

    cfg = resolve_config(compose_cfg(["experiment=mt_transformer", "task.rdrop_alpha=5"]))
    assert cfg["task"]["rdrop_alpha"] == 5
    with pytest.raises(ConfigError, match="rdrop_alpha"):
        resolve_config(compose_cfg(["experiment=mt_transformer", "task.rdrop_alpha=-1"]))
