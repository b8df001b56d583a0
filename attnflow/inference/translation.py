"""Translation runs applied: a run (or an ensemble of runs sharing tokenizers) rebuilt with its
tokenizers and decoding settings, sources decoded in batches of similar length (greedy or beam
search, as the task's test step), and every attention map of a teacher-forced pass over the
output."""

from __future__ import annotations

import functools
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from attnflow.blocks.attention.base import AttentionBlock
from attnflow.blocks.decoders.decoding import decode
from attnflow.config.registry import TASKS, AttnflowWarning
from attnflow.data.parallel import BOS, EOS, PAD, collate
from attnflow.inference.runs import InferenceError, data_module, rebuild
from attnflow.io.checkpoints import Run, load_run, no_grad
from attnflow.io.text import text_array
from attnflow.models.ensemble import Ensemble
from attnflow.tasks.seq2seq import strip_after_eos
from attnflow.viz.figures import decoder_alpha_label


def load(target: Path | str, device: str = "cpu", run: Optional[Run] = None):
    """(model, data module, config as recorded) from a run directory or checkpoint."""
    run = run or load_run(target, device)
    if run.config["data"].get("name") != "parallel":
        raise InferenceError(f"the run at {run.run_dir} is not a translation run (data "
                             f"'{run.config['data'].get('name')}'); attnflow-eval gives any run's "
                             f"metrics, attnflow-predict labels documents, graph nodes, texts and images")
    dm = data_module(run)
    dm.load_tokenizers(run.run_dir / "tokenizer", run.ckpt.get("attnflow_artifacts"))
    return rebuild(run, dm.model_context(), device=device), dm, run.config


def load_members(paths: Sequence[Path], device: str = "cpu", runs: Optional[Sequence[Run]] = None):
    """(model, data module, configs): the model of ``paths[0]``, or the Ensemble of all
    ``paths``, with the first's data module, and the config of every member (in their order);
    ``runs``: the runs of ``paths``, already read."""
    loaded = [load(path, device, run) for path, run in zip(paths, runs or [None] * len(paths))]
    (model, dm, _), configs = loaded[0], [cfg for _, _, cfg in loaded]
    for path, (_, other, _) in zip(paths[1:], loaded[1:]):
        for what, mine, theirs in (("source", dm.src_tok, other.src_tok), ("target", dm.tgt_tok, other.tgt_tok)):
            if theirs.to_str() != mine.to_str():
                raise InferenceError(f"--ensemble {path}: its {what} tokenizer differs from that of "
                                     f"{paths[0]}; an ensemble's members share their token ids")
    if len(paths) > 1:
        model = Ensemble([m for m, _, _ in loaded]).eval()
    return model, dm, configs


