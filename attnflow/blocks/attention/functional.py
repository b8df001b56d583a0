"""The attention computation shared by every attention block.

c = Σ_i v_i · norm_i a(k_i, q) (Bahdanau et al. 2015, eq. (5)–(6); Vaswani et al. 2017, §3.2),
on one of three paths (``backend``):

- ``sdpa``: ``F.scaled_dot_product_attention`` for a ``dot_product`` scorer (dot, scaled_dot,
  cosine, general) with SoftMax: one fused kernel;
- ``flex``: FlexAttention (:mod:`.flex`) for a dot-product or ``decomposable`` scorer (gat) with
  SoftMax and no dropout of α: one fused kernel with the score as a ``score_mod``;
- ``explicit``: scores, masks, normaliser, dropout and weights @ values, for every scorer and
  normaliser, and whenever the weights are asked for (attention maps).

``auto`` takes SDPA where it applies, else flex on CUDA where it applies, else explicit. Masks are
bool, True where a key may be attended; ``causal`` lets query t see keys ≤ t.
"""

from __future__ import annotations

from typing import Literal, Optional, Tuple

import torch
import torch.nn.functional as F

from attnflow.blocks.attention.flex import flex_scored, flex_supported
from attnflow.blocks.normalizers.base import Normalizer
from attnflow.blocks.scorers.base import Scorer
from attnflow.config.registry import ConfigError

Backend = Literal["auto", "sdpa", "flex", "explicit"]


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


def check_backend(where: str, backend: str, scorer: Scorer, normalizer: Normalizer,
                  dropout: float) -> None:
    """ConfigError when ``backend`` cannot run this scorer, normaliser and dropout."""
    name = scorer.registry_name or type(scorer).__name__
    if backend in ("sdpa", "flex") and not normalizer.is_softmax:
        raise ConfigError(f"{where}.backend={backend} needs the softmax normaliser (temperature "
                          f"1); use backend=explicit or auto")
    if backend == "sdpa" and not scorer.dot_product:
        raise ConfigError(f"{where}.backend=sdpa needs a dot-product scorer (dot, scaled_dot, "
                          f"cosine, general), not '{name}'; use backend=flex, explicit or auto")
    if backend == "flex":
        if not (scorer.dot_product or scorer.decomposable):
            raise ConfigError(f"{where}.backend=flex needs a dot-product or decomposable scorer "
                              f"(dot, scaled_dot, cosine, general, gat), not '{name}'; use "
                              f"backend=explicit or auto")
        if dropout > 0:
            raise ConfigError(f"{where}.backend=flex has no dropout of the attention weights; set "
                              f"{where}.dropout=0 or use backend=auto")
        if not flex_supported():
            raise ConfigError(f"{where}.backend=flex needs torch.nn.attention.flex_attention")


def choose_path(backend: str, scorer: Scorer, normalizer: Normalizer, query: torch.Tensor,
                dropout: float, need_weights: bool, sdpa_fits: bool = True) -> str:
    """The path of one call: 'sdpa', 'flex' or 'explicit' (see the module's docstring);
    ``sdpa_fits=False``: terms SDPA cannot add (relative positions)."""
    if need_weights or backend == "explicit" or not normalizer.is_softmax:
        return "explicit"
    if sdpa_fits and backend != "flex" and scorer.dot_product:
        return "sdpa"
    fusable = (scorer.dot_product or scorer.decomposable) and dropout == 0
    if backend == "flex" or (backend == "auto" and fusable and query.is_cuda and flex_supported()):
        return "flex"
    return "explicit"


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
    backend: Backend = "auto",
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Context (..., Tq, Dv) and, when ``need_weights``, weights α (..., Tq, Tk) before dropout."""
    path = choose_path(backend, scorer, normalizer, query, dropout, need_weights)
    if path == "flex":
        return flex_scored(scorer, query, prepared_keys, values, mask, causal), None
    if path == "sdpa":
        attn_mask = mask
        if causal and mask is not None:
            attn_mask = mask & causal_mask(query.shape[-2], prepared_keys.shape[-2], query.device)
        scale = scorer.sdpa_scale  # s·qᵀk on the raw query: SDPA scales inside its kernel
        q = query if scale is not None else scorer.dot_query(query)
        context = sdpa(q, prepared_keys, values, attn_mask=attn_mask, dropout_p=dropout,
                       is_causal=causal and mask is None, scale=1.0 if scale is None else scale)
        return context, None
    scores = scorer.score_prepared(query, prepared_keys)
    if causal:
        future = causal_mask(scores.shape[-2], scores.shape[-1], scores.device)
        mask = future if mask is None else mask & future
    weights = normalizer(scores, mask)
    dropped = F.dropout(weights, dropout) if dropout > 0 else weights
    return dropped @ values, (weights if need_weights else None)
