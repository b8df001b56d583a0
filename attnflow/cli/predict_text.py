"""attnflow-predict for BERT runs: label texts (fine-tuned, ``task=text_classification``), fill
their [MASK] tokens (pretrained, ``task=bert_pretraining``), tag their words
(``task=token_classification``) or label them per task (``data=multitask``), and show the
attention of ⟨CLS⟩.

Lines are encoded as in training (``[CLS] subwords [SEP]``, cut to ``data.max_len``); in a
pretraining run's input a literal ``[SEP]`` starts segment B. Fill-mask (as HF's ``fill-mask``
pipeline) prints the filled text, then per [MASK] its ``--top-k`` candidates as ``token:p``.

Token classification: an input line is split at whitespace into words (``--file`` ``.jsonl``:
each object's token list, the run's ``data.tokens_field``); the words are encoded as in training
(WordPiece pieces of each word, cut to the run's ``data.max_len``) and each word is tagged by its
first piece's argmax. Output, one line per input line: ``word/TAG word/TAG …`` (the tag follows
the last ``/``; a word past the cut gets ``-``, with a note on stderr), or with ``--json`` an
object with ``words``, ``tags`` (null past the cut), ``probabilities`` (of each word's tag) and
``text``. An empty line gives ``-``. ``--save-attention``: per input i ``{i}/tokens`` and
``{i}/cls_attention`` (N, J, T).

Multi-task runs (``attnflow-predict MULTITASK_RUN "A great film." "Dull." --json``): each line
gives, per task in the run's order, a text classification's ``label<TAB>probability`` or a token
classification's ``word/TAG …``, then the text's first 80 characters; a header line names the
columns (``--json``: ``{task: {label, probability, probabilities} or {words, tags,
probabilities}, …, text}``, no header). Texts are encoded as in training, with each task's
``data.max_len``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Union

import numpy as np
import torch
from tokenizers import Tokenizer

from attnflow.cli.predict_io import (EMPTY, PredictError, jsonl_fields, label_all,
                                     label_line, output_line, read_texts)
from attnflow.config.registry import DATA, MODELS
from attnflow.data.corpus import MASK, PAD, SEP, run_tokenizer
from attnflow.data.pretraining import pad_rows
from attnflow.data.tagged import IGNORE, encode_tagged
from attnflow.data.text_classification import encode_texts
from attnflow.io.checkpoints import Run, load_weights
from attnflow.viz.explain import join_pieces, write_text_html
from attnflow.viz.figures import cls_attention_figure, cls_rows, figure_png


@dataclass
class BertRun:
    model: torch.nn.Module
    tokenizer: Tokenizer
    itos: List[str]
    max_len: int
    class_names: List[str]  # [] for a pretraining run
    pretraining: bool


def bert_model(run: Run, tokenizer: Tokenizer, what: str, device: str, **sizes) -> torch.nn.Module:
    """The run's BERT model for ``tokenizer``'s vocabulary, its weights loaded (``what``: its
    heads, for the message of a mismatch), in eval mode on ``device``."""
    vocab = tokenizer.get_vocab_size()
    model = MODELS.build(run.config["model"], vocab_size=vocab, pad_id=PAD, path="model", **sizes)
    load_weights(model, run.ckpt["state_dict"], "model.", f"model 'bert' ({what})")
    return model.eval().to(device)


def load_bert(run: Run, device: str = "cpu") -> BertRun:
    """The run's BERT model with its weights, in eval mode, and its tokenizer."""
    cfg, art = run.config, dict(run.ckpt.get("attnflow_artifacts") or {})
    tok = run_tokenizer(run.run_dir, art, str(run.run_dir))
    pretraining = (cfg.get("task") or {}).get("name") == "bert_pretraining"
    names = [] if pretraining else [str(c) for c in art.get("class_names") or []]
    max_len = art.get("max_len") or DATA.validate(cfg["data"], "data").get("max_len")
    model = bert_model(run, tok, f"head {cfg['model'].get('head', 'pretraining')}, a vocabulary of "
                       f"{tok.get_vocab_size()} tokens, {len(names)} classes", device,
                       num_classes=len(names))
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


