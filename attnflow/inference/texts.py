"""BERT runs applied: the model and tokenizer rebuilt (one model with a head per task for a
multi-task run), texts encoded as in training and labelled, their [MASK] tokens filled or their
words tagged, with the attention of ⟨CLS⟩."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Union

import numpy as np
import torch
from tokenizers import Tokenizer

from attnflow.config.registry import DATA
from attnflow.data.corpus import MASK, PAD, SEP, run_tokenizer
from attnflow.data.pretraining import pad_rows
from attnflow.data.tagged import IGNORE, encode_tagged
from attnflow.data.text_classification import encode_texts
from attnflow.inference.runs import InferenceError, rebuild
from attnflow.io.checkpoints import Run
from attnflow.io.labels import named_artifacts
from attnflow.viz.explain import join_pieces
from attnflow.viz.figures import cls_rows


@dataclass
class BertRun:
    model: torch.nn.Module
    tokenizer: Tokenizer
    itos: List[str]
    max_len: int
    class_names: List[str]  # [] for a pretraining run
    pretraining: bool


def load_bert(run: Run, device: str = "cpu") -> BertRun:
    """The run's BERT model with its weights, in eval mode, and its tokenizer."""
    cfg, art = run.config, named_artifacts(run)
    tok = run_tokenizer(run.run_dir, art, str(run.run_dir))
    pretraining = (cfg.get("task") or {}).get("name") == "bert_pretraining"
    names = [] if pretraining else [str(c) for c in art.get("class_names") or []]
    max_len = art.get("max_len") or DATA.validate(cfg["data"], "data").get("max_len")
    model = rebuild(run, {"vocab_size": tok.get_vocab_size(), "pad_id": PAD, "num_classes": len(names)},
                    f" (head {cfg['model'].get('head', 'pretraining')}, a vocabulary of "
                    f"{tok.get_vocab_size()} tokens, {len(names)} classes)", device=device)
    itos = [tok.id_to_token(i) for i in range(tok.get_vocab_size())]
    # the data's cap, within the model's positions
    return BertRun(model, tok, itos, min(int(max_len), model.max_len), names, pretraining)


def encode(bert: BertRun, texts: Sequence[str]) -> List[dict]:
    """Per text: ``ids`` ``[CLS] subwords [SEP]`` cut to ``max_len`` (as the data modules'
    ``encode_texts``: the end is cut), ``segments`` (0, then 1 after the first inner [SEP] of a
    pretraining run's input), ``size`` (how many subwords the text has) and ``cut`` (how many
    were cut)."""
    full, _ = encode_texts(bert.tokenizer, texts, sys.maxsize)  # every subword: to count the cut
    out = []
    for ids in full:
        n = len(ids) - 2
        keep = ids if n <= bert.max_len - 2 else np.concatenate((ids[: bert.max_len - 1], [SEP]))
        seg = np.zeros(len(keep), np.int64)
        if bert.pretraining:  # [CLS] A [SEP] B [SEP]: B and the last [SEP] are segment 1
            seg = np.minimum(np.cumsum(np.concatenate(([0], keep[:-1] == SEP))), 1)
        out.append({"ids": keep, "segments": seg, "size": n, "cut": n - (len(keep) - 2)})
    return out


@torch.no_grad()
def forward(bert: BertRun, items: Sequence[dict]):
    """One padded batch through the model: (hidden (B, T, d), ⟨CLS⟩ attention (B, N, J, T), zero
    at padding, lengths (B,)). The maps are the encoder's own ``need_weights`` output, row 0."""
    device = next(bert.model.parameters()).device
    ids, real = pad_rows([it["ids"] for it in items])  # as the data modules' batches
    seg, _ = pad_rows([it["segments"] for it in items], 0)
    lens = real.sum(1)
    hidden, maps = bert.model(torch.from_numpy(ids).to(device), torch.from_numpy(seg).to(device),
                              torch.from_numpy(real).to(device), need_weights=True)
    return hidden, cls_rows(maps), torch.from_numpy(lens)


def encoded_results(texts: Sequence[str], items: Sequence[dict]) -> List[dict]:
    """Per text its ``text``, ``empty`` (no subwords), ``size`` and ``cut`` (of :func:`encode`)."""
    return [{"text": t, "empty": it["size"] == 0, "size": it["size"], "cut": it["cut"]}
            for t, it in zip(texts, items)]


