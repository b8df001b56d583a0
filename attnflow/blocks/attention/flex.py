"""Attention through PyTorch's FlexAttention: one fused kernel for scores that are not a plain
q·k (Dong, Feng, Guessous, Liang & He 2024, "FlexAttention: a programming model for generating
optimized attention kernels"; ``torch.nn.attention.flex_attention``).

    c_t = Σ_i v_i SoftMax_i score_mod(s·q̃_tᵀk̃_i, b, h, t, i),   over the keys a BlockMask keeps

A dot-product scorer (``dot_product``) gives q̃ and k̃ with no ``score_mod``; a decomposable one
(``decomposable``, e.g. GAT) gives a ``score_mod`` that reads its per-token terms, so the (T, T)
scores never exist in memory. Masks (bool, True where a key may be attended) become a
``BlockMask``; fully masked blocks are skipped. FlexAttention has no dropout of α, and on the CPU
(torch 2.13) no backward: the CPU runs its unfused reference (forward, for tests); CUDA compiles
the kernel once per process.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

try:  # (a torch without FlexAttention imports this module; flex_supported() says False)
    from torch.nn.attention.flex_attention import AuxRequest, create_block_mask, flex_attention
except ImportError:
    AuxRequest = create_block_mask = flex_attention = None

from attnflow.blocks.scorers.base import Scorer

_KERNEL: dict = {}
_DUMMY_DIM = 16  # FlexAttention's smallest head size: the q·k of a decomposable score is unused


def flex_supported() -> bool:
    """Whether this torch has FlexAttention."""
    return flex_attention is not None


def _kernel(device: torch.device) -> Callable:
    if device.type == "cpu":
        return flex_attention
    if "cuda" not in _KERNEL:
        _KERNEL["cuda"] = torch.compile(flex_attention)  # shapes vary by batch: dynamic on recompiling
    return _KERNEL["cuda"]


def block_mask(mask: Optional[torch.Tensor], causal: bool, batch: int, heads: int, tq: int,
               tk: int, device: torch.device):
    """A ``BlockMask`` of ``mask`` (broadcastable to (B, H, Tq, Tk)) and the causal rule; None
    when every key is allowed."""
    if mask is None and not causal:
        return None
    if mask is None:
        dims, full = (None, None), None
    else:
        while mask.dim() < 4:
            mask = mask.unsqueeze(0)
        dims = tuple(n if m > 1 else None for n, m in zip((batch, heads), mask.shape[:2]))
        full = mask.expand(mask.shape[0], mask.shape[1], tq, tk)

    def mask_mod(b, h, q, kv):
        keep = q >= kv if causal else q >= 0
        if full is not None:
            keep = keep & full[b if dims[0] else 0, h if dims[1] else 0, q, kv]
        return keep

    return create_block_mask(mask_mod, dims[0], dims[1], tq, tk, device=device,
                             _compile=device.type == "cuda")


def flex(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, *,
         score_mod: Optional[Callable] = None, mask: Optional[torch.Tensor] = None,
         causal: bool = False, scale: float = 1.0, lse: bool = False):
    """FlexAttention on (B, H, T, d) tensors: context (B, H, Tq, dv), and with ``lse`` the
    log-sum-exp of each row's scores (B, H, Tq) in float32 (−∞ for a row with no key)."""
    b, h, tq, tk = query.shape[0], query.shape[1], query.shape[2], keys.shape[2]
    mask_ = block_mask(mask, causal, b, h, tq, tk, query.device)
    out = _kernel(query.device)(query, keys, values, score_mod=score_mod, block_mask=mask_,
                                scale=scale, return_aux=AuxRequest(lse=True) if lse else None)
    if lse:
        return out[0], out[1].lse
    return out


def _four_dims(x: torch.Tensor) -> torch.Tensor:
    return x if x.dim() == 4 else x.unsqueeze(-3)


