"""What attnflow-predict's handlers and attnflow-translate share: inputs, the labelling loop."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence, Tuple

import numpy as np

from attnflow.inference.runs import InferenceError
from attnflow.io.console import warn_unread
from attnflow.io.text import batched, iter_lines, iter_stdin, no_inputs, save_arrays

EMPTY = "(empty: no words)"
BATCH_SIZE = 32  # --batch-size of documents, texts and images
WARN_CUT = 10  # inputs over the run's caps noted one by one; then only the total
TABLES = (".csv", ".csv.gz", ".tsv", ".tsv.gz", ".parquet")
JSON_LINES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz")


def positive(value: str) -> int:
    """The argparse ``type`` of a count option: an int >= 1."""
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def jsonl_fields(path: str, field: str, fits: Callable, what: str) -> Iterator:
    """Each line's ``field`` of a JSON-lines file (None for a blank line); a line that is no JSON,
    or whose field ``fits`` refuses, is an InferenceError naming it (``what``: the field as a run
    setting names it, e.g. ``text field '{field}' (the run's data.text_field)``)."""
    for n, line in enumerate(iter_lines(path, "--file"), 1):
        if not line.strip():
            yield None
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise InferenceError(f"{path} line {n} is not JSON: {err}") from None
        value = row.get(field) if isinstance(row, dict) else None
        if not fits(value):
            raise InferenceError(f"{path} line {n} has no {what}")
        yield value


def _table_texts(path: Path, field: str) -> Iterator[str]:
    from attnflow.data.tables import rows

    for where, row in rows(path, [field], "--file"):
        if field not in row or not isinstance(row[field], (str, type(None))):
            raise InferenceError(f"{path} {where} has no text field '{field}' (the run's data.text_field)")
        yield row[field] or ""


def read_texts(args: argparse.Namespace, given: list, field: Optional[str] = "text",
               flag: str = "--file") -> Tuple[Iterator[str], str]:
    """The inputs, lazily (``given`` as arguments, else one per line of ``args.file``, else of
    stdin; a blank JSON line is an empty document), and how to name one in messages; ``--file``
    given with inputs as arguments is one warning."""
    file = args.file
    if given:
        if file:
            warn_unread(f"{flag} {file}", "inputs are given as arguments")
        return iter(given), "argument"
    if file and field and file.endswith(TABLES):
        return _table_texts(Path(file), field), f"{file} row"
    if file and field and file.endswith(JSON_LINES):
        what = f"text field '{field}' (the run's data.text_field)"
        return (t or "" for t in jsonl_fields(file, field, lambda v: isinstance(v, str), what)), \
            f"{file} line"
    if file:
        return iter_lines(file, flag), f"{file} line"
    return iter_stdin(), "stdin line"


def label_all(args: argparse.Namespace, out, texts: Iterable[str], where: str, step: Callable,
              line: Callable, note: Callable, *, what: str, caps: str, empty: str,
              kind: Optional[str] = None, none: Optional[str] = None,
              prog: str = "attnflow-predict") -> Tuple[dict, int]:
    """Run ``step(chunk, first)`` -> (results, arrays) over batches of ``texts``, printing one
    line per input (``line(r)``). An empty input, and one the caps cut (``note(r, j)`` for input
    j: the message, or None; ``r["size"]`` and ``r["cut"]`` count), is noted on stderr, then the
    total cut (``caps`` formatted with ``cut`` and ``size``); no input at all is the error
    ``none`` (default: no ``what`` in ``--file`` or stdin). With ``--save-attention`` the arrays
    are written as ``kind``. Returns (arrays, inputs)."""
    arrays, n, over, size, cut = {}, 0, 0, 0, 0
    for chunk in batched(texts, args.batch_size):
        results, more = step(chunk, n)
        for j, r in enumerate(results, n + 1):
            if r["empty"]:
                print(f"{prog}: {where} {j} is empty: {empty}", file=sys.stderr)
                continue
            msg = note(r, j)
            size, cut, over = size + r["size"], cut + r["cut"], over + bool(msg)
            if msg and over <= WARN_CUT:
                print(f"{prog}: {where} {j} {msg}", file=sys.stderr)
        print("\n".join(map(line, results)), file=out, flush=True)
        arrays.update(more)
        n += len(chunk)
    if not n:
        raise InferenceError(none or no_inputs(what, "--file", args.file))
    if over:
        print(f"{prog}: {over} of {n} {what} were longer than {caps.format(cut=cut, size=size)} "
              f"cut in all", file=sys.stderr)
    if kind and args.save_attention:
        write_attention(args.save_attention, arrays, kind, n, what, prog)
    return arrays, n


def output_line(r: dict, as_json: bool, keys: Sequence[str], plain: Callable[[dict], str],
                empty: str = "-", blank: Any = None) -> str:
    """An input's output line: with ``--json`` its ``keys`` (an empty input's ``blank`` but for its
    text, and ``"empty": true``), else ``plain(r)``, or ``empty`` for an empty input."""
    if as_json:
        return json.dumps({k: blank if r["empty"] and k != "text" else r[k] for k in keys}
                          | ({"empty": True} if r["empty"] else {}))
    return empty if r["empty"] else plain(r)


def label_line(r: dict, as_json: bool) -> str:
    """The output line of a labelled document or text: ``label<TAB>probability<TAB>text`` (its
    first 80 characters) or JSON (label, probability, probabilities, text); an empty one's is
    ``-<TAB>-<TAB>(empty: no words)`` (JSON: nulls and ``"empty": true``)."""
    return output_line(r, as_json, ("label", "probability", "probabilities", "text"),
                       lambda r: f"{r['label']}\t{r['probability']:.4f}\t{' '.join(r['text'].split())[:80]}",
                       f"-\t-\t{EMPTY}")


def write_attention(path: str, arrays: dict, kind: str, n: int, what: str,
                    prog: str = "attnflow-predict") -> None:
    """``--save-attention``: ``arrays`` with ``kind`` and ``lines`` (``n``), and a note."""
    arrays.update(kind=np.asarray(kind), lines=np.asarray(n))
    print(f"{prog}: attention of {n} {what} written to {save_arrays(path, arrays)}",
          file=sys.stderr)
