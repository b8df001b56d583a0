"""Seq2seq task helpers: exact match up to ⟨EOS⟩; the Noam schedule's shape."""

from __future__ import annotations

import math

import torch

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

    task = Seq2SeqTask(torch.nn.Linear(2, 2), 0, 1, 2, 5, lr=1.0, scheduler="noam", warmup_steps=10)
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
