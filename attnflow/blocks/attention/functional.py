"""The attention computation shared by every attention block.

c = Σ_i v_i · norm_i a(k_i, q) (Bahdanau et al. 2015, eq. (5)–(6); Vaswani et al. 2017, §3.2).
When the scorer is s·qᵀk (``sdpa_scale``), the normaliser SoftMax and no weights are asked for,
``F.scaled_dot_product_attention`` does it in one kernel; otherwise scores, masks, normaliser,
dropout and weights @ values run explicitly. Masks are bool, True where a key may be attended;
``causal`` lets query t see keys ≤ t.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F

from attnflow.blocks.normalizers.base import Normalizer
from attnflow.blocks.scorers.base import Scorer


def causal_mask(tq: int, tk: int, device=None) -> torch.Tensor:
    """(Tq, Tk) bool, True on and below the diagonal: query t may see keys 0..t."""
    return torch.ones(tq, tk, dtype=torch.bool, device=device).tril()


def padding_mask(lengths: torch.Tensor, max_len: Optional[int] = None) -> torch.Tensor:
    """(B, T) bool, True at positions < length."""
    max_len = int(lengths.max()) if max_len is None else max_len
    return torch.arange(max_len, device=lengths.device) < lengths.unsqueeze(-1)


def sdpa(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, **kwargs) -> torch.Tensor:
    """``F.scaled_dot_product_attention``, in float32 for bf16/fp16 inputs on the CPU (whose
    bf16 backward was 6× slower than float32's)."""
    if query.device.type != "cpu" or query.dtype not in (torch.bfloat16, torch.float16):
        return F.scaled_dot_product_attention(query, keys, values, **kwargs)
    with torch.autocast("cpu", enabled=False):
        out = F.scaled_dot_product_attention(query.float(), keys.float(), values.float(), **kwargs)
    return out.to(query.dtype)


def attend(
    scorer: Scorer,
    normalizer: Normalizer,
    query: torch.Tensor,
    prepared_keys: torch.Tensor,
    values: torch.Tensor,
    mask: Optional[torch.Tensor] = None,
    *,
    causal: bool = False,
    dropout: float = 0.0,
    need_weights: bool = False,
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Context (..., Tq, Dv) and, when ``need_weights``, weights α (..., Tq, Tk) before dropout."""
    if not need_weights and scorer.sdpa_scale is not None and normalizer.is_softmax:
        attn_mask = mask
        if causal and mask is not None:
            attn_mask = mask & causal_mask(query.shape[-2], prepared_keys.shape[-2], query.device)
        context = sdpa(query, prepared_keys, values, attn_mask=attn_mask, dropout_p=dropout,
                       is_causal=causal and mask is None, scale=scorer.sdpa_scale)
        return context, None
    scores = scorer.score_prepared(query, prepared_keys)
    if causal:
        future = causal_mask(scores.shape[-2], scores.shape[-1], scores.device)
        mask = future if mask is None else mask & future
    weights = normalizer(scores, mask)
    dropped = F.dropout(weights, dropout) if dropout > 0 else weights
    return dropped @ values, (weights if need_weights else None)