def decoding_settings(paths: Sequence[Path], configs: Sequence, beam: Optional[int],
                      length_penalty: Optional[float]) -> Tuple[int, float]:
    """(beam, α): the options where given, else how the first run's test step decoded (its
    task's ``beam_size``, ``length_penalty``; without beam search 1 and 0.6); an ensemble member
    that decoded otherwise is one warning."""
    own = [TASKS.validate(cfg["task"], "task") if cfg.get("task") else {} for cfg in configs]
    own = [{"beam": int(t.get("beam_size", 1)), "length_penalty": float(t.get("length_penalty", 0.6))}
           for t in own]
    given = {"beam": beam, "length_penalty": length_penalty}
    unread = [f"{path} (task.{'beam_size' if key == 'beam' else key} {s[key]:g})"
              for key, value in given.items() if value is None
              for path, s in zip(paths[1:], own[1:]) if s[key] != own[0][key]]
    given = {k: own[0][k] if v is None else v for k, v in given.items()}
    if unread:
        warnings.warn(f"--ensemble {', '.join(unread)}: not read; the first run's decoding applies "
                      f"(beam {given['beam']:g}, length penalty {given['length_penalty']:g}; "
                      f"--beam and --length-penalty choose)", AttnflowWarning)
    return int(given["beam"]), float(given["length_penalty"])


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
def teacher_forced_attention(model, src: torch.Tensor, src_lengths: Optional[torch.Tensor],
                             tgt_in: torch.Tensor) -> Dict[str, List[torch.Tensor]]:
    """Every attention map of one teacher-forced pass of an encoder–decoder over a collated batch
    (``src`` token ids or images, ``src_lengths`` or None, ``tgt_in``), on the CPU, padded:
    ``cross`` per decoder layer (B, J, T, S), for Transformers also ``encoder_self`` (B, J, S, S)
    and ``decoder_self`` (B, J, T, T) per layer; kinds without maps are left out. Hooks make every
    attention block under ``model.encoder`` / ``model.decoder`` return its weights; a block whose
    queries are its keys gives self-attention; an RNN decoder's α is what it returns."""
    device = next(model.parameters()).device
    calls: Dict[int, Tuple[str, List[torch.Tensor]]] = {}  # per block, in order of first call
    handles = [h for part, sub in (("encoder", model.encoder), ("decoder", model.decoder))
               for m in sub.modules() if isinstance(m, AttentionBlock)
               for h in (m.register_forward_pre_hook(_need_weights, with_kwargs=True),
                         m.register_forward_hook(functools.partial(_keep, calls, part)))]
    try:
        _, alpha = model(src.to(device), None if src_lengths is None else src_lengths.to(device),
                         tgt_in.to(device), need_weights=True)
    finally:
        for h in handles:
            h.remove()
    captured: Dict[str, List[torch.Tensor]] = {"encoder_self": [], "decoder_self": [], "cross": []}
    for kind, parts in calls.values():  # a block called once per position: its rows, in order
        captured[kind].append(torch.cat(parts, dim=2))
    if not captured["cross"] and alpha is not None:  # RNN decoders: α from the decoder itself
        captured["cross"] = [alpha.transpose(1, 2).float().cpu()]  # (B, T, J, S) -> (B, J, T, S)
    return {kind: maps for kind, maps in captured.items() if maps}


@no_grad
def attention_arrays(model, ids: List[List[int]], rows: List[List[int]]) -> List[Dict[str, np.ndarray]]:
    """Per source with an output, from one teacher-forced pass (:func:`teacher_forced_attention`):
    ``cross`` (L, J, T, S) and for Transformers ``encoder_self`` and ``decoder_self``."""
    keep = [i for i in range(len(ids)) if ids[i] and rows[i]]
    out: List[Dict[str, np.ndarray]] = [{} for _ in ids]
    if not keep:
        return out
    batch = collate([(i, ids[i], rows[i][:-1]) for i in keep])
    captured = teacher_forced_attention(model, batch["src"], batch["src_lengths"], batch["tgt_in"])
    for r, i in enumerate(keep):
        S, T = len(ids[i]), len(rows[i])
        size = {"encoder_self": (S, S), "decoder_self": (T, T), "cross": (T, S)}
        out[i] = {kind: torch.stack([m[r, :, :size[kind][0], :size[kind][1]] for m in maps]).numpy()
                  for kind, maps in captured.items()}
    return out


def saved_attention(model, dm, ids: List[List[int]], rows: List[List[int]], first: int) -> Dict[str, np.ndarray]:
    """The ``--save-attention`` arrays of sources numbered from ``first``: ``{i}/source`` and
    ``{i}/output`` (tokens), and each map of :func:`attention_arrays` as ``{i}/<kind>``."""
    arrays: Dict[str, np.ndarray] = {}
    for j, (s, r, maps) in enumerate(zip(ids, rows, attention_arrays(model, ids, rows)), first):
        arrays.update({f"{j}/source": text_array(tokens(dm.src_tok, s)),
                       f"{j}/output": text_array(tokens(dm.tgt_tok, r)),
                       **{f"{j}/{k}": v for k, v in maps.items()}})
    return arrays
