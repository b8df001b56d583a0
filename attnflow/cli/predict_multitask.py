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
from attnflow.cli.predict_text import BertRun, encode, forward
from attnflow.cli.predict_tokens import tag_lines
from attnflow.config.registry import DATA, MODELS
from attnflow.io.checkpoints import Run, load_weights
from attnflow.io.text import no_inputs

KINDS = ("text_classification", "token_classification")


def load_multitask(run: Run, device: str = "cpu"):
    """(BertRun per task, interface per task) of the run: one model, its tokenizer, each task's
    ``max_len`` and classes; a task of another interface than :data:`KINDS` is refused."""
    from attnflow.data.corpus import PAD, run_tokenizer

    cfg, art = run.config, dict(run.ckpt.get("attnflow_artifacts") or {})
    tokenizer = run_tokenizer(run.run_dir, art, "the run")
    configs = DATA.get("multitask").task_configs(cfg["data"])
    per_task = art.get("tasks") or {}
    names, kinds = {}, {}
    for t, data_cfg in configs.items():
        kinds[t] = DATA.get(data_cfg["name"]).interface
        if kinds[t] not in KINDS:
            raise PredictError(f"task '{t}' works on {kinds[t]}; attnflow-predict labels the "
                               f"{' and '.join(KINDS)} tasks of multi-task runs")
        names[t] = [str(c) for c in (per_task.get(t) or {}).get("class_names") or []]
    vocab = tokenizer.get_vocab_size()
    model = MODELS.build(cfg["model"], vocab_size=vocab, pad_id=PAD, path="model",
                         tasks={t: (kinds[t], len(names[t])) for t in configs})
    load_weights(model, run.ckpt["state_dict"], "model.", f"model 'bert' (head multitask, tasks "
                 f"{', '.join(f'{t}: {len(c)} classes' for t, c in names.items())})")
    model = model.eval().to(device)
    itos = [tokenizer.id_to_token(i) for i in range(vocab)]
    runs = {t: BertRun(model, tokenizer, itos, min(int((per_task.get(t) or {}).get("max_len")
                                                        or configs[t]["max_len"]), model.max_len),
                       names[t], False) for t in configs}
    return runs, kinds


@torch.no_grad()
def predict_tasks(runs: Dict[str, BertRun], kinds: Dict[str, str], texts: Sequence[str]) -> List[dict]:
    """Per text: ``tasks`` {task: label, probability, probabilities; or words, tags,
    probabilities}, ``empty``, ``subwords``, ``cut`` (of the shortest ``max_len``)."""
    shortest = min(runs.values(), key=lambda b: b.max_len)
    results = [{"text": t, "empty": it["subwords"] == 0, "subwords": it["subwords"], "cut": it["cut"],
                "tasks": {}} for t, it in zip(texts, encode(shortest, texts))]
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
        for row, i in enumerate(live):
            p, c = probs[row], int(probs[row].argmax())
            results[i]["tasks"][t] = {"label": bert.class_names[c], "probability": float(p[c]),
                                      "probabilities": dict(zip(bert.class_names, p.tolist()))}
    return results


def _cell(task: Optional[dict], token: bool) -> str:
    if task is None:
        return "-" if token else "-\t-"
    if token:
        return " ".join(f"{w}/{t if t is not None else '-'}" for w, t in zip(task["words"], task["tags"]))
    return f"{task['label']}\t{task['probability']:.4f}"


def _line(r: dict, kinds: Dict[str, str], as_json: bool) -> str:
    if as_json:
        return json.dumps({**{t: r["tasks"].get(t) for t in kinds}, "text": r["text"],
                           **({"empty": True} if r["empty"] else {})})
    cells = [_cell(r["tasks"].get(t), k == "token_classification") for t, k in kinds.items()]
    return "\t".join(cells + [EMPTY if r["empty"] else " ".join(r["text"].split())[:80]])


def predict_multitask(args, run: Run, out) -> int:
    """attnflow-predict on a multi-task run (module docstring)."""
    runs, kinds = load_multitask(run, args.device)
    first = next(iter(runs.values()))
    field = next(iter(DATA.get("multitask").task_configs(run.config["data"]).values())).get("text_field")
    texts, where = read_texts(args, field or "text")
    limit = min(b.max_len for b in runs.values()) - 2
    if not args.json:
        print("\t".join([t if k == "token_classification" else f"{t}\t{t}_probability"
                         for t, k in kinds.items()] + ["text"]), file=out)

    def note(r, _):
        msg = (f"has {r['subwords']} subwords; the model reads at most {limit} between [CLS] and "
               f"[SEP] (the run's data.max_len): {r['cut']} cut from its end")
        return msg if r["cut"] else None, r["subwords"], r["cut"]

    label_all(args, out, texts, where, lambda chunk, _: (predict_tasks(runs, kinds, chunk), {}),
              lambda r: _line(r, kinds, args.json), note, what="texts",
              caps=f"{limit} subwords (the run's data.max_len={first.max_len})" + ": {cut} of {size} subwords",
              empty="no words to classify ('-' is written in its place)",
              none=no_inputs("texts", "--file", args.file))
    return 0
