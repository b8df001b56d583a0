"""The decoder protocol shared by every sequence decoder (RNN with or without attention, Luong,
Transformer), and the generic helpers that use only this protocol.

Source: Sutskever et al. 2014, eq. (1) (p(y|x) = Π_t p(y_t | y_<t, x)), Bahdanau et al. 2015.
A decoder is a conditional language model over target tokens given the encoder's output:

    p(y_t | y_<t, x) = SoftMax(logits_t),  logits_t = g(y_<t, memory, init)

Teacher forcing computes every logits_t at once from the reference prefix; generation calls
``step`` once per target position. Greedy and beam search (:mod:`attnflow.blocks.decoders.decoding`) use only
``model.encode`` and this protocol, so they work for every decoder that implements it.

The protocol (duck-typed; :class:`Decoder` is a convenience base class):

``forward(tgt_in, memory, memory_mask, init, need_weights=False) -> (logits, weights)``
    teacher forcing; tgt_in (B, T) token ids starting with ⟨BOS⟩, memory (B, S, D) encoder
    outputs (zero at padding), memory_mask (B, S) bool (True = real token), init (B, D_init) the
    encoder's final state. Returns logits (B, T, V) and, when ``need_weights``, the attention over
    the source (B, T, J, S) (J heads, or layers×heads, or 1), else None.
    Optionally ``forward(..., positions=None)``: with positions (B, T) bool, the logits of those
    positions only, (N, V) in row-major order, so the output layer skips the rest (the loss
    needs the real target tokens only); :func:`takes_positions` tells whether a decoder does.
``start(memory, memory_mask, init) -> state``
    everything a step needs; the state is any nest of tuples/lists/dicts whose tensor leaves all
    have the batch as their first dimension (so beam search can reorder it).
``step(y_prev (B,), state, need_weights=False) -> (logits (B, V), state, weights (B, J, S) or None)``
    one target position given the previous token (⟨BOS⟩ first).
``reorder_beams(state, rows) -> state`` (optional; :class:`Decoder` has it)
    ``reorder`` between beam-search steps, free to leave alone what is the same for every beam of a
    sentence (:attr:`Decoder.static_state`); a decoder without it is reordered with ``reorder``.
``reorder(state, index (B',) long) -> state``
    ``index_select`` along the batch dimension of every tensor of the state (beam search keeps the
    surviving hypotheses, or expands each sentence into beams with ``repeat_interleave``).

Invariant checked by the tests of every decoder: running ``step`` over the reference prefix gives
the same logits as ``forward`` (teacher forcing), and output t never depends on tgt_in[:, t+1:].
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Optional, Tuple

import torch
from torch import nn


def takes_positions(module: nn.Module) -> bool:
    """Whether ``module.forward`` takes ``positions`` (the logits of some positions only)."""
    return _takes_positions(type(module))


def logits_at(module: nn.Module, positions: torch.Tensor, *args: Any, **kwargs: Any):
    """``module(*args, **kwargs)`` → (logits (N, V) at ``positions`` (B, T) only, the rest of its
    output): passed on to a module that takes ``positions``, else its (B, T, V) logits indexed."""
    if takes_positions(module):
        return module(*args, positions=positions, **kwargs)
    logits, rest = module(*args, **kwargs)
    return logits[positions], rest


@functools.lru_cache(maxsize=None)
def _takes_positions(cls: type) -> bool:
    return "positions" in inspect.signature(cls.forward).parameters


def map_state(state: Any, fn) -> Any:
    """Apply ``fn`` to every tensor leaf of a nest of tuples/lists/dicts (other leaves kept)."""
    if isinstance(state, torch.Tensor):
        return fn(state)
    if isinstance(state, tuple):
        return tuple(map_state(s, fn) for s in state)
    if isinstance(state, list):
        return [map_state(s, fn) for s in state]
    if isinstance(state, dict):
        return {k: map_state(v, fn) for k, v in state.items()}
    return state


def reorder_state(state: Any, index: torch.Tensor) -> Any:
    """``index_select(0, index)`` on every tensor leaf of the state."""
    return map_state(state, lambda t: t.index_select(0, index))


class Decoder(nn.Module):
    """Base class of the decoder protocol (see the module docstring).

    Subclasses implement ``start`` and ``step``; ``forward`` defaults to running ``step`` over
    the reference prefix (override it when the whole prefix can be processed at once), and
    ``reorder`` defaults to :func:`reorder_state`.

    Shape:
        forward: tgt_in (B, T), memory (B, S, D), memory_mask (B, S), init (B, D_init)
        -> logits (B, T, V), weights (B, T, J, S) or None.
        step: y_prev (B,) -> logits (B, V), state, weights (B, J, S) or None.
    """

    def start(self, memory: torch.Tensor, memory_mask: torch.Tensor, init: torch.Tensor) -> Any:
        raise NotImplementedError

    def step(self, y_prev: torch.Tensor, state: Any, need_weights: bool = False
             ) -> Tuple[torch.Tensor, Any, Optional[torch.Tensor]]:
        raise NotImplementedError

    #: entries of a dict state that are the same for every beam of a sentence and never change
    #: (encoder memory, masks): beam search reorders them only once, when it expands the batch
    static_state: Tuple[str, ...] = ()

    def reorder(self, state: Any, index: torch.Tensor) -> Any:
        return reorder_state(state, index)

    def reorder_beams(self, state: Any, rows: torch.Tensor) -> Any:
        """Beam search's reordering between steps: ``reorder`` on what changes between beams; the
        ``static_state`` entries stay (beams only ever move within their own sentence, whose rows
        hold the same values)."""
        if not self.static_state or not isinstance(state, dict):
            return self.reorder(state, rows)
        static = self.static_state
        moving = self.reorder({k: v for k, v in state.items() if k not in static}, rows)
        return {**moving, **{k: v for k, v in state.items() if k in static}}

    def forward(self, tgt_in: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor,
                init: torch.Tensor, need_weights: bool = False
                ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        state = self.start(memory, memory_mask, init)
        logits, weights = [], []
        for t in range(tgt_in.shape[1]):
            lg, state, w = self.step(tgt_in[:, t], state, need_weights)
            logits.append(lg)
            weights.append(w)
        return torch.stack(logits, 1), (torch.stack(weights, 1) if need_weights else None)

    @torch.no_grad()
    def greedy(self, memory: torch.Tensor, memory_mask: torch.Tensor, init: torch.Tensor,
               bos_id: int, eos_id: int, max_len: int, need_weights: bool = False):
        """Argmax decoding with this decoder (see :func:`attnflow.blocks.decoders.decoding.greedy_decode`)."""
        from attnflow.blocks.decoders.decoding import greedy_from_memory

        return greedy_from_memory(self, memory, memory_mask, init, bos_id, eos_id, max_len,
                                  need_weights)
