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
from typing import Dict, Optional

from attnflow.cli.predict_io import EMPTY, jsonl_fields, label_all, label_line, output_line, read_texts
from attnflow.config.registry import DATA
from attnflow.inference.texts import cls_arrays, load_bert, load_multitask, predict_tasks, predict_texts, tag_lines
from attnflow.io.checkpoints import Run
from attnflow.viz.explain import write_text_html
from attnflow.viz.figures import cls_attention_figure, figure_png


def _cut_note(limit: int, setting: str):
    """The note on a text over ``limit`` subwords (``setting``: the run's cap, as named)."""
    return lambda r, _: (f"has {r['size']} subwords; the model reads at most {limit} between [CLS] "
                         f"and [SEP] (the run's {setting}): {r['cut']} cut from its end" if r["cut"] else None)


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


def tagged_words(r: dict) -> str:
    """``word/TAG word/TAG …`` of a tagged input (``-`` for an untagged word)."""
    return " ".join(f"{w}/{t if t is not None else '-'}" for w, t in zip(r["words"], r["tags"]))


def tagged_line(r: dict, as_json: bool) -> str:
    """The output line of a tagged input (module docstring)."""
    return output_line(r, as_json, ("words", "tags", "probabilities", "text"), tagged_words, blank=[])


def _words(value) -> bool:
    return isinstance(value, list) and all(isinstance(w, str) for w in value)


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
