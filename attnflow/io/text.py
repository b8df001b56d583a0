"""Inputs and outputs of the command-line tools (translate, predict): lines in, arrays out.

Lines. A text file holds one item (a sentence, a document) per line; a ``.gz`` file is read with
gzip. Lines are split on ``\\n`` alone (a ``\\r\\n`` ending is accepted): JSON lines are defined
that way, and texts may hold U+0085 or U+2028 (the original IMDB reviews do), which
``str.splitlines()`` would take for line ends — cutting a JSON string in two, or shifting every
later output line against its input. Lines are read lazily, so output can stream (each batch
printed as it is done) and a file of any size needs no memory for its whole text. A file that
is missing, a folder, not gzip, cut short, or not UTF-8 raises :class:`InputError` naming the file
(and line).

Arrays. :func:`save_arrays` writes a NumPy ``.npz`` archive (uncompressed arrays and text as
Unicode arrays, so ``numpy.load(path)`` needs no ``allow_pickle``), atomically: a failure leaves no
half-written file and an existing one untouched.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import os
import sys
import zlib
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Tuple, TypeVar

import numpy as np

T = TypeVar("T")


class InputError(ValueError):
    """An input file or stream that cannot be read; the message names it (and the line)."""


def _lines(stream: Iterable[str], where: str) -> Iterator[str]:
    n = 0
    try:
        for n, line in enumerate(stream, 1):
            yield line.removesuffix("\n").removesuffix("\r")
    except UnicodeDecodeError as err:
        raise InputError(f"{where} is not UTF-8 text after line {n} ({err.reason}); save it as "
                         f"UTF-8") from None
    except EOFError:
        raise InputError(f"{where} ends early after line {n}: the gzip stream is truncated") from None
    except (gzip.BadGzipFile, zlib.error) as err:
        raise InputError(f"{where} is not a readable gzip file ({err})") from None


def iter_lines(path: Path | str, what: str = "input file") -> Iterator[str]:
    """The lines of a text file (``.gz``: gzip), without line ends; see the module docstring."""
    path = Path(path)
    if path.is_dir():  # (was "no such input file", of a path that is there)
        raise InputError(f"{what} {path}: a folder, not a file; name a file of one input per line")
    if not path.is_file():
        raise InputError(f"no such {what}: {path}")

    def gen():
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8", newline="\n") as f:
            yield from _lines(f, str(path))

    return gen()


def iter_stdin() -> Iterator[str]:
    """The lines of standard input, split on ``\\n`` alone, read as they arrive."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a replaced sys.stdin (io.StringIO in tests)
        text = sys.stdin.read()
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return iter([ln.removesuffix("\r") for ln in lines])

    def gen():
        stream = io.TextIOWrapper(buffer, encoding="utf-8", newline="\n")
        try:
            yield from _lines(stream, "stdin")
        finally:
            stream.detach()  # a collected wrapper would close sys.stdin's buffer

    return gen()


def batched(items: Iterable[T], size: int) -> Iterator[List[T]]:
    """Consecutive lists of ``size`` items (the last one shorter)."""
    chunk: List[T] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def text_array(items) -> np.ndarray:
    """Strings (or nested lists of them, rectangular) as a Unicode array (no pickling needed)."""
    return np.asarray(items, dtype=str)


def check_npz(path: Path | str) -> Path:
    """``path`` if it names a ``.npz`` file, else :class:`InputError` (the CLIs check their
    ``--save-attention`` with it before any work)."""
    path = Path(path)
    if path.suffix != ".npz":
        raise InputError(f"--save-attention needs a file name ending in .npz, got {path}")
    return path


def check_png(path: Path | str, option: str = "--attention") -> Path:
    """``path`` if it names a ``.png`` file, else :class:`InputError`: the CLIs check their
    ``--attention`` with it before any work (matplotlib refused another suffix only after the
    decoding, when the picture was saved)."""
    if Path(path).suffix.lower() != ".png":
        raise InputError(f"{option} takes the PNG file to write ({option} OUT.png), got {str(path)!r}")
    return Path(path)


def check_new_outputs(*options: Tuple[str, Any]) -> None:
    """Before any work of a CLI: each ``(option, path)`` given (``-o``, ``--save-attention``, …)
    names a file that does not exist yet, in a folder that exists or can be made (no part of the
    path above it is a file: ``mkdir`` failed there with a traceback after the work), and no two
    options name the same file (the later write replaced the earlier one, or failed renaming its
    temporary file). An earlier result is never overwritten and no result is lost
    (:class:`InputError` naming the option and the file)."""
    given: Dict[Path, str] = {}
    for option, path in options:
        if not isinstance(path, (str, Path)) or not path:
            continue
        path = Path(path)
        if path.exists():
            raise InputError(f"{option} {path} exists and is not overwritten: give another name, "
                             f"or remove it first")
        check_folder(f"{option} {path}", path)
        same = given.setdefault(path.resolve(), f"{option} {path}")
        if same != f"{option} {path}":
            raise InputError(f"{same} and {option} {path} name the same file: give each output "
                             f"its own name")


def check_folder(what: str, path: Path | str, hint: str = "name a file in a folder") -> None:
    """The nearest existing folder above ``path`` is a folder, not a file (else :class:`InputError`
    starting with ``what``, e.g. the option and the path, and ending with ``hint``): checked
    before any work, as writing there later fails (mkdir's ``FileExistsError``)."""
    for parent in Path(path).parents:
        if parent.exists():
            if not parent.is_dir():
                raise InputError(f"{what}: {parent} is a file, not a folder; {hint}")
            return


@contextlib.contextmanager
def atomic_path(path: Path | str) -> Iterator[Path]:
    """A temporary name beside ``path`` to write to; on success it replaces ``path`` in one rename
    (readers — a DDP rank, a user — see the old file or the new one, never a part), on failure it
    is removed and ``path`` is left as it was. Checkpoints add an fsync
    (:func:`attnflow.training.state.atomic_torch_save`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def save_arrays(path: Path | str, arrays: Dict[str, np.ndarray]) -> Path:
    """Write ``arrays`` as one ``.npz`` at ``path`` (atomically)."""
    path = check_npz(path)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)
    return path


def path_arg(value: str) -> str:
    """The argparse ``type`` of the console scripts' path arguments: an empty one (``-o ''``, from
    a shell variable left unset) names no file and is refused; it was taken as "not given" (the
    default place, stdout) or as the current folder."""
    if not value.strip():
        raise argparse.ArgumentTypeError("an empty path names no file or folder: give a path, or "
                                         "leave the option out")
    return value


def listed(items: Iterable[Any], most: int) -> str:
    """The first ``most`` items, comma-separated, and how many more (``a, b, c and 2 more``)."""
    items = [str(i) for i in items]
    return ", ".join(items[:most]) + (f" and {len(items) - most} more" if len(items) > most else "")


def no_inputs(what: str, option: str, path: Any, held: str = "lines", metavar: str = "") -> str:
    """The refusal of an input that gave nothing, naming where it was read from: ``no sentences
    given (arguments, -f FILE or stdin): -f empty.txt holds no lines`` (``option`` the file
    option, ``path`` its value, None for stdin)."""
    source = f"{option} {path}" if path else "stdin"
    return f"no {what} given (arguments, {option}{metavar} or stdin): {source} holds no {held}"