def _labelled(p: torch.Tensor, names: List[str]) -> dict:
    """``label``, ``probability`` and ``probabilities`` of a text's class probabilities ``p``."""
    return {"label": names[int(p.argmax())], "probability": float(p.max()),
            "probabilities": dict(zip(names, p.tolist()))}


def _cut_note(limit: int, setting: str):
    """The note on a text over ``limit`` subwords (``setting``: the run's cap, as named)."""
    return lambda r, _: (f"has {r['size']} subwords; the model reads at most {limit} between [CLS] "
                         f"and [SEP] (the run's {setting}): {r['cut']} cut from its end" if r["cut"] else None)


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
        heads = [{**_labelled(p, bert.class_names), "index": int(p.argmax())} for p in probs]
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


def _title(r: dict, pretraining: bool) -> str:
    if not pretraining:
        return f"predicted {r['label']} (p={r['probability']:.3f})"
    fills = ", ".join(f"[MASK] {j + 1} → {m[0]['token_str']} (p={m[0]['score']:.3f})"
                      for j, m in enumerate(r["masks"]))
    return f"fills: {fills}" if fills else "no [MASK] to fill"


def _line(r: dict, args, pretraining: bool) -> str:
    """A text's output line: a classification's as a document's (:func:`attnflow.cli.predict_io.label_line`),
    a fill-mask's the filled text and each [MASK]'s candidates (JSON: sequence, masks, text)."""
    if not pretraining:
        return label_line(r, args.json)
    return output_line(r, args.json, ("sequence", "masks", "text"), lambda r: "\t".join(
        [r["sequence"], *(" ".join(f"{c['token_str']}:{c['score']:.4f}" for c in m) for m in r["masks"])]))


def predict_bert(args, run: Run, out) -> int:
    """attnflow-predict on a BERT run (see the module docstring)."""
    bert = load_bert(run, args.device)
    pre = bert.pretraining
    texts, where = read_texts(args, args.texts, (run.config.get("data") or {}).get("text_field") or "text")
    limit, explained, cut = bert.max_len - 2, [], _cut_note(bert.max_len - 2, f"data.max_len={bert.max_len}")

    def step(chunk, first):
        results = predict_texts(bert, chunk, args.top_k or 5)
        explained.extend(r for r in results if args.explain and not r["empty"])
        return results, cls_arrays(results, first) if args.save_attention else {}

    def note(r, j):
        if pre and not r["masks"]:
            print(f"attnflow-predict: {where} {j} has no [MASK] to fill (written unchanged)", file=sys.stderr)
        return cut(r, j)

    label_all(args, out, texts, where, step, lambda r: _line(r, args, pre), note, what="texts",
              caps=f"{limit} subwords (the run's data.max_len={bert.max_len}): " + "{cut} of {size} subwords",
              empty=f"no words to {'fill' if pre else 'classify'} ('-' is written in its place)",
              kind="text")
    if args.explain:
        for r in explained:
            r["title"] = _title(r, pre)
            r["picture"] = figure_png(cls_attention_figure(r["cls_attention"], r["tokens"], r["title"]))
        path = write_text_html(args.explain, explained, "attnflow-predict: attention from [CLS]")
        print(f"explanation written to {path}", file=sys.stderr)
    return 0


Line = Union[str, Sequence[str]]  # a text line, or a JSON line's words


def _words(value) -> bool:
    return isinstance(value, list) and all(isinstance(w, str) for w in value)


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


def tagged_words(r: dict) -> str:
    """``word/TAG word/TAG …`` of a tagged input (``-`` for an untagged word)."""
    return " ".join(f"{w}/{t if t is not None else '-'}" for w, t in zip(r["words"], r["tags"]))


def tagged_line(r: dict, as_json: bool) -> str:
    """The output line of a tagged input (module docstring)."""
    return output_line(r, as_json, ("words", "tags", "probabilities", "text"), tagged_words, blank=[])


