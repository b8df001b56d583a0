"""Generation for every encoder–decoder model: greedy decoding and batched beam search.

Both use only ``model.encode(src, src_lengths) -> (memory, memory_mask, final)`` and the decoder
protocol of :mod:`attnflow.blocks.decoders.base` (``start``, ``step``, ``reorder``), so they work
for the RNN decoders and the Transformer alike.

Greedy: y_t = argmax_v p(v | y_<t, x) until every sentence has produced ⟨EOS⟩ or ``max_len``
tokens; a finished row keeps emitting ⟨EOS⟩.

Beam search (Sutskever et al. 2014; length penalty of Wu et al. 2016, GNMT):
    keep the K best prefixes by log p(y_≤t | x) = Σ_τ log p(y_τ | y_<τ, x); a prefix ending in
    ⟨EOS⟩ is finished and keeps its score; at the end the best of the K hypotheses by
    log p(y | x) / lp(|y|),  lp(n) = ((5 + n) / 6)^α  (α = ``length_penalty``; 0 = no penalty).
All sentences and beams are one batch of B·K rows (no loop over sentences); only the inherent
loop over target positions remains. With K = 1 beam search is greedy decoding.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

NEG_INF = float("-inf")


@torch.no_grad()
def greedy_from_memory(decoder, memory: torch.Tensor, memory_mask: torch.Tensor,
                       init: torch.Tensor, bos_id: int, eos_id: int, max_len: int,
                       need_weights: bool = False
                       ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Argmax decoding from encoder outputs. Returns tokens (B, L) (⟨EOS⟩ included, then ⟨EOS⟩
    repeated; L ≤ max_len) and weights (B, L, J, S), or None when not asked for or when the
    decoder has no attention (RNNenc)."""
    state = decoder.start(memory, memory_mask, init)
    y = torch.full((memory.shape[0],), bos_id, dtype=torch.long, device=memory.device)
    done = torch.zeros_like(y, dtype=torch.bool)
    tokens, weights = [], []
    for _ in range(max_len):
        logits, state, w = decoder.step(y, state, need_weights)
        y = logits.argmax(-1).masked_fill(done, eos_id)
        tokens.append(y)
        weights.append(w)
        done |= y == eos_id
        if bool(done.all()):
            break
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


def length_penalty_factor(lengths: torch.Tensor, alpha: float) -> torch.Tensor:
    """GNMT length penalty lp(n) = ((5 + n) / 6)^α."""
    return ((5.0 + lengths.float()) / 6.0) ** alpha


@torch.no_grad()
def beam_search(model, src: torch.Tensor, src_lengths: torch.Tensor, bos_id: int, eos_id: int,
                max_len: int, beam_size: int = 4, length_penalty: float = 0.0,
                need_weights: bool = False, return_scores: bool = False):
    """Batched beam search over B sentences × K beams.

    Returns tokens (B, L) of the best hypothesis per sentence (⟨EOS⟩ included, then ⟨EOS⟩
    repeated), weights (B, L, J, S) or None, and with ``return_scores`` the best hypothesis'
    log-probability (B,) as a third element.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    memory, mask, final = model.encode(src, src_lengths)
    decoder = model.decoder
    B, K, dev = memory.shape[0], beam_size, memory.device
    state = decoder.start(memory, mask, final)
    state = decoder.reorder(state, torch.arange(B, device=dev).repeat_interleave(K))  # (B·K)
    scores = torch.full((B, K), NEG_INF, device=dev)
    scores[:, 0] = 0.0  # only one live hypothesis at first: the K beams are identical
    y = torch.full((B * K,), bos_id, dtype=torch.long, device=dev)
    done = torch.zeros(B * K, dtype=torch.bool, device=dev)
    lengths = torch.zeros(B * K, dtype=torch.long, device=dev)
    history = torch.empty(B * K, 0, dtype=torch.long, device=dev)
    w_history = None
    base = (torch.arange(B, device=dev) * K).unsqueeze(1)  # (B, 1) first row of each sentence
    for _ in range(max_len):
        logits, state, w = decoder.step(y, state, need_weights)
        logp = torch.log_softmax(logits.float(), dim=-1)  # (B·K, V)
        V = logp.shape[-1]
        # a finished hypothesis can only be extended by ⟨EOS⟩ at no cost
        finished_row = torch.full_like(logp[0], NEG_INF)
        finished_row[eos_id] = 0.0
        logp = torch.where(done.unsqueeze(1), finished_row, logp)
        cand = (scores.reshape(B * K, 1) + logp).reshape(B, K * V)
        scores, flat = cand.topk(K, dim=-1)  # (B, K)
        beam = torch.div(flat, V, rounding_mode="floor")
        y = (flat % V).reshape(B * K)
        rows = (base + beam).reshape(B * K)  # source rows of the surviving hypotheses
        state = decoder.reorder(state, rows)
        lengths = lengths.index_select(0, rows) + (~done.index_select(0, rows)).long()
        done = done.index_select(0, rows) | (y == eos_id)
        history = torch.cat([history.index_select(0, rows), y.unsqueeze(1)], dim=1)
        if need_weights and w is not None:
            w = w.index_select(0, rows).unsqueeze(1)
            w_history = w if w_history is None else torch.cat([w_history.index_select(0, rows), w], 1)
        if bool(done.all()):
            break
    final_scores = scores.reshape(B * K)
    if length_penalty:
        final_scores = final_scores / length_penalty_factor(lengths, length_penalty)
    best = final_scores.reshape(B, K).argmax(-1)
    pick = (torch.arange(B, device=dev) * K + best)
    tokens = history.index_select(0, pick)
    # a hypothesis ended by max_len without ⟨EOS⟩ is kept as is; after ⟨EOS⟩ repeat ⟨EOS⟩
    weights = w_history.index_select(0, pick) if w_history is not None else None
    if return_scores:
        return tokens, weights, final_scores.index_select(0, pick)
    return tokens, weights
