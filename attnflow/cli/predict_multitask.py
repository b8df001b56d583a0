"""attnflow-predict for multi-task BERT runs (``data=multitask``): one column per task.

    attnflow-predict MULTITASK_RUN "A great film." "Dull." --json

Each line gives, per task in the run's order, a text classification's ``label<TAB>probability``
or a token classification's ``word/TAG …``, then the text's first 80 characters; a header line
names the columns (``--json``: ``{task: {label, probability, probabilities} or {words, tags,
probabilities}, …, text}``, no header). Texts are encoded as in training, with each task's
``data.max_len``.
"""

from __future__ import annotations

import json
from typing import Dict, List, Optional, Sequence

import torch

from attnflow.cli.predict_io import EMPTY, PredictError, label_all, read_texts
from attnflow.cli.predict_text import BertRun, bert_model, encode, encoded_results, forward
from attnflow.cli.predict_tokens import tag_lines, tagged_words
from attnflow.config.registry import DATA
from attnflow.data.corpus import run_tokenizer
from attnflow.io.checkpoints import Run

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
            results[i]["tasks"][t] = {"label": bert.class_names[int(p.argmax())], "probability": float(p.max()),
                                      "probabilities": dict(zip(bert.class_names, p.tolist()))}
    return results


def _cell(task: Optional[dict], token: bool) -> str:
    if task is None:
        return "-" if token else "-\t-"
    return tagged_words(task) if token else f"{task['label']}\t{task['probability']:.4f}"


def _line(r: dict, kinds: Dict[str, str], as_json: bool) -> str:
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

    def note(r, _):
        return (f"has {r['size']} subwords; the model reads at most {limit} between [CLS] and "
                f"[SEP] (the run's data.max_len): {r['cut']} cut from its end") if r["cut"] else None

    label_all(args, out, texts, where, lambda chunk, _: (predict_tasks(runs, kinds, chunk), {}),
              lambda r: _line(r, kinds, args.json), note, what="texts",
              caps=f"{limit} subwords (the run's data.max_len={next(iter(runs.values())).max_len})"
                   ": {cut} of {size} subwords",
              empty="no words to classify ('-' is written in its place)")
    return 0
