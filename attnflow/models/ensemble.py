"""An ensemble of trained encoder–decoder models, for generation: each target token is chosen from
the mean of the members' next-token distributions (Sutskever et al. 2014, §3.6: "an ensemble of
LSTMs"; the rule of fairseq and Marian, and of checkpoint ensembles, Chen et al. 2017):

    p(y_t | y_<t, x) = (1/M) Σ_m p_m(y_t | y_<t, x)

— every member conditions on the same prefix, the ensemble's own. Computed in log space,
log p = logsumexp_m log p_m − log M, so no member's small probabilities underflow. Members may
differ in everything (layers, sizes, decoders) but their token ids: they must share the source and
target vocabularies (``attnflow-translate`` checks the tokenizers). Checkpoints of one run, e.g.
its best epochs, make an ensemble whose training costs nothing more; its decoding costs M models.

:class:`Ensemble` has the interface greedy decoding and beam search use (:mod:`attnflow.blocks.decoders.decoding`:
``encode`` and a decoder with ``start``, ``step``, ``reorder``), so both work on it unchanged. It
is not a registered model (nothing to train): ``attnflow-translate RUN --ensemble RUN2 …`` and
``bench/mt_select.py --ensembles`` assemble it from trained ones. Generation only: its ``step``
returns the members' mean distribution as log-probabilities; the attention it returns is the first
member's.
"""

from __future__ import annotations

import functools
import math
from typing import List, Sequence

import torch
from torch import nn


class EnsembleDecoder(nn.Module):
    """The decoder protocol over M decoders: the state is the list of the members' states."""

    def __init__(self, decoders: Sequence[nn.Module]):
        super().__init__()
        self.members = nn.ModuleList(decoders)

    def start(self, memory: torch.Tensor, memory_mask: torch.Tensor, init: list) -> list:
        """``init`` is :meth:`Ensemble.encode`'s list of each member's (memory, mask, final);
        ``memory`` and ``memory_mask`` (the first member's) are not used again."""
        return [d.start(m, mask, f) for d, (m, mask, f) in zip(self.members, init)]

    def step(self, y_prev: torch.Tensor, state: list, need_weights: bool = False):
        """(log of the members' mean distribution (B, V), the states, the first member's α)."""
        outs = [d.step(y_prev, s, need_weights and k == 0)
                for k, (d, s) in enumerate(zip(self.members, state))]
        # log Σ_m p_m by pairwise logaddexp, elementwise over (B, V): torch.logsumexp over a stacked
        # (M, B, V) reduces across rows, 3.7 s (+ 1.6 s stacking) of a 27.9 s 3-member beam search
        logp = functools.reduce(torch.logaddexp, (torch.log_softmax(logits.float(), dim=-1)
                                                  for logits, _, _ in outs))
        logp = logp - math.log(len(outs))
        return logp, [s for _, s, _ in outs], outs[0][2]

    def reorder(self, state: list, index: torch.Tensor) -> list:
        return [d.reorder(s, index) for d, s in zip(self.members, state)]

    def reorder_beams(self, state: list, rows: torch.Tensor) -> list:
        """Beam search's reordering between steps: each member as it reorders itself."""
        from attnflow.blocks.decoders.decoding import reorder_beams

        return [reorder_beams(d, s, rows) for d, s in zip(self.members, state)]


class Ensemble(nn.Module):
    """M trained encoder–decoder models (in eval mode) decoding as one; see the module docstring."""

    interface = "seq2seq"

    def __init__(self, models: Sequence[nn.Module]):
        super().__init__()
        if len(models) < 1:
            raise ValueError("an ensemble needs at least one model")
        self.models = nn.ModuleList(models)
        self.decoder = EnsembleDecoder([m.decoder for m in models])

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor):
        """(the first member's memory and mask — their batch size and device lead the search —,
        the same, and every member's (memory, mask, final) as the decoder's ``init``)."""
        parts: List[tuple] = [m.encode(src, src_lengths) for m in self.models]
        return parts[0][0], parts[0][1], parts

    def forward(self, *args, **kwargs):
        raise TypeError("an Ensemble is for generation (greedy decoding, beam search); train or "
                        "teacher-force its members one by one")
