"""Errors of data files, and reading their lines with errors that name the file and the line.

A data file that is missing, empty, cut short (a truncated ``.gz``), not UTF-8 or malformed is a
mistake in the user's setup, not a bug: it raises :class:`DataError`, a
:class:`~attnflow.config.registry.ConfigError`, so ``attnflow-train`` prints its one-line message and
exits with status 2 instead of a traceback — before any checkpoint is written (the data modules
read their files while the data module, model and task are built, or at the latest in
``setup``, before the first training step). A missing file raises
:class:`DataFileNotFoundError`, which is both a ``DataError`` and a ``FileNotFoundError``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Tuple

from attnflow.config.registry import ConfigError


class DataError(ConfigError):
    """A data file cannot be used; the message names the file (and the line where known)."""


class DataFileNotFoundError(DataError, FileNotFoundError):
    """A data file is missing; the message names it and says where data is looked for."""


def numbered_lines(path: Path | str, owner: str) -> Iterator[Tuple[int, str]]:
    """``(line number, line)`` of a text file (``.gz``: gzip), lines split on ``\\n`` alone, as
    :func:`attnflow.io.text.iter_lines` reads them; a truncated gzip stream, a file that is not
    gzip or not UTF-8 raises :class:`DataError` naming the file and the line (``owner``, e.g.
    ``data 'documents'``, starts the message)."""
    from attnflow.io.text import InputError, iter_lines

    path = Path(path)
    if not path.is_file():
        raise DataFileNotFoundError(f"{owner}: file not found: {path}")
    try:
        yield from enumerate(iter_lines(path, "data file"), 1)
    except InputError as err:
        raise DataError(f"{owner}: {err}") from None


def check_fields(owner: str, checks) -> None:
    """``checks``: (field, value, ok, what is allowed); the first that is not ok is a
    ``ValueError`` naming the owner, the field, what is allowed and the value."""
    for name, value, ok, allowed in checks:
        if not ok:
            raise ValueError(f"{owner}: {name} must be {allowed}, got {value!r}")
