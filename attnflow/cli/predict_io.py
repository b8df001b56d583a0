"""What attnflow-predict's handlers and attnflow-translate share: inputs, the labelling loop."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable, Iterable, Iterator, Tuple

import numpy as np

from attnflow.io.console import warn_unread
from attnflow.io.text import batched, iter_lines, iter_stdin, save_arrays

EMPTY = "(empty: no words)"
BATCH_SIZE = 32  # --batch-size of documents, texts and images
WARN_CUT = 10  # inputs over the run's caps noted one by one; then only the total


class PredictError(ValueError):
    """A problem the user can fix; printed as one line."""


def positive(value: str) -> int:
    """The argparse ``type`` of a count option: an int >= 1."""
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def _jsonl_text(line: str, n: int, path: Path, field: str) -> str:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise PredictError(f"{path} line {n} is not JSON: {err}") from None
    if not isinstance(row, dict) or not isinstance(row.get(field), str):
        raise PredictError(f"{path} line {n} has no text field '{field}' (the run's "
                           f"data.text_field)")
    return row[field]


def _table_texts(path: Path, field: str) -> Iterator[str]:
    from attnflow.data.tables import rows

    for where, row in rows(path, [field], "--file"):
        if field not in row or not isinstance(row[field], (str, type(None))):
            raise PredictError(f"{path} {where} has no text field '{field}' (the run's data.text_field)")
        yield row[field] or ""


def read_texts(args, field: str = "text", texts: str = "texts",
               flag: str = "--file") -> Tuple[Iterator[str], str]:
    """The inputs, lazily (one per input line; a blank JSON line is an empty document), and how
    to name one in messages; ``--file`` given with inputs as arguments is one warning."""
    given, file = getattr(args, texts), args.file
    if given:
        if file:
            warn_unread(f"{flag} {file}", "inputs are given as arguments")
        return iter(given), "argument"
    if file and field and file.endswith((".csv", ".csv.gz", ".tsv", ".tsv.gz", ".parquet")):
        return _table_texts(Path(file), field), f"{file} row"
    if file:
        lines = iter_lines(file, flag)
        if field and file.endswith((".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz")):
            path = Path(file)
            lines = (_jsonl_text(ln, n, path, field) if ln.strip() else ""
                     for n, ln in enumerate(lines, 1))
        return lines, f"{file} line"
    return iter_stdin(), "stdin line"


def check_explain_html(args, what: str) -> None:
    """``--explain`` names the HTML page to write (documents, texts), or is not given."""
    if args.explain is True:
        raise PredictError(f"--explain takes the HTML file to write for {what} (--explain OUT.html)")


def label_all(args, out, texts: Iterable[str], where: str, step: Callable, line: Callable,
              note: Callable, *, what: str, empty: str, caps: str, none: str,
              prog: str = "attnflow-predict") -> Tuple[dict, int]:
    """Run ``step(chunk, first)`` -> (results, arrays) over batches of ``texts``, printing one
    line per input (``line(r)``). An empty input, and one the caps cut (``note(r, j)`` for input
    j: (message or None, size, cut)), is noted on stderr, then the total cut (``caps`` formatted
    with ``cut`` and ``size``); no input at all is the error ``none``. Returns (arrays, inputs)."""
    arrays, n, over, size, cut = {}, 0, 0, 0, 0
    for chunk in batched(texts, args.batch_size):
        results, more = step(chunk, n)
        for j, r in enumerate(results, n + 1):
            if r["empty"]:
                print(f"{prog}: {where} {j} is empty: {empty}", file=sys.stderr)
                continue
            msg, s, c = note(r, j)
            size, cut, over = size + s, cut + c, over + bool(msg)
            if msg and over <= WARN_CUT:
                print(f"{prog}: {where} {j} {msg}", file=sys.stderr)
        print("\n".join(map(line, results)), file=out, flush=True)
        arrays.update(more)
        n += len(chunk)
    if not n:
        raise PredictError(none)
    if over:
        print(f"{prog}: {over} of {n} {what} were longer than {caps.format(cut=cut, size=size)} "
              f"cut in all", file=sys.stderr)
    return arrays, n


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


def write_attention(path: str, arrays: dict, kind: str, n: int, what: str,
                    prog: str = "attnflow-predict") -> None:
    """``--save-attention``: ``arrays`` with ``kind`` and ``lines`` (``n``), and a note."""
    arrays.update(kind=np.asarray(kind), lines=np.asarray(n))
    print(f"{prog}: attention of {n} {what} written to {save_arrays(path, arrays)}",
          file=sys.stderr)