def predict_tokens(args, run: Run, out) -> int:
    """attnflow-predict on a token-classification run (module docstring)."""
    bert = load_bert(run, args.device)
    field = (run.config.get("data") or {}).get("tokens_field") or "tokens"
    if not args.texts and args.file and args.file.endswith((".jsonl", ".jsonl.gz")):
        what = f"list of words in '{field}' (the run's data.tokens_field)"
        lines, where = (w or [] for w in jsonl_fields(args.file, field, _words, what)), f"{args.file} line"
    else:
        lines, where = read_texts(args, args.texts, field=None)
    caps = f"{bert.max_len - 2} subwords (the run's data.max_len={bert.max_len})"

    def step(chunk, first):
        results = tag_lines(bert, chunk)
        return results, cls_arrays(results, first) if args.save_attention else {}

    def note(r, _):
        return (f"has {len(r['words'])} words; the model reads at most {caps}: its last "
                f"{r['cut']} words are not tagged ('-')") if r["cut"] else None

    label_all(args, out, lines, where, step, lambda r: tagged_line(r, args.json), note,
              what="lines", caps=caps + ": {cut} of {size} words", kind="tokens",
              empty="no words to tag ('-' is written in its place)")
    return 0


KINDS = ("text_classification", "token_classification")


def load_multitask(run: Run, device: str = "cpu"):
    """(BertRun per task, interface per task) of the run: one model, its tokenizer, each task's
    ``max_len`` and classes; a task of another interface than :data:`KINDS` is refused."""
    art = dict(run.ckpt.get("attnflow_artifacts") or {})
    tokenizer = run_tokenizer(run.run_dir, art, "the run")
    configs = DATA.get("multitask").task_configs(run.config["data"])
    per_task = {t: (art.get("tasks") or {}).get(t) or {} for t in configs}
    kinds = {t: DATA.get(c["name"]).interface for t, c in configs.items()}
    for t, kind in kinds.items():
        if kind not in KINDS:
            raise PredictError(f"task '{t}' works on {kind}; attnflow-predict labels the "
                               f"{' and '.join(KINDS)} tasks of multi-task runs")
    names = {t: [str(c) for c in per_task[t].get("class_names") or []] for t in configs}
    model = bert_model(run, tokenizer, "head multitask, tasks " + ", ".join(
        f"{t}: {len(c)} classes" for t, c in names.items()), device,
        tasks={t: (kinds[t], len(names[t])) for t in configs})
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
            results[i]["tasks"][t] = _labelled(p, bert.class_names)
    return results


def _cell(task: Optional[dict], token: bool) -> str:
    if task is None:
        return "-" if token else "-\t-"
    return tagged_words(task) if token else f"{task['label']}\t{task['probability']:.4f}"


def _tasks_line(r: dict, kinds: Dict[str, str], as_json: bool) -> str:
    if as_json:
        return json.dumps({**{t: r["tasks"].get(t) for t in kinds}, "text": r["text"],
                           **({"empty": True} if r["empty"] else {})})
    cells = [_cell(r["tasks"].get(t), k == "token_classification") for t, k in kinds.items()]
    return "\t".join(cells + [EMPTY if r["empty"] else " ".join(r["text"].split())[:80]])


def predict_multitask(args, run: Run, out) -> int:
    """attnflow-predict on a multi-task run (module docstring)."""
    runs, kinds = load_multitask(run, args.device)
    field = next(iter(DATA.get("multitask").task_configs(run.config["data"]).values())).get("text_field")
    texts, where = read_texts(args, args.texts, field or "text")
    limit = min(b.max_len for b in runs.values()) - 2
    if not args.json:
        print("\t".join([t if k == "token_classification" else f"{t}\t{t}_probability"
                         for t, k in kinds.items()] + ["text"]), file=out)

    label_all(args, out, texts, where, lambda chunk, _: (predict_tasks(runs, kinds, chunk), {}),
              lambda r: _tasks_line(r, kinds, args.json), _cut_note(limit, "data.max_len"), what="texts",
              caps=f"{limit} subwords (the run's data.max_len={next(iter(runs.values())).max_len})"
                   ": {cut} of {size} subwords",
              empty="no words to classify ('-' is written in its place)")
    return 0
