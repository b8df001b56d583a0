"""Data file errors (a :class:`DataError` is a ``ConfigError``: one line, exit status 2), and
reading lines with errors that name the file and the line."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Tuple

from attnflow.config.registry import ConfigError
from attnflow.io.text import InputError, iter_lines


class DataError(ConfigError):
    """A data file cannot be used; the message names the file (and the line where known)."""


class DataFileNotFoundError(DataError, FileNotFoundError):
    """A data file is missing; the message names it and says where data is looked for."""


# the files each data module's own config reads, relative to the data dir (docs/data.md)
LAYOUTS = {
    "data 'parallel'": "multi30k/{train,val,test_2016_flickr}.{de,en}.gz (Multi30k)",
    "data 'planetoid'": "planetoid/<Name>/raw/ind.<name>.* (PyG's raw Planetoid files)",
    "data 'documents'": "imdb/train.jsonl.gz, imdb/dev.jsonl.gz (IMDB)",
    "data 'text_classification'": "imdb/train.jsonl.gz, imdb/dev.jsonl.gz (IMDB)",
    "data 'bert_pretraining'": "imdb/train.jsonl.gz, imdb/dev.jsonl.gz (IMDB)",
    "data 'token_classification'": "conll/train.conll, conll/dev.conll",
    "data 'captions'": "flickr8k/dataset_flickr8k.json, flickr8k/Flicker8k_Dataset/<image>.jpg",
}
LAYOUTS["captions"] = LAYOUTS["data 'captions'"]  # (the captions readers' own name)


def missing_data(owner: str, what: str) -> DataFileNotFoundError:
    """The error of data not found: ``what`` (the files, and the setting naming them), the files
    ``owner``'s config reads under the data dir, and how to name that folder."""
    layout = LAYOUTS.get(owner)
    expected = f"; its config reads <data dir>/{layout}" if layout else ""
    return DataFileNotFoundError(
        f"{owner}: {what}{expected}. The data dir is ATTNFLOW_DATA_DIR, or paths.data_dir=<folder> "
        f"(docs/data.md); nothing is downloaded")


def numbered_lines(path: Path | str, owner: str) -> Iterator[Tuple[int, str]]:
    """``(line number, line)`` of a text file (``.gz``: gzip); an unreadable file raises
    :class:`DataError` naming the file and the line, ``owner`` starting the message."""
    path = Path(path)
    if not path.is_file():
        raise missing_data(owner, f"file not found: {path}")
    try:
        yield from enumerate(iter_lines(path, "data file"), 1)
    except InputError as err:
        raise DataError(f"{owner}: {err}") from None