def _fill(bert: BertRun, hidden: torch.Tensor, items: Sequence[dict], top_k: int) -> List[dict]:
    """Per text (``items`` of non-empty ones, ``hidden`` their states): ``masks`` (per [MASK] the
    top-k {token, token_str, score}) and ``sequence`` (each [MASK] filled by its first)."""
    where = [np.flatnonzero(it["ids"] == MASK) for it in items]
    b = torch.as_tensor(np.concatenate([np.full(len(w), k) for k, w in enumerate(where)]), dtype=torch.long)
    t = torch.as_tensor(np.concatenate(where), dtype=torch.long)
    top = torch.softmax(bert.model.mlm_logits(hidden[b, t]).float(), -1).topk(
        min(top_k, len(bert.itos)), -1) if len(t) else None
    out, start = [], 0
    for it, w in zip(items, where):
        masks = [[{"token": int(tid), "token_str": bert.itos[int(tid)], "score": float(p)}
                  for tid, p in zip(top.indices[j].tolist(), top.values[j].tolist())]
                 for j in range(start, start + len(w))]
        start += len(w)
        filled = [bert.itos[x] for x in it["ids"].tolist()]
        for pos, m in zip(w.tolist(), masks):
            filled[pos] = m[0]["token_str"]
        out.append({"masks": masks, "sequence": join_pieces(filled, ("[PAD]", "[CLS]", "[SEP]"))})
    return out


def labelled(p: torch.Tensor, names: List[str]) -> dict:
    """``label``, ``probability`` and ``probabilities`` of a text's class probabilities ``p``."""
    return {"label": names[int(p.argmax())], "probability": float(p.max()),
            "probabilities": dict(zip(names, p.tolist()))}


@torch.no_grad()
def predict_texts(bert: BertRun, texts: Sequence[str], top_k: int = 5) -> List[dict]:
    """Per text: ``tokens``, ``cls_attention`` (N, J, T) numpy, ``size`` (subwords), ``cut``,
    ``empty``, and for classification ``label``, ``probability``, ``probabilities``; for
    fill-mask ``masks`` (per [MASK], the top-k {token, token_str, score}) and ``sequence``."""
    items = encode(bert, texts)
    results = encoded_results(texts, items)
    live = [i for i, r in enumerate(results) if not r["empty"]]
    if not live:
        return results
    hidden, cls, lens = forward(bert, [items[i] for i in live])
    if bert.pretraining:
        heads = _fill(bert, hidden, [items[i] for i in live], top_k)
    else:
        probs = torch.softmax(bert.model.classify_logits(hidden).float(), -1).cpu()
        heads = [{**labelled(p, bert.class_names), "index": int(p.argmax())} for p in probs]
    for row, i in enumerate(live):
        results[i].update(heads[row], tokens=[bert.itos[x] for x in items[i]["ids"].tolist()],
                          cls_attention=cls[row, :, :, :int(lens[row])].cpu().numpy())
    return results


def cls_arrays(results: Sequence[dict], first: int) -> dict:
    """``--save-attention``'s arrays of texts numbered from ``first``: ``{i}/tokens`` and, but
    for an empty one, ``{i}/cls_attention`` (N, J, T)."""
    arrays = {}
    for i, r in enumerate(results, first):
        arrays[f"{i}/tokens"] = np.asarray(r.get("tokens", []), dtype=str)
        if not r["empty"]:
            arrays[f"{i}/cls_attention"] = r["cls_attention"]
    return arrays


Line = Union[str, Sequence[str]]  # a text line, or a JSON line's words


