"""Inputs and outputs of the command-line tools: lines in, arrays out.

Lines are split on ``\\n`` alone (``\\r\\n`` accepted): JSON lines are defined that way, and
texts may hold U+0085 or U+2028, which ``str.splitlines()`` takes for line ends. They are read
lazily (``.gz`` with gzip), so output can stream. An unreadable input raises :class:`InputError`
naming the file (and line). Arrays are written as an ``.npz`` (text as Unicode arrays, no
pickling), atomically.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import os
import sys
import zlib
from pathlib import Path
from typing import IO, Any, Dict, Iterable, Iterator, List, Optional, Tuple, TypeVar

import numpy as np

T = TypeVar("T")


class InputError(ValueError):
    """An input file or stream that cannot be read; the message names it (and the line)."""


def decoded_lines(stream: Iterable[bytes], where: str, unzipped: bool = False) -> Iterator[str]:
    """The lines of a byte stream decoded as UTF-8, line ends kept. A byte that is not UTF-8
    raises :class:`InputError` naming ``where``, the line (1-based, as an editor counts), the
    byte in the line (1-based) and its offset in the file (0-based; ``unzipped``: in the
    decompressed text). Each line is decoded alone: b"\\n" is never part of a UTF-8 sequence."""
    offset = 0
    for n, raw in enumerate(stream, 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise InputError(not_utf8(where, n, offset, err, unzipped)) from None
        offset += len(raw)
        yield line


def not_utf8(where: str, line: int, offset: int, err: UnicodeDecodeError, unzipped: bool = False) -> str:
    """The message of a byte that is not UTF-8: ``err`` from decoding line ``line`` (1-based),
    which starts at byte ``offset`` of the file."""
    at = f"offset {offset + err.start}{' of the unzipped text' if unzipped else ''}"
    return (f"{where} line {line}, byte {err.start + 1} ({at}): 0x{err.object[err.start]:02x} is not UTF-8 "
            f"({err.reason}); save the file as UTF-8")


def _lines(stream: Iterable[bytes], where: str, unzipped: bool = False) -> Iterator[str]:
    n = 0
    try:
        for n, line in enumerate(decoded_lines(stream, where, unzipped), 1):
            yield line.removesuffix("\n").removesuffix("\r")
    except EOFError:
        raise InputError(f"{where} ends early after line {n}: the gzip stream is truncated") from None
    except (gzip.BadGzipFile, zlib.error) as err:
        raise InputError(f"{where} is not a readable gzip file ({err})") from None


def open_bytes(path: Path) -> IO[bytes]:
    """``path`` opened for reading bytes (``.gz``: decompressed)."""
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


def iter_lines(path: Path | str, what: str = "input file") -> Iterator[str]:
    """The lines of a text file (``.gz``: gzip), without line ends."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{what} {path}: a folder, not a file; name a file of one input per line")
    if not path.is_file():
        raise InputError(f"no such {what}: {path}")

    def gen():
        with open_bytes(path) as f:
            yield from _lines(f, str(path), path.name.endswith(".gz"))

    return gen()


def iter_stdin() -> Iterator[str]:
    """The lines of standard input, split on ``\\n`` alone, read as they arrive."""
    if not isinstance(sys.stdin, io.TextIOWrapper):  # a replaced sys.stdin (io.StringIO in tests)
        text = sys.stdin.read()
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return iter([ln.removesuffix("\r") for ln in lines])

    return _lines(sys.stdin.buffer, "stdin")


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
    """``path`` if it names a ``.npz`` file, else :class:`InputError`."""
    path = Path(path)
    if path.suffix != ".npz":
        raise InputError(f"--save-attention needs a file name ending in .npz, got {path}")
    return path


def check_png(path: Path | str, option: str = "--attention") -> Path:
    """``path`` if it names a ``.png`` file, else :class:`InputError`."""
    if Path(path).suffix.lower() != ".png":
        raise InputError(f"{option} takes the PNG file to write ({option} OUT.png), got {str(path)!r}")
    return Path(path)


def check_new_outputs(*options: Tuple[str, Any]) -> None:
    """Each ``(option, path)`` names a new file in a folder that can be made, no two the same."""
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
    """The nearest existing parent of ``path`` is a folder this process can write, else
    :class:`InputError` (before any work: not after it)."""
    for parent in Path(path).absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise InputError(f"{what}: {parent} is a file, not a folder; {hint}")
            if not os.access(parent, os.W_OK | os.X_OK):
                why = ("a read-only file system" if os.statvfs(parent).f_flag & os.ST_RDONLY
                       else "permission denied")
                raise InputError(f"{what}: cannot write in {parent} ({why})")
            return


def in_the_way(path: Path | str) -> Tuple[Optional[Path], str]:
    """What blocks ``path`` (a file or folder that could not be made), and why: the file on its
    way where a folder belongs, or the folder at ``path`` where a file belongs; (None, "")."""
    path = Path(path).absolute()
    for q in (path, *path.parents):
        if q.is_symlink() or q.exists():
            if not q.is_dir():
                return q, f"{q} is a file, where a folder belongs"
            return (q, f"{q} is a folder, where a file belongs") if q == path else (None, "")
    return None, ""


@contextlib.contextmanager
def atomic_path(path: Path | str) -> Iterator[Path]:
    """A temporary name beside ``path``, renamed to ``path`` on success and removed on failure."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: Path | str, text: str) -> None:
    """``text`` in ``path`` as UTF-8, as given (newline="": a CSV's own \\r\\n kept), written
    atomically: an interrupted write leaves the previous file whole."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)


def write_json(path: Path | str, data: Any, **dumps: Any) -> None:
    """``data`` as JSON (``json.dumps`` with ``dumps``) in ``path``, written atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, **dumps))


def save_arrays(path: Path | str, arrays: Dict[str, np.ndarray]) -> Path:
    """Write ``arrays`` as one ``.npz`` at ``path`` (atomically)."""
    path = check_npz(path)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)
    return path


def path_arg(value: str) -> str:
    """The argparse ``type`` of path arguments: an empty one (an unset variable) is refused."""
    if not value.strip():
        raise argparse.ArgumentTypeError("an empty path names no file or folder: give a path, or "
                                         "leave the option out")
    return value


def listed(items: Iterable[Any], most: int) -> str:
    """The first ``most`` items, comma-separated, and how many more (``a, b, c and 2 more``)."""
    items = [str(i) for i in items]
    return ", ".join(items[:most]) + (f" and {len(items) - most} more" if len(items) > most else "")


def no_inputs(what: str, option: str, path: Any, held: str = "lines", metavar: str = "") -> str:
    """The refusal of an input that gave nothing (``path``: None for stdin)."""
    source = f"{option} {path}" if path else "stdin"
    return f"no {what} given (arguments, {option}{metavar} or stdin): {source} holds no {held}"