def flex_scored(scorer: Scorer, query: torch.Tensor, prepared_keys: torch.Tensor,
                values: torch.Tensor, mask: Optional[torch.Tensor], causal: bool
                ) -> torch.Tensor:
    """Σ_i v_i SoftMax_i a(k_i, q) for a ``dot_product`` or ``decomposable`` scorer, on (B, J, T,
    d) or (B, T, d) tensors (one head)."""
    q, v = _four_dims(query), _four_dims(values)
    if mask is not None and mask.dim() == 3 and query.dim() == 3:
        mask = mask.unsqueeze(-3)
    if scorer.dot_product:
        q = _four_dims(scorer.dot_query(query)).to(v.dtype)
        out = flex(q, _four_dims(prepared_keys).to(v.dtype), v, mask=mask, causal=causal)
    else:
        key_terms = scorer.prepared_terms(prepared_keys)
        key_terms = key_terms if key_terms.dim() == 3 else key_terms.unsqueeze(-2)
        query_terms = scorer.query_terms(q)  # (B, J, Tq)

        def score_mod(score, b, h, t, i):
            return scorer.combine_terms(key_terms[b, h, i], query_terms[b, h, t])

        out = flex(v.new_zeros(*q.shape[:-1], _DUMMY_DIM), v.new_zeros(*v.shape[:-1], _DUMMY_DIM),
                   v, score_mod=score_mod, mask=mask, causal=causal)
    return out if query.dim() == 4 else out.squeeze(-3)


def flex_relative(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                  rel_k: torch.Tensor, rel_v: torch.Tensor, scale: float, max_distance: int,
                  mask: Optional[torch.Tensor], causal: bool) -> torch.Tensor:
    """Shaw et al. (2018) self-attention, eq. (3)–(4), for s·qᵀk scorers, query row t at key
    position t: the key term s·qᵀwᵏ_{i⊟t} is a ``score_mod`` over a (Tq, 2δ+1) table; the value
    term Σ_i α_ti wᵛ_{i⊟t} needs α only in the band |i − t| < δ (recomputed from the row's
    log-sum-exp) and the two clipped tails (the left one from a second kernel's log-sum-exp)."""
    dist = max_distance
    table = (query @ rel_k.t()).float()  # (B, J, T, 2δ+1)

    def score_mod(score, b, h, t, i):
        return score + scale * table[b, h, t, (i - t).clamp(-dist, dist) + dist]

    out, lse = flex(query, keys, values, score_mod=score_mod, mask=mask, causal=causal,
                    scale=scale, lse=True)
    band = band_weights(query, keys, table, lse, scale, dist, mask, causal)
    left = tail_weight(query, keys, values, score_mod, lse, scale, dist, mask, causal)
    right = (1 - left - band.sum(-1)).clamp_min(0) * (lse > float("-inf"))
    bins = torch.cat([left.unsqueeze(-1), band, right.unsqueeze(-1)], -1)
    return out + (bins @ rel_v.float()).to(out.dtype)


def band_weights(query, keys, table, lse, scale, dist, mask, causal) -> torch.Tensor:
    """α_{t, t+r} for r = −δ+1 … δ−1 (B, J, T, 2δ−1), zero outside the sequence and the mask."""
    width, t = 2 * dist - 1, query.shape[-2]
    padded = torch.nn.functional.pad(keys, (0, 0, dist - 1, dist - 1))
    near = padded.unfold(-2, width, 1)  # (B, J, T, d, 2δ−1): keys t−δ+1 … t+δ−1
    content = (query.unsqueeze(-2) @ near).squeeze(-2).float()  # (B, J, T, 2δ−1)
    scores = scale * (content + table[..., 1:-1])
    position = torch.arange(t, device=query.device).unsqueeze(1) + torch.arange(
        1 - dist, dist, device=query.device)  # (T, 2δ−1): the key position of each band entry
    keep = (position >= 0) & (position < keys.shape[-2])
    if causal:
        keep = keep & (position <= torch.arange(t, device=query.device).unsqueeze(1))
    if mask is not None:
        key_mask = mask.expand(*mask.shape[:-2], t, keys.shape[-2])
        index = position.clamp(0, keys.shape[-2] - 1).expand(*key_mask.shape[:-1], width)
        keep = keep & key_mask.gather(-1, index)
    return torch.where(keep, torch.exp(scores - lse.unsqueeze(-1)), 0.0)


def tail_weight(query, keys, values, score_mod, lse, scale, dist, mask, causal) -> torch.Tensor:
    """Σ_{i ≤ t−δ} α_ti (B, J, T): the left tail's log-sum-exp against the row's."""
    t, tk = query.shape[-2], keys.shape[-2]
    far = torch.arange(tk, device=query.device) <= torch.arange(t, device=query.device
                                                                 ).unsqueeze(1) - dist
    tail_mask = far if mask is None else mask & far
    _, tail = flex(query, keys, values, score_mod=score_mod, mask=tail_mask, causal=causal,
                   scale=scale, lse=True)
    return torch.exp(tail - lse).nan_to_num(0.0)

