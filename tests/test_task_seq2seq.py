"""Seq2seq task helpers: exact match up to ⟨EOS⟩; the Noam schedule's shape."""

from __future__ import annotations

import math

import torch

from attnflow.tasks.optim import OptimConfig
from attnflow.tasks.seq2seq import exact_match, strip_after_eos

E, P = 2, 0


def test_strip_after_eos():
    t = torch.tensor([[5, 6, E, 7, E], [5, E, E, E, E], [5, 6, 7, 8, 9]])
    assert strip_after_eos(t, E, P).tolist() == [[5, 6, E, P, P], [5, E, P, P, P], [5, 6, 7, 8, 9]]


def test_exact_match_needs_the_whole_sequence_and_eos():
    ref = torch.tensor([[5, 6, E, P], [5, 6, E, P], [5, 6, E, P], [7, E, P, P]])
    pred = torch.tensor([[5, 6, E, 9, 9], [5, 6, 6, E, E], [5, 6, 4, 4, 4], [7, E, E, E, E]])
    assert exact_match(pred, ref, E, P).tolist() == [True, False, False, True]
    # a prediction shorter than the reference (stopped by max_len) is not a match
    assert exact_match(torch.tensor([[5]]), torch.tensor([[5, E]]), E, P).tolist() == [False]


def test_noam_schedule_peaks_at_warmup():
    from attnflow.tasks.seq2seq import Seq2SeqTask

    task = Seq2SeqTask(torch.nn.Linear(2, 2), 0, 1, 2, 5,
                       optim=OptimConfig(lr=1.0, scheduler="noam", warmup_steps=10))
    sched = task.configure_optimizers()["lr_scheduler"]["scheduler"]
    lrs = []
    for _ in range(40):
        lrs.append(sched.get_last_lr()[0])
        sched.optimizer.step()
        sched.step()
    # Vaswani et al.: lr ∝ min(step^-0.5, step · warmup^-1.5), scaled here so the peak is lr
    for step in (1, 5, 10, 20, 39):
        want = min(step ** -0.5, step * 10 ** -1.5) / 10 ** -0.5
        assert math.isclose(lrs[step], want, rel_tol=1e-6), (step, lrs[step], want)


def _rnnenc_task(**kw):
    from attnflow.models.seq2seq import Seq2Seq
    from attnflow.tasks.seq2seq import Seq2SeqTask

    torch.manual_seed(0)
    model = Seq2Seq(9, 9, P, embed_dim=8, encoder={"name": "rnn", "hidden_dim": 8},
                    decoder={"name": "rnn", "embed_dim": 8, "hidden_dim": 8})
    return Seq2SeqTask(model, P, 1, E, 6, [str(i) for i in range(9)], **kw)


def _batch():
    src = torch.tensor([[5, 6, 7], [8, 3, P]])
    tgt = torch.tensor([[7, 6, 5, E], [3, 8, E, P]])
    return {"src": src, "src_lengths": torch.tensor([3, 2]), "tgt_out": tgt,
            "tgt_in": torch.cat([torch.ones(2, 1, dtype=torch.long), tgt[:, :-1]], 1)}


def test_no_attention_means_no_maps_and_no_penalty():
    """RNNenc (decoder 'rnn') has no α: heat-map examples are empty, and the (unread) diversity
    penalty adds nothing to the loss."""
    assert _rnnenc_task().attention_examples(_batch()) == []
    task = _rnnenc_task(penalty_weight=0.1).eval()
    with_penalty = task._loss(_batch(), "train")
    task.penalty_weight = 0.0
    torch.testing.assert_close(task._loss(_batch(), "train"), with_penalty)


def test_a_penalty_without_attention_is_unread_and_warns_once_composed():
    import pytest

    from attnflow.config.registry import AttnflowWarning
    from attnflow.training.validate import resolve_config
    from support import FAST, compose_cfg

    with pytest.warns(AttnflowWarning, match="task.penalty_weight=0.1 is unread: decoder 'rnn' has "
                                             "no attention weights"):
        resolve_config(compose_cfg([*FAST, "model=rnnenc", "task.penalty_weight=0.1"]))