@torch.no_grad()
def tag_lines(bert: BertRun, lines: Sequence[Line], task: Optional[str] = None) -> List[dict]:
    """Per line: ``text``, ``words``, ``tags`` and ``probabilities`` (None for a word past the
    cut), ``cut`` (such words), ``size`` (words), ``empty``; a non-empty one also ``tokens`` and
    ``cls_attention`` (N, J, T) numpy. ``task``: the head of a multi-task run."""
    words = [line.split() if isinstance(line, str) else [w.strip() for w in line] for line in lines]
    words = [[w for w in ws if w] for ws in words]
    ids, labels, cut = encode_tagged(bert.tokenizer, words, [np.zeros(len(w), np.int64) for w in words],
                                     bert.max_len)
    results = [{"text": line if isinstance(line, str) else " ".join(line), "words": ws,
                "empty": not ws, "cut": c, "size": len(ws)} for line, ws, c in zip(lines, words, cut)]
    live = [k for k, r in enumerate(results) if not r["empty"]]
    if not live:
        return results
    hidden, cls, lens = forward(bert, [{"ids": ids[k], "segments": np.zeros_like(ids[k])}
                                       for k in live])
    top, best = torch.softmax(bert.model.token_logits(hidden, task).float(), -1).cpu().max(-1)
    for row, k in enumerate(live):
        r, n = results[k], int(lens[row])
        first = np.flatnonzero(labels[k] != IGNORE)  # each kept word's first piece, in order
        pad = [None] * r["cut"]
        r.update(tags=[bert.class_names[c] for c in best[row, first].tolist()] + pad,
                 probabilities=top[row, first].tolist() + pad,
                 tokens=[bert.itos[x] for x in ids[k].tolist()],
                 cls_attention=cls[row, :, :, :n].cpu().numpy())
    return results


KINDS = ("text_classification", "token_classification")


def load_multitask(run: Run, device: str = "cpu"):
    """(BertRun per task, interface per task) of the run: one model, its tokenizer, each task's
    ``max_len`` and classes; a task of another interface than :data:`KINDS` is refused."""
    art = named_artifacts(run)
    tokenizer = run_tokenizer(run.run_dir, art, "the run")
    configs = DATA.get("multitask").task_configs(run.config["data"])
    per_task = {t: (art.get("tasks") or {}).get(t) or {} for t in configs}
    kinds = {t: DATA.get(c["name"]).interface for t, c in configs.items()}
    for t, kind in kinds.items():
        if kind not in KINDS:
            raise InferenceError(f"task '{t}' works on {kind}; attnflow-predict labels the "
                                 f"{' and '.join(KINDS)} tasks of multi-task runs")
    names = {t: [str(c) for c in per_task[t].get("class_names") or []] for t in configs}
    model = rebuild(run, {"vocab_size": tokenizer.get_vocab_size(), "pad_id": PAD,
                          "tasks": {t: (kinds[t], len(names[t])) for t in configs}},
                    " (head multitask, tasks " + ", ".join(f"{t}: {len(c)} classes" for t, c in names.items())
                    + ")", device=device)
    itos = [tokenizer.id_to_token(i) for i in range(tokenizer.get_vocab_size())]
    runs = {t: BertRun(model, tokenizer, itos, min(int(per_task[t].get("max_len") or configs[t]["max_len"]),
                                                   model.max_len), names[t], False) for t in configs}
    return runs, kinds


@torch.no_grad()
def predict_tasks(runs: Dict[str, BertRun], kinds: Dict[str, str], texts: Sequence[str]) -> List[dict]:
    """Per text: ``tasks`` {task: label, probability, probabilities; or words, tags,
    probabilities}, ``empty``, ``size`` (subwords), ``cut`` (of the shortest ``max_len``)."""
    shortest = min(runs.values(), key=lambda b: b.max_len)
    results = [{**r, "tasks": {}} for r in encoded_results(texts, encode(shortest, texts))]
    live = [i for i, r in enumerate(results) if not r["empty"]]
    hidden = {}
    for t, bert in runs.items() if live else ():
        if kinds[t] == "token_classification":
            for i, r in zip(live, tag_lines(bert, [texts[i] for i in live], t)):
                results[i]["tasks"][t] = {k: r[k] for k in ("words", "tags", "probabilities")}
            continue
        if bert.max_len not in hidden:
            hidden[bert.max_len] = forward(bert, encode(bert, [texts[i] for i in live]))[0]
        probs = torch.softmax(bert.model.classify_logits(hidden[bert.max_len], t).float(), -1).cpu()
        for p, i in zip(probs, live):
            results[i]["tasks"][t] = labelled(p, bert.class_names)
    return results
