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


def numbered_lines(path: Path | str, owner: str) -> Iterator[Tuple[int, str]]:
    """``(line number, line)`` of a text file (``.gz``: gzip); an unreadable file raises
    :class:`DataError` naming the file and the line, ``owner`` starting the message."""
    path = Path(path)
    if not path.is_file():
        raise DataFileNotFoundError(f"{owner}: file not found: {path}")
    try:
        yield from enumerate(iter_lines(path, "data file"), 1)
    except InputError as err:
        raise DataError(f"{owner}: {err}") from None

