"""The decoder protocol of every sequence decoder, and helpers that use only the protocol.

Sutskever et al. 2014, eq. (1); Bahdanau et al. 2015: p(y_t | y_<t, x) = SoftMax(g(y_<t, memory,
init)). A decoder implements

- ``forward(tgt_in (B, T), memory (B, S, D), memory_mask (B, S), init (B, D_init),
  need_weights=False[, positions]) -> (logits (B, T, V), weights (B, T, J, S) or None)``:
  teacher forcing; with ``positions`` (B, T) bool only those rows' logits, (N, V);
- ``start(memory, memory_mask, init) -> state``: a nest of tensors, batch first;
- ``step(y_prev (B,), state, need_weights) -> (logits (B, V), state, weights (B, J, S) or None)``;
- ``reorder(state, index)`` (and optionally ``reorder_beams``, the base's: only what changes
  between steps) for beam search;
- ``attends``: whether it attends over the memory (returns weights); False for decoder 'rnn'.
- ``weights_layer``: (which, of how many layers), 1-based, whose attention the weights are, or
  None for a decoder with one attention (pictures say which layer they show).

Running ``step`` over the reference prefix gives ``forward``'s logits (checked by the tests).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, ClassVar, Optional, Tuple

import torch
from torch import nn

from attnflow.blocks.decoders.decoding import greedy_from_memory


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


def initial_state(init: nn.Linear, final: torch.Tensor, lstm: bool):
    """s_0 = tanh(W_init h̄) (B, H); an LSTM's (h_0, c_0 = 0)."""
    h0 = torch.tanh(init(final))
    return (h0, torch.zeros_like(h0)) if lstm else h0


def to_rnn(hidden):
    """(B, H) per row (or an LSTM's pair) -> (1, B, H) for nn.GRU/LSTM."""
    return map_state(hidden, lambda x: x.unsqueeze(0).contiguous())


def from_rnn(hidden):
    """(1, B, H) from nn.GRU/LSTM (or an LSTM's pair) -> (B, H) per row."""
    return map_state(hidden, lambda x: x[0])


class Decoder(nn.Module):
    """Base of the protocol: subclasses implement ``start`` and ``step``; ``forward`` runs
    ``step`` over the prefix unless overridden."""

    def start(self, memory: torch.Tensor, memory_mask: torch.Tensor, init: torch.Tensor) -> Any:
        raise NotImplementedError

    def step(self, y_prev: torch.Tensor, state: Any, need_weights: bool = False
             ) -> Tuple[torch.Tensor, Any, Optional[torch.Tensor]]:
        raise NotImplementedError

    #: (layer, of layers) whose attention ``step``/``forward`` return, 1-based; None: the one
    weights_layer: Optional[Tuple[int, int]] = None

    #: whether it attends over the memory: False returns no weights (and reads no attention)
    attends: ClassVar[bool] = True

    #: entries of a dict state that are the same for every beam of a sentence and never change
    #: (encoder memory, masks): beam search reorders them only once, when it expands the batch
    static_state: Tuple[str, ...] = ()

    def reorder(self, state: Any, index: torch.Tensor) -> Any:
        return reorder_state(state, index)

    def reorder_beams(self, state: Any, rows: torch.Tensor) -> Any:
        """``reorder`` on all but the ``static_state`` entries (the same for every beam)."""
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
        return greedy_from_memory(self, memory, memory_mask, init, bos_id, eos_id, max_len,
                                  need_weights)
