"""Generation for every encoder–decoder model: greedy decoding and batched beam search.

Both use only ``model.encode(src, src_lengths) -> (memory, memory_mask, final)`` and the decoder
protocol of :mod:`attnflow.blocks.decoders.base` (``start``, ``step``, ``reorder``), so they work
for the RNN decoders and the Transformer alike.

Greedy: y_t = argmax_v p(v | y_<t, x) until every sentence has produced ⟨EOS⟩ or ``max_len``
tokens; a finished row keeps emitting ⟨EOS⟩.

Beam search (Sutskever et al. 2014; length penalty of Wu et al. 2016, GNMT): keep the K best
live prefixes by log p(y_≤t | x) = Σ_τ log p(y_τ | y_<τ, x) and a buffer of K finished
hypotheses scored log p(y | x) / lp(|y|),  lp(n) = ((5 + n) / 6)^α  (α = ``length_penalty``;
0 = no penalty); see :func:`beam_search`.
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
    """GNMT length penalty lp(n) = ((5 + n) / 6)^α for a length (a float back) or a tensor of
    them; α = 0 gives 1 exactly."""
    n = lengths.float() if isinstance(lengths, torch.Tensor) else float(lengths)
    return ((5.0 + n) / 6.0) ** alpha


def _gather_rows(x: Optional[torch.Tensor], rows: torch.Tensor) -> Optional[torch.Tensor]:
    """x[rows] for per-hypothesis tensors (B·K, …) with rows (B, N) -> (B, N, …)."""
    if x is None:
        return None
    return x.index_select(0, rows.reshape(-1)).reshape(*rows.shape, *x.shape[1:])


def reorder_beams(decoder, state, rows: torch.Tensor):
    """Between beam-search steps: the decoder's ``reorder_beams`` (which may leave its static
    entries in place), or ``reorder`` for a decoder of the protocol without it."""
    fn = getattr(decoder, "reorder_beams", None)
    return fn(state, rows) if fn is not None else decoder.reorder(state, rows)


@torch.no_grad()
def beam_search(model, src: torch.Tensor, src_lengths: torch.Tensor, bos_id: int, eos_id: int,
                max_len: int, beam_size: int = 4, length_penalty: float = 0.0,
                need_weights: bool = False, return_scores: bool = False):
    """Batched beam search over B sentences × K beams.

    Every step extends the K live prefixes of each sentence by every token and takes the 2K best
    candidates by log p(y_≤t | x). Candidates ending in ⟨EOS⟩ among the best K are finished: they
    move to the sentence's buffer of K finished hypotheses, scored log p(y | x) / lp(|y|) with
    |y| counting ⟨EOS⟩; the best K candidates not ending in ⟨EOS⟩ stay live, so finished
    hypotheses never crowd longer ones out of the beam (as in fairseq and GNMT). A sentence is done
    when no live prefix can still beat its best finished hypothesis: log-probabilities only fall
    and lp grows, so a live score s can reach at most s / lp(max_len). Prefixes still live at
    ``max_len`` compete as they are. With K = 1 and no length penalty this is greedy decoding.

    Returns tokens (B, L) of the best hypothesis per sentence (⟨EOS⟩ included, then ⟨EOS⟩
    repeated), weights (B, L, J, S) or None, and with ``return_scores`` the best hypothesis'
    score (B,): log p(y | x) / lp(|y|), which is log p(y | x) when ``length_penalty`` is 0.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    memory, mask, final = model.encode(src, src_lengths)
    decoder = model.decoder
    B, K, dev = memory.shape[0], beam_size, memory.device
    state = decoder.start(memory, mask, final)
    state = decoder.reorder(state, torch.arange(B, device=dev).repeat_interleave(K))  # (B·K)
    live = torch.full((B, K), NEG_INF, device=dev)
    live[:, 0] = 0.0  # only one live hypothesis at first: the K beams are identical
    y = torch.full((B * K,), bos_id, dtype=torch.long, device=dev)
    history = torch.empty(B * K, 0, dtype=torch.long, device=dev)  # live prefixes
    w_history: Optional[torch.Tensor] = None  # (B·K, t, J, S)
    fin_scores = torch.full((B, K), NEG_INF, device=dev)  # finished, length-normalised
    fin_tokens = torch.empty(B, K, 0, dtype=torch.long, device=dev)
    fin_weights: Optional[torch.Tensor] = None  # (B, K, t, J, S)
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    base = (torch.arange(B, device=dev) * K).unsqueeze(1)  # (B, 1) first row of each sentence
    def lp(n: int) -> float:
        return length_penalty_factor(n, length_penalty)

    for t in range(max_len):
        logits, state, w = decoder.step(y, state, need_weights)
        logp = torch.log_softmax(logits.float(), dim=-1)  # (B·K, V)
        V = logp.shape[-1]
        cand = (live.reshape(B * K, 1) + logp).reshape(B, K * V)
        top, flat = cand.topk(min(2 * K, K * V), dim=-1)  # (B, 2K)
        rows = base + torch.div(flat, V, rounding_mode="floor")  # source rows of the candidates
        tok = flat % V
        is_eos = tok == eos_id
        keep_w = need_weights and w is not None
        # -- finished: ⟨EOS⟩ among the best K candidates joins the buffer of K finished ------------
        new_fin = torch.where(is_eos[:, :K], top[:, :K] / lp(t + 1), NEG_INF)
        cand_tokens = torch.cat([_gather_rows(history, rows[:, :K]), tok[:, :K, None]], -1)
        fin_tokens = torch.nn.functional.pad(fin_tokens, (0, 1), value=eos_id)
        fin_scores, pick = torch.cat([fin_scores, new_fin], 1).topk(K, dim=1)
        fin_tokens = torch.cat([fin_tokens, cand_tokens], 1).gather(
            1, pick.unsqueeze(-1).expand(-1, -1, t + 1))
        if keep_w:
            step_w = _gather_rows(w, rows[:, :K]).unsqueeze(2)  # (B, K, 1, J, S)
            past = _gather_rows(w_history, rows[:, :K]) if w_history is not None else None
            cand_w = step_w if past is None else torch.cat([past, step_w], 2)
            old = (torch.zeros_like(cand_w) if fin_weights is None
                   else torch.nn.functional.pad(fin_weights, (0, 0, 0, 0, 0, 1)))
            idx = pick.view(B, K, 1, 1, 1).expand(-1, -1, *cand_w.shape[2:])
            fin_weights = torch.cat([old, cand_w], 1).gather(1, idx)
        # -- live: the best K candidates that do not end in ⟨EOS⟩ --------------------------------
        live, pos = top.masked_fill(is_eos, NEG_INF).topk(K, dim=1)
        sel = rows.gather(1, pos).reshape(B * K)
        y = tok.gather(1, pos).reshape(B * K)
        state = reorder_beams(decoder, state, sel)
        history = torch.cat([history.index_select(0, sel), y.unsqueeze(1)], dim=1)
        if keep_w:
            w = w.index_select(0, sel).unsqueeze(1)
            w_history = w if w_history is None else torch.cat([w_history.index_select(0, sel), w], 1)
        done |= fin_scores[:, 0] >= live[:, 0] / lp(max_len)
        if bool(done.all()):
            break
    L = history.shape[1]
    # prefixes still live at max_len compete as they are (no ⟨EOS⟩), unless the sentence is done
    live_final = torch.where(done.unsqueeze(1), NEG_INF, live / lp(L))
    scores = torch.cat([fin_scores, live_final], 1)  # (B, 2K)
    best = scores.argmax(-1)
    tokens = torch.cat([fin_tokens, history.view(B, K, L)], 1)[torch.arange(B, device=dev), best]
    weights = None
    if w_history is not None:
        J_S = w_history.shape[2:]
        fw = fin_weights if fin_weights is not None else w_history.new_zeros(B, K, L, *J_S)
        weights = torch.cat([fw, w_history.view(B, K, L, *J_S)], 1)[torch.arange(B, device=dev), best]
    if return_scores:
        return tokens, weights, scores.gather(1, best.unsqueeze(1)).squeeze(1)
    return tokens, weights


def decode(model, src: torch.Tensor, src_lengths: torch.Tensor, bos_id: int, eos_id: int,
           max_len: int, beam_size: int = 1, length_penalty: float = 0.0,
           need_weights: bool = False) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Greedy decoding for ``beam_size`` 1, else beam search: tokens (B, L), weights or None."""
    if beam_size == 1:
        return greedy_decode(model, src, src_lengths, bos_id, eos_id, max_len, need_weights)
    return beam_search(model, src, src_lengths, bos_id, eos_id, max_len, beam_size,
                       length_penalty, need_weights)
