"""attnflow-predict for token-classification runs (BERT, ``task=token_classification``): a tag for
every word of each input line.

An input line is split at whitespace into words (``--file`` ``.jsonl``: each object's token list,
the run's ``data.tokens_field``); the words are encoded as in training (WordPiece pieces of each
word, cut to the run's ``data.max_len``) and each word is tagged by its first piece's argmax.
Output, one line per input line: ``word/TAG word/TAG …`` (the tag follows the last ``/``; a word
past the cut gets ``-``, with a note on stderr), or with ``--json`` an object with ``words``,
``tags`` (null past the cut), ``probabilities`` (of each word's tag) and ``text``. An empty line
gives ``-``. ``--save-attention``: per input i ``{i}/tokens`` and ``{i}/cls_attention`` (N, J, T).
"""

from __future__ import annotations

import json
from typing import List, Optional, Sequence, Union

import numpy as np
import torch

from attnflow.cli.predict_io import jsonl_fields, label_all, read_texts
from attnflow.cli.predict_text import BertRun, cls_arrays, forward, load_bert
from attnflow.data.tagged import IGNORE, encode_tagged
from attnflow.io.checkpoints import Run

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
    if as_json:
        keys = ("words", "tags", "probabilities", "text")
        return json.dumps({**{k: r.get(k, []) for k in keys}, **({"empty": True} if r["empty"] else {})})
    return "-" if r["empty"] else tagged_words(r)


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
