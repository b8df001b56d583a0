"""attnflow-predict: label documents with a trained document classifier, and explain them.

    attnflow-predict RUN_DIR_OR_CKPT "A great film." "Dull and far too long."
    attnflow-predict RUN_DIR --file reviews.txt          # one document per line (.jsonl: the run's text field)
    cat review.txt | attnflow-predict RUN_DIR            # stdin: one document per line
    attnflow-predict RUN_DIR "..." --explain out.html    # word and sentence weights as colour

The model is rebuilt from the registries with the resolved config stored in the checkpoint
(``attnflow_config``; no pickled modules) and the weights loaded into it; the vocabulary comes from
``vocab.json`` in the run directory (written at the start of training), or from the checkpoint's
``attnflow_artifacts``. For a run directory the best checkpoint (``metrics.json``) is used, else
``checkpoints/last.ckpt``. Output: one line per document, ``label<TAB>probability<TAB>text``, or
JSON lines with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import List, Optional

import attnflow  # noqa: F401  (the ${attnflow_root:} resolver of conf/paths)
from attnflow.checkpoints import CheckpointError, find_checkpoint, read_checkpoint, upgrade_config
from attnflow.data.documents import Vocabulary, encode_texts
from attnflow.explain import write_html
from attnflow.registry import MODELS, TASKS


def load(target: Path | str, device: str = "cpu"):
    """(task, artifacts) rebuilt from a run directory or checkpoint."""
    ckpt_path, run_dir = find_checkpoint(target)
    ckpt = read_checkpoint(ckpt_path, device)
    cfg = ckpt.get("attnflow_config")
    if not cfg:
        raise ValueError(f"attnflow-predict: {ckpt_path} has no 'attnflow_config' (not an attnflow run)")
    cfg = upgrade_config(cfg)
    vocab_file = run_dir / "vocab.json"
    if vocab_file.is_file():
        art = json.loads(vocab_file.read_text())
    elif ckpt.get("attnflow_artifacts"):
        art = ckpt["attnflow_artifacts"]
    else:
        raise FileNotFoundError(f"attnflow-predict: no vocabulary: {vocab_file} is missing and the "
                                "checkpoint carries none")
    vocab = Vocabulary.from_json(art["vocab"])
    names = art["class_names"]
    model = MODELS.build(cfg["model"], vocab_size=len(vocab), num_classes=len(names), pad_id=0,
                         path="model")
    task = TASKS.build(cfg["task"], model, num_classes=len(names),
                       class_names=names, itos=vocab.itos, path="task")
    task.load_state_dict(ckpt["state_dict"])
    task.eval().to(device)
    art["vocab_obj"] = vocab
    return task, art


def predict(task, art: dict, texts: List[str], batch_size: int = 32) -> List[dict]:
    out = []
    for i in range(0, len(texts), batch_size):
        chunk = texts[i:i + batch_size]
        batch, shown = encode_texts(chunk, art["vocab_obj"], art["max_sentences"], art["max_words"])
        for text, r in zip(chunk, task.explain(batch, shown)):
            r["text"] = text
            out.append(r)
    return out


def _jsonl_text(line: str, n: int, path: Path, field: str) -> str:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"attnflow-predict: {path} line {n} is not JSON: {err}") from None
    if not isinstance(row, dict) or not isinstance(row.get(field), str):
        raise ValueError(f"attnflow-predict: {path} line {n} has no text field '{field}' (the run's "
                         f"data.text_field)")
    return row[field]


def _read_texts(args, field: str = "text") -> List[str]:
    if args.texts:
        return list(args.texts)
    if args.file:
        path = Path(args.file)
        if not path.is_file():
            raise FileNotFoundError(f"attnflow-predict: --file not found: {path}")
        lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
        if path.suffix == ".jsonl":
            return [_jsonl_text(ln, n, path, field) for n, ln in enumerate(lines, 1)]
        return lines
    return [ln for ln in sys.stdin.read().splitlines() if ln.strip()]


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="attnflow-predict", description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="a run directory or a .ckpt file")
    p.add_argument("texts", nargs="*", help="documents to label (default: --file, else stdin)")
    p.add_argument("--file", help="one document per line (.jsonl: objects with the run's text field)")
    p.add_argument("--explain", metavar="OUT.html", help="write word/sentence weights as HTML")
    p.add_argument("--json", action="store_true", help="print JSON lines")
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args(argv)
    try:
        task, art = load(args.model)
        texts = _read_texts(args, art.get("text_field", "text"))
    except CheckpointError as err:
        print(f"attnflow-predict: {err}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as err:
        print(err, file=sys.stderr)
        return 2
    if not texts:
        print("attnflow-predict: no documents given (arguments, --file or stdin)", file=sys.stderr)
        return 2
    results = predict(task, art, texts, args.batch_size)
    for r in results:
        if args.json:
            print(json.dumps({k: r[k] for k in ("label", "probability", "probabilities", "text")}))
        else:
            snippet = " ".join(r["text"].split())
            print(f"{r['label']}\t{r['probability']:.4f}\t{snippet[:80]}")
    if args.explain:
        for r in results:
            r["title"] = f"predicted {r['label']} (p={r['probability']:.3f})"
        path = write_html(args.explain, results, "attnflow-predict")
        print(f"explanation written to {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
