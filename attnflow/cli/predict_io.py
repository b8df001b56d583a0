"""What the handlers of ``attnflow-predict`` share: reading the inputs, the output line of a
labelled text, the ``--explain`` and ``--save-attention`` outputs, and its error."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Iterator, Tuple

import numpy as np

from attnflow.io.text import iter_lines, iter_stdin, save_arrays

EMPTY = "(empty: no words)"
BATCH_SIZE = 32  # --batch-size of documents, texts and images


class PredictError(ValueError):
    """A problem the user can fix; printed as one line."""


def _jsonl_text(line: str, n: int, path: Path, field: str) -> str:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise PredictError(f"{path} line {n} is not JSON: {err}") from None
    if not isinstance(row, dict) or not isinstance(row.get(field), str):
        raise PredictError(f"{path} line {n} has no text field '{field}' (the run's "
                           f"data.text_field)")
    return row[field]


def is_jsonl(path: str) -> bool:
    return path.endswith((".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz"))


def read_texts(args, field: str = "text") -> Tuple[Iterator[str], str]:
    """The inputs, lazily (one per input line; a blank JSON line is an empty document), and how
    to name one in messages."""
    if args.texts:
        return iter(args.texts), "argument"
    if args.file:
        lines = iter_lines(args.file, "--file")
        if is_jsonl(args.file):
            path = Path(args.file)
            lines = (_jsonl_text(ln, n, path, field) if ln.strip() else ""
                     for n, ln in enumerate(lines, 1))
        return lines, f"{args.file} line"
    return iter_stdin(), "stdin line"


def check_explain_html(args, what: str) -> None:
    """``--explain`` names the HTML page to write (documents, texts), or is not given."""
    if args.explain is True or (args.explain and not args.explain.endswith((".html", ".htm"))):
        raise PredictError(f"--explain takes the HTML file to write for {what} (--explain "
                           f"OUT.html), got {'nothing' if args.explain is True else repr(args.explain)}")


def label_line(r: dict, as_json: bool) -> str:
    """The output line of a labelled document or text: ``label<TAB>probability<TAB>text`` (its
    first 80 characters) or JSON (label, probability, probabilities, text); an empty one's is
    ``-<TAB>-<TAB>(empty: no words)`` (JSON: nulls and ``"empty": true``)."""
    if r["empty"]:
        return (json.dumps({"label": None, "probability": None, "probabilities": None,
                            "text": r["text"], "empty": True}) if as_json else f"-\t-\t{EMPTY}")
    if as_json:
        return json.dumps({k: r[k] for k in ("label", "probability", "probabilities", "text")})
    return f"{r['label']}\t{r['probability']:.4f}\t{' '.join(r['text'].split())[:80]}"


def write_attention(path: str, arrays: dict, kind: str, n: int, what: str) -> None:
    """``--save-attention``: ``arrays`` with ``kind`` and ``lines`` (``n``) to ``path``, and a
    note on stderr."""
    arrays.update(kind=np.asarray(kind), lines=np.asarray(n))
    print(f"attnflow-predict: attention of {n} {what} written to {save_arrays(path, arrays)}",
          file=sys.stderr)
