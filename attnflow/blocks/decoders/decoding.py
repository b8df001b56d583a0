"""Greedy decoding and batched beam search for every encoder–decoder model.

Both use only ``model.encode(src, src_lengths) -> (memory, memory_mask, final)`` and the decoder
protocol (:mod:`attnflow.blocks.decoders.base`). Beam search (Sutskever et al. 2014) ranks
finished hypotheses by log p(y | x) / lp(|y|), lp(n) = ((5 + n) / 6)^α (Wu et al. 2016, GNMT);
all sentences and beams are one batch of B·K rows.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, Tuple, runtime_checkable

import torch
import torch.nn.functional as F

NEG_INF = float("-inf")


@runtime_checkable
class ReordersBeams(Protocol):
    """A decoder that reorders its state between beam-search steps itself (the base
    ``Decoder``'s leaves its ``static_state`` entries as they are); another one's state is
    reordered whole (``reorder``)."""

    def reorder_beams(self, state: Any, rows: torch.Tensor) -> Any:
        """``state`` of the beams ``rows`` (B, N) picked, in that order."""


@torch.no_grad()
def greedy_from_memory(decoder, memory: torch.Tensor, memory_mask: torch.Tensor,
                       init: torch.Tensor, bos_id: int, eos_id: int, max_len: int,
                       need_weights: bool = False
                       ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Argmax decoding: tokens (B, L ≤ max_len), ⟨EOS⟩ repeated after the first; weights
    (B, L, J, S), or None when not asked for or the decoder has no attention."""
    state = decoder.start(memory, memory_mask, init)
    y = torch.full((memory.shape[0],), bos_id, dtype=torch.long, device=memory.device)
    done = torch.zeros_like(y, dtype=torch.bool)
    tokens, weights = [], []
    for _ in range(max_len):
        logits, state, w = decoder.step(y, state, need_weights)
        y = logits.max(-1).indices.masked_fill(done, eos_id)  # argmax's rule, faster on the CPU
        tokens.append(y)
        weights.append(w)
        done |= y == eos_id
        if bool(done.all()):
            break
    if not tokens:  # max_len = 0
        return y.new_empty(len(y), 0), None
    has_weights = need_weights and weights[0] is not None  # decoders without attention give None
    return torch.stack(tokens, 1), (torch.stack(weights, 1) if has_weights else None)


@torch.no_grad()
def greedy_decode(model, src: torch.Tensor, src_lengths: torch.Tensor, bos_id: int, eos_id: int,
                  max_len: int, need_weights: bool = False
                  ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Greedy decoding with ``model.encode`` and ``model.decoder``: tokens (B, L), weights."""
    memory, mask, final = model.encode(src, src_lengths)
    return greedy_from_memory(model.decoder, memory, mask, final, bos_id, eos_id, max_len,
                              need_weights)


def length_penalty_factor(lengths, alpha: float):
    """GNMT's lp(n) = ((5 + n) / 6)^α for a length or a tensor of them; α = 0 gives 1."""
    n = lengths.float() if isinstance(lengths, torch.Tensor) else float(lengths)
    return ((5.0 + n) / 6.0) ** alpha


def _gather_rows(x: Optional[torch.Tensor], rows: torch.Tensor) -> Optional[torch.Tensor]:
    """x[rows] for per-hypothesis tensors (B·K, …) with rows (B, N) -> (B, N, …)."""
    if x is None:
        return None
    return x.index_select(0, rows.reshape(-1)).reshape(*rows.shape, *x.shape[1:])


def reorder_beams(decoder, state, rows: torch.Tensor):
    """The decoder's ``reorder_beams`` where it has one (:class:`ReordersBeams`), else its ``reorder``."""
    if isinstance(decoder, ReordersBeams):
        return decoder.reorder_beams(state, rows)
    return decoder.reorder(state, rows)


def _finish(fin, top, rows, tok, is_eos, history, w, w_history, factor: float, eos_id: int):
    """Candidates ending in ⟨EOS⟩ among the best K join ``fin`` = (scores (B, K), tokens
    (B, K, t), weights (B, K, t, J, S) or None), the K best finished hypotheses, scored
    log p / ``factor``."""
    scores, tokens, weights = fin
    B, K = scores.shape
    new = torch.where(is_eos[:, :K], top[:, :K] / factor, NEG_INF)
    cand = torch.cat([_gather_rows(history, rows[:, :K]), tok[:, :K, None]], -1)
    scores, pick = torch.cat([scores, new], 1).topk(K, dim=1)
    tokens = torch.cat([F.pad(tokens, (0, 1), value=eos_id), cand], 1).gather(
        1, pick.unsqueeze(-1).expand(-1, -1, cand.shape[-1]))
    if w is not None:
        cand_w = _gather_rows(w, rows[:, :K]).unsqueeze(2)  # (B, K, 1, J, S)
        past = _gather_rows(w_history, rows[:, :K])
        cand_w = cand_w if past is None else torch.cat([past, cand_w], 2)
        old = torch.zeros_like(cand_w) if weights is None else F.pad(weights, (0, 0, 0, 0, 0, 1))
        idx = pick.view(B, K, 1, 1, 1).expand(-1, -1, *cand_w.shape[2:])
        weights = torch.cat([old, cand_w], 1).gather(1, idx)
    return scores, tokens, weights


def _best(fin, live, done, history, w_history, factor: float):
    """(tokens (B, L), weights or None, score (B,)) of each sentence's best hypothesis; prefixes
    still live at the end compete as they are unless the sentence is done."""
    fin_scores, fin_tokens, fin_weights = fin
    (B, K), L = live.shape, history.shape[1]
    scores = torch.cat([fin_scores, torch.where(done.unsqueeze(1), NEG_INF, live / factor)], 1)
    best = scores.argmax(-1)
    at = torch.arange(B, device=live.device)
    tokens = torch.cat([fin_tokens, history.view(B, K, L)], 1)[at, best]
    weights = None
    if w_history is not None:
        J_S = w_history.shape[2:]
        fw = fin_weights if fin_weights is not None else w_history.new_zeros(B, K, L, *J_S)
        weights = torch.cat([fw, w_history.view(B, K, L, *J_S)], 1)[at, best]
    return tokens, weights, scores.gather(1, best.unsqueeze(1)).squeeze(1)


@torch.no_grad()
def beam_search(model, src: torch.Tensor, src_lengths: torch.Tensor, bos_id: int, eos_id: int,
                max_len: int, beam_size: int = 4, length_penalty: float = 0.0,
                need_weights: bool = False, return_scores: bool = False):
    """Batched beam search over B sentences × K beams.

    Each step takes the 2K best extensions by log p(y_≤t | x): those ending in ⟨EOS⟩ among the
    best K are finished (:func:`_finish`), the best K others stay live, so finished hypotheses
    never crowd longer ones out (as fairseq and GNMT). A sentence is done when no live score s
    can beat its best finished one, s / lp(max_len). K = 1 without penalty is greedy decoding.
    Returns tokens (B, L), weights (B, L, J, S) or None, and with ``return_scores`` the best
    score log p(y | x) / lp(|y|) (B,).
    """
    memory, mask, final = model.encode(src, src_lengths)
    decoder = model.decoder
    B, K, dev = memory.shape[0], beam_size, memory.device
    state = decoder.reorder(decoder.start(memory, mask, final),
                            torch.arange(B, device=dev).repeat_interleave(K))  # (B·K)
    live = torch.full((B, K), NEG_INF, device=dev)
    live[:, 0] = 0.0  # the K beams start identical: one live hypothesis
    y = torch.full((B * K,), bos_id, dtype=torch.long, device=dev)
    history = torch.empty(B * K, 0, dtype=torch.long, device=dev)  # live prefixes
    w_history: Optional[torch.Tensor] = None  # (B·K, t, J, S)
    fin = (torch.full((B, K), NEG_INF, device=dev),
           torch.empty(B, K, 0, dtype=torch.long, device=dev), None)
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    base = (torch.arange(B, device=dev) * K).unsqueeze(1)  # (B, 1) first row of each sentence
    for t in range(max_len):
        logits, state, w = decoder.step(y, state, need_weights)
        w = w if need_weights else None
        logp = torch.log_softmax(logits.float(), dim=-1)  # (B·K, V)
        V = logp.shape[-1]
        cand = (live.reshape(B * K, 1) + logp).reshape(B, K * V)
        top, flat = cand.topk(min(2 * K, K * V), dim=-1)  # (B, 2K)
        rows = base + torch.div(flat, V, rounding_mode="floor")  # source rows of the candidates
        tok = flat % V
        is_eos = tok == eos_id
        fin = _finish(fin, top, rows, tok, is_eos, history, w, w_history,
                      length_penalty_factor(t + 1, length_penalty), eos_id)
        live, pos = top.masked_fill(is_eos, NEG_INF).topk(K, dim=1)
        sel = rows.gather(1, pos).reshape(B * K)
        y = tok.gather(1, pos).reshape(B * K)
        state = reorder_beams(decoder, state, sel)
        history = torch.cat([history.index_select(0, sel), y.unsqueeze(1)], dim=1)
        if w is not None:
            w = w.index_select(0, sel).unsqueeze(1)
            w_history = w if w_history is None else torch.cat([w_history.index_select(0, sel), w], 1)
        done |= fin[0][:, 0] >= live[:, 0] / length_penalty_factor(max_len, length_penalty)
        if bool(done.all()):
            break
    tokens, weights, score = _best(fin, live, done, history, w_history,
                                   length_penalty_factor(history.shape[1], length_penalty))
    return (tokens, weights, score) if return_scores else (tokens, weights)


def decode(model, src: torch.Tensor, src_lengths: torch.Tensor, bos_id: int, eos_id: int,
           max_len: int, beam_size: int = 1, length_penalty: float = 0.0,
           need_weights: bool = False) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Greedy decoding for ``beam_size`` 1, else beam search: tokens (B, L), weights or None."""
    if beam_size == 1:
        return greedy_decode(model, src, src_lengths, bos_id, eos_id, max_len, need_weights)
    return beam_search(model, src, src_lengths, bos_id, eos_id, max_len, beam_size,
                       length_penalty, need_weights)
