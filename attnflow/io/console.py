"""What the console scripts print outside the progress bar: attnflow's warnings as one line each,
whether output goes to a terminal, and the final metrics as a table. No Lightning or torch import
here (installed before Hydra composes the config, so its refusals come in a second or two).
"""

from __future__ import annotations

import re
import shlex
import sys
import warnings
from typing import Any, Dict, Mapping


class AttnflowWarning(UserWarning):
    """What attnflow tells the user of their run (a field left out, a fallback taken), printed by
    the console scripts as one line, ``attnflow: warning: …``."""


def warn_unread(field: str, why: str) -> None:
    """One warning line for a field the chosen setting leaves unread (``encoder 'rnn':
    dropout=0.3 is unread: …``), from where the setting is known (a block's constructor)."""
    warnings.warn(f"{field} is unread: {why}", AttnflowWarning, stacklevel=3)


def hydra_value(value: str) -> str:
    """``value`` as a Hydra override's value: plain where Hydra's grammar reads it so (a path of
    letters, digits, ``_./:-``), else in double quotes (spaces, accents, quotes)."""
    if re.fullmatch(r"[A-Za-z0-9_./:+-]*", value) and value:
        return value
    return '"' + value.replace('"', '\\"') + '"'


def shell_word(key: str, value: str) -> str:
    """``key=value`` quoted for Hydra and the shell, as it is typed."""
    return shlex.quote(f"{key}={hydra_value(value)}")


def command(program: str, *args: str, **overrides: str) -> str:
    """A command line that pastes into bash and works whatever the paths: ``args`` as they are,
    ``overrides`` as ``key=value`` with Hydra's quoting, each word quoted for the shell."""
    words = [program, *map(str, args), *(f"{k}={hydra_value(str(v))}" for k, v in overrides.items())]
    return shlex.join(words)


BARS = ("auto", "rich", "tqdm", "text", "none")  # callbacks.progress_bar (attnflow.training.progress)


class _PlainShow:
    """``warnings.showwarning`` that prints :class:`AttnflowWarning` as one line and hands other
    warnings to the ``shown`` it replaced."""

    def __init__(self, shown) -> None:
        self.shown = shown

    def __call__(self, message, category, filename, lineno, file=None, line=None) -> None:
        if issubclass(category, AttnflowWarning):
            print(f"attnflow: warning: {message}", file=file or sys.stderr, flush=True)
        else:
            self.shown(message, category, filename, lineno, file, line)


def plain_warnings() -> None:
    """:class:`AttnflowWarning` as one line on stderr, ``attnflow: warning: …``, without
    attnflow's file and source line; other warnings as before, but Lightning's own ``LeafSpec``
    deprecation (nothing a user can act on) is silenced. Installed once."""
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
    if not isinstance(warnings.showwarning, _PlainShow):
        warnings.showwarning = _PlainShow(warnings.showwarning)


def is_interactive() -> bool:
    """Whether stdout is a terminal, or a Jupyter kernel (as rich detects it)."""
    try:
        if sys.stdout.isatty():
            return True
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False
    from rich.console import Console

    return Console().is_jupyter


def fmt_value(value: Any) -> str:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return str(value)
    return f"{value:.4g}"


def duration(seconds: float) -> str:
    """``seconds`` as ``m:ss``, or ``h:mm:ss`` from an hour on."""
    h, rest = divmod(int(round(seconds)), 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def print_metrics(metrics: Mapping[str, float], title: str = "final metrics (best checkpoint)",
                  file=None) -> None:
    """The final metrics as a rich table: a row per metric, a column per split (``val/acc`` →
    row ``acc``, column ``validation``; ``best/val/acc`` → column ``best/val``)."""
    from rich.console import Console
    from rich.table import Table

    splits = {"train": "train", "best/val": "best/val", "val": "validation", "test": "test"}
    rows: Dict[str, Dict[str, float]] = {}
    columns = []
    for key, value in metrics.items():
        split, _, name = key.rpartition("/")
        column = splits.get(split, split or "value")
        if column not in columns:
            columns.append(column)
        rows.setdefault(name, {})[column] = value
    columns.sort(key=lambda c: list(splits.values()).index(c) if c in splits.values() else 99)
    table = Table(title=title, title_justify="left")
    table.add_column("metric")
    for column in columns:
        table.add_column(column, justify="right")
    for name in sorted(rows):
        table.add_row(name, *(fmt_value(rows[name][c]) if c in rows[name] else "" for c in columns))
    Console(file=file or sys.stdout, soft_wrap=False).print(table)
