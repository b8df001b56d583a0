"""Translating with a trained seq2seq model outside training: sources decoded in batches of similar
length (greedy or beam search, as the task's test step), and every attention map of a
teacher-forced pass over the output, for ``attnflow-translate`` and the benchmarks."""

from __future__ import annotations

import functools
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from attnflow.blocks.attention.base import AttentionBlock
from attnflow.blocks.decoders.decoding import decode
from attnflow.data.parallel import BOS, EOS, PAD, collate
from attnflow.io.checkpoints import no_grad
from attnflow.tasks.seq2seq import strip_after_eos
from attnflow.viz.figures import decoder_alpha_label


def encode(dm, lines: Sequence[str]) -> Tuple[List[List[int]], List[int]]:
    """Source ids of ``lines`` cut to the model's limit ``max_src_len``, and their full lengths."""
    full = [e.ids for e in dm.src_tok.encode_batch(list(lines))]
    return [ids[: dm.max_src_len] for ids in full], [len(ids) for ids in full]


@no_grad
def decode_ids(model, ids: List[List[int]], beam: int = 1, length_penalty: float = 0.6,
               max_len: int = 100, need_weights: bool = False, batch_size: int = 64):
    """Output ids per source (⟨eos⟩ kept when produced, no padding; [] for an empty source) and
    per source the decoder's α (T, J, S) or None. Sources are batched by length."""
    device = next(model.parameters()).device
    rows: List[List[int]] = [[] for _ in ids]
    weights: List[Optional[torch.Tensor]] = [None] * len(ids)
    order = [i for i in sorted(range(len(ids)), key=lambda i: len(ids[i])) if ids[i]]
    for start in range(0, len(order), batch_size):
        chunk = order[start: start + batch_size]
        batch = {k: v.to(device) for k, v in collate([(i, ids[i], []) for i in chunk]).items()}
        pred, w = decode(model, batch["src"], batch["src_lengths"], BOS, EOS, max_len, beam,
                         length_penalty, need_weights)
        pred = strip_after_eos(pred, EOS, PAD)
        for r, i in enumerate(chunk):
            rows[i] = [t for t in pred[r].tolist() if t != PAD]
            if need_weights and w is not None:
                weights[i] = w[r, : len(rows[i]), :, : len(ids[i])].float().cpu()
    return rows, weights


@no_grad
def translate(model, dm, lines: List[str], beam: int = 1, length_penalty: float = 0.6,
              max_len: Optional[int] = None, need_weights: bool = False, batch_size: int = 64):
    """Translations of ``lines`` (and per sentence (α (T, S), source tokens, output tokens, what
    α is: :func:`attnflow.viz.figures.alpha_label`))."""
    ids, _ = encode(dm, lines)
    rows, w = decode_ids(model, ids, beam, length_penalty, max_len or dm.max_decode_len,
                         need_weights, batch_size)
    maps = heat_maps(model, dm, w, ids, rows) if need_weights else [None] * len(lines)
    return [dm.detokenize(r) for r in rows], maps


def heat_maps(model, dm, w, ids, rows) -> list:
    """Per source: (α (T, S) averaged over heads, source tokens, output tokens, its label naming
    the decoder layer and heads), or None."""
    return [None if wi is None else (wi.mean(1), tokens(dm.src_tok, s), tokens(dm.tgt_tok, r),
                                     decoder_alpha_label(model, wi.shape[1]))
            for wi, s, r in zip(w, ids, rows)]


def tokens(tok, ids) -> List[str]:
    return [tok.id_to_token(t) for t in ids]


def _keep(calls: dict, part: str, module, args, output) -> None:
    """A forward hook: an attention block's weights (B, J, Tq, Tk), as self-attention of ``part``
    where its queries are its keys, else as cross-attention, added to ``calls`` under the block."""
    if output[1] is not None:
        w = output[1].unsqueeze(1) if output[1].dim() == 3 else output[1]  # one head: (B, 1, Tq, Tk)
        kind = "cross" if args[0] is not args[1] else f"{part}_self"
        calls.setdefault(id(module), (kind, []))[1].append(w.float().cpu())


def _need_weights(module, args, kwargs):
    return args, {**kwargs, "need_weights": True}


@no_grad
def attention_arrays(model, ids: List[List[int]], rows: List[List[int]]) -> List[Dict[str, np.ndarray]]:
    """Per source with an output, from one teacher-forced pass: ``cross`` (L, J, T, S) and for
    Transformers ``encoder_self`` and ``decoder_self``. Hooks make every attention block under
    ``model.encoder`` / ``model.decoder`` return its weights; a block whose queries are its keys
    gives self-attention."""
    keep = [i for i in range(len(ids)) if ids[i] and rows[i]]
    out: List[Dict[str, np.ndarray]] = [{} for _ in ids]
    if not keep:
        return out
    device = next(model.parameters()).device
    batch = {k: v.to(device) for k, v in collate([(i, ids[i], rows[i][:-1]) for i in keep]).items()}
    calls: Dict[int, Tuple[str, List[torch.Tensor]]] = {}  # per block, in order of first call
    handles = [h for part, sub in (("encoder", model.encoder), ("decoder", model.decoder))
               for m in sub.modules() if isinstance(m, AttentionBlock)
               for h in (m.register_forward_pre_hook(_need_weights, with_kwargs=True),
                         m.register_forward_hook(functools.partial(_keep, calls, part)))]
    try:
        _, alpha = model(batch["src"], batch["src_lengths"], batch["tgt_in"], need_weights=True)
    finally:
        for h in handles:
            h.remove()
    captured: Dict[str, List[torch.Tensor]] = {"encoder_self": [], "decoder_self": [], "cross": []}
    for kind, parts in calls.values():  # a block called once per position: its rows, in order
        captured[kind].append(torch.cat(parts, dim=2))
    if not captured["cross"] and alpha is not None:  # RNN decoders: α from the decoder itself
        captured["cross"] = [alpha.transpose(1, 2).float().cpu()]  # (B, T, J, S) -> (B, J, T, S)
    for r, i in enumerate(keep):
        S, T = len(ids[i]), len(rows[i])
        size = {"encoder_self": (S, S), "decoder_self": (T, T), "cross": (T, S)}
        out[i] = {kind: torch.stack([m[r, :, :size[kind][0], :size[kind][1]] for m in maps]).numpy()
                  for kind, maps in captured.items() if maps}
    return out
