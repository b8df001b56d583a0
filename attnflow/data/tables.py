"""Labelled texts from the files users have: JSON lines, CSV, TSV (a header row names the
columns) or Parquet, each gzip'ed or not (Parquet compresses itself); the fields are named in
YAML (``data.text_field``, ``data.label_field``). A CSV/TSV label that is an integer is read as
one, so ``data.labels: [0, 1]`` matches it as it matches JSON's. A split of a Hugging Face data
set (:class:`~attnflow.data.hf_datasets.HFSplit`) is read as a table too."""

from __future__ import annotations

import csv
import json
import re
import zlib
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from attnflow.data.base import class_label, random_subset
from attnflow.data.errors import DataError, missing_data, numbered_lines
from attnflow.data.hf_datasets import HFSplit
from attnflow.io.text import InputError, decoded_lines, open_bytes

FORMATS = (".jsonl", ".json", ".csv", ".tsv", ".parquet")
_INT = re.compile(r"-?\d+")


def table_format(path: Path | str) -> Optional[str]:
    """``.jsonl``, ``.csv``, ``.tsv``, ``.parquet`` (``.json``: JSON lines) of a path, else None."""
    name = Path(path).name
    name = name[:-3] if name.endswith(".gz") else name
    suffix = Path(name).suffix
    return ".jsonl" if suffix == ".json" else suffix if suffix in FORMATS else None


def has_header(path: Path, fields: Sequence[str], owner: str) -> bool:
    """Whether a tab-separated file's first line names all of ``fields`` (a table, not
    ``label<TAB>text`` lines)."""
    for _, line in numbered_lines(path, owner):
        return set(fields) <= set(c.strip() for c in line.split("\t"))
    return False


def _json_rows(path: Path, owner: str) -> Iterator[Tuple[str, Dict[str, Any]]]:
    for n, line in numbered_lines(path, owner):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(f"{owner}: {path} line {n} is not valid JSON: {err}") from None
        if not isinstance(row, dict):
            raise DataError(f"{owner}: {path} line {n} is JSON {type(row).__name__}, not an object")
        yield f"line {n}", row


def _delimited_rows(path: Path, owner: str, delimiter: str) -> Iterator[Tuple[str, Dict[str, Any]]]:
    if not path.is_file():
        raise missing_data(owner, f"file not found: {path}")
    try:
        with open_bytes(path) as f:
            reader = csv.DictReader(decoded_lines(f, str(path), path.name.endswith(".gz")),
                                    delimiter=delimiter)
            for row in reader:
                if any(v for v in row.values()):
                    yield f"line {reader.line_num}", {k: _number(v) for k, v in row.items()}
    except InputError as err:  # a byte that is not UTF-8: the line and byte named
        raise DataError(f"{owner}: {err}") from None
    except (OSError, csv.Error, EOFError, zlib.error) as err:
        raise DataError(f"{owner}: cannot read {path}: {err}") from None


def _number(value: Any) -> Any:
    return int(value) if isinstance(value, str) and _INT.fullmatch(value.strip()) else value


def _parquet_rows(path: Path, owner: str, fields: Sequence[str]) -> Iterator[Tuple[str, Dict[str, Any]]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"{owner}: reading {path} needs pyarrow (pip install 'attnflow[parquet]'); "
                        f"or give .jsonl/.csv/.tsv") from None
    if not path.is_file():
        raise missing_data(owner, f"file not found: {path}")
    try:
        table = pq.read_table(path)
    except Exception as err:  # noqa: BLE001 — pyarrow's errors: one line naming the file
        raise DataError(f"{owner}: cannot read {path}: {err}") from None
    missing = [f for f in fields if f not in table.column_names]
    if missing:
        raise DataError(f"{owner}: {path} has no column '{missing[0]}' (columns: "
                        f"{', '.join(table.column_names)}); set data.{_setting(missing[0], fields)}")
    for i, row in enumerate(table.to_pylist()):
        yield f"row {i}", row


def _setting(field: str, fields: Sequence[str]) -> str:
    return "text_field" if field == fields[0] else "label_field"


def source(path: Path | str | HFSplit) -> Path | HFSplit:
    """A file's path, or a split of an HF data set as it is."""
    return path if isinstance(path, HFSplit) else Path(path)


def rows(path: Path | str | HFSplit, fields: Sequence[str],
         owner: str) -> Iterator[Tuple[str, Dict[str, Any]]]:
    """``(where, row)`` of a table file or HF split: ``where`` a line (or row) to name in errors."""
    if isinstance(path, HFSplit):
        return path.rows({f: _setting(f, fields) for f in fields})
    path = Path(path)
    kind = table_format(path)
    if kind == ".parquet":
        return _parquet_rows(path, owner, fields)
    if kind in (".csv", ".tsv"):
        return _delimited_rows(path, owner, "," if kind == ".csv" else "\t")
    return _json_rows(path, owner)


def read_table(path: Path | str | HFSplit, text_field: str, label_field: Optional[str], limit: int = 0,
               seed: int = 0, owner: str = "data 'documents'", classes: Optional[tuple] = None,
               what: str = "documents") -> List[tuple]:
    """[(text, label or None)] of a table file (module docstring); a :class:`DataError` names
    the file, line and field of what is malformed, and a label not of ``classes``
    (:func:`~attnflow.data.base.class_label`). ``limit``: a seeded random subset."""
    path = source(path)
    fields = [text_field] + ([label_field] if label_field else [])
    out, first = [], None
    for where, row in rows(path, fields, owner):
        for field in fields:
            if field not in row:
                setting = _setting(field, fields)
                raise DataError(f"{owner}: {path} {where} has no {setting.split('_')[0]} field "
                                f"'{field}' (fields: {', '.join(map(str, row))}); set data.{setting}")
        text = row[text_field]
        if text is not None and not isinstance(text, str):  # else a TypeError deep in tokenize
            raise DataError(f"{owner}: {path} {where}: the text field '{text_field}' holds "
                            f"{type(text).__name__} {text!r:.60}, not a string")
        label = None
        if label_field:
            label = class_label(row[label_field], classes, f"{owner}: {path} {where}", label_field, first)
            first = label if first is None else first
        out.append((text or "", label))
    if not out:
        raise DataError(f"{owner}: {path} holds no {what} (the file is empty or blank); expected a "
                        f"'{text_field}' field per row")
    return random_subset(out, limit, seed)



