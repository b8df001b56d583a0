"""An ensemble of trained encoder–decoder models, for generation (Sutskever et al. 2014, §3.6;
checkpoint ensembles, Chen et al. 2017): every member conditions on the ensemble's prefix and

    p(y_t | y_<t, x) = (1/M) Σ_m p_m(y_t | y_<t, x),   computed as logsumexp_m log p_m − log M.

Members may differ in everything but their vocabularies. :class:`Ensemble` has the interface
greedy and beam search use (``encode`` and a decoder protocol); the attention it returns is the
first member's. Not a registered model: ``attnflow-translate RUN --ensemble RUN2`` builds it.
"""

from __future__ import annotations

import functools
import math
from typing import List, Sequence

import torch
from torch import nn

from attnflow.blocks.decoders.base import Decoder
from attnflow.blocks.decoders.decoding import reorder_beams


class EnsembleDecoder(Decoder):
    """The decoder protocol over M decoders: the state is the list of the members' states."""

    def __init__(self, decoders: Sequence[Decoder]):
        super().__init__()
        self.members = nn.ModuleList(decoders)

    def start(self, memory: torch.Tensor, memory_mask: torch.Tensor, init: list) -> list:
        """``init`` is :meth:`Ensemble.encode`'s list of each member's (memory, mask, final);
        ``memory`` and ``memory_mask`` (the first member's) are not used again."""
        return [d.start(m, mask, f) for d, (m, mask, f) in zip(self.members, init)]

    @property
    def weights_layer(self):
        """The first member's (its α is the ensemble's)."""
        return self.members[0].weights_layer

    def step(self, y_prev: torch.Tensor, state: list, need_weights: bool = False):
        """(log of the members' mean distribution (B, V), the states, the first member's α)."""
        outs = [d.step(y_prev, s, need_weights and k == 0)
                for k, (d, s) in enumerate(zip(self.members, state))]
        # pairwise logaddexp: faster than torch.logsumexp over a stacked (M, B, V)
        logp = functools.reduce(torch.logaddexp, (torch.log_softmax(logits.float(), dim=-1)
                                                  for logits, _, _ in outs))
        logp = logp - math.log(len(outs))
        return logp, [s for _, s, _ in outs], outs[0][2]

    def reorder(self, state: list, index: torch.Tensor) -> list:
        return [d.reorder(s, index) for d, s in zip(self.members, state)]

    def reorder_beams(self, state: list, rows: torch.Tensor) -> list:
        """Beam search's reordering between steps: each member as it reorders itself."""
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
        """(the first member's memory and mask, which lead the search; every member's (memory,
        mask, final) as the decoder's ``init``)."""
        parts: List[tuple] = [m.encode(src, src_lengths) for m in self.models]
        return parts[0][0], parts[0][1], parts

    def forward(self, *args, **kwargs):
        raise TypeError("an Ensemble is for generation (greedy decoding, beam search); train or "
                        "teacher-force its members one by one")
