"""What the console scripts print, outside the progress bar (:mod:`attnflow.training.progress`): attnflow's
warnings as one line each, whether output goes to a terminal, and the final metrics as a table.

:func:`print_metrics` prints the run's final validation and test metrics (of the best checkpoint,
as in ``metrics.json``) as a rich table, one row per metric and one column per split.

No Lightning or torch import here: ``attnflow-train`` installs :func:`plain_warnings` before Hydra
composes the config, so a typo that Hydra refuses (``scorer=bogus``) is answered in a second or
two, not after the ≈ 6 s that importing Lightning takes.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Dict, Iterator, Mapping


class AttnflowWarning(UserWarning):
    """What attnflow tells the user of their run: a field left out, a fallback taken. The console
    scripts print it as one line, ``attnflow: warning: …`` (:func:`plain_warnings`):
    the user's config is its cause, not the line of attnflow that noticed it."""


def warn_unread(field: str, why: str) -> None:
    """One warning line for a field the chosen setting leaves unread: it is accepted and has no
    effect (``encoder 'rnn': dropout=0.3 is unread: …``). Called where the setting is known (a
    block's constructor, a data module, a callback), so each build names it once."""
    import warnings

    warnings.warn(f"{field} is unread: {why}", AttnflowWarning, stacklevel=3)


BARS = ("auto", "rich", "tqdm", "text", "none")  # callbacks.progress_bar (attnflow.training.progress)


def plain_warnings() -> None:
    """attnflow's own warnings (:class:`AttnflowWarning`: a field left out, a
    fallback taken) as one line on stderr, ``attnflow: warning: …``, instead of Python's form with
    attnflow's file and source line; other warnings as before. Lightning's deprecation of
    ``LeafSpec``, raised by its own code on every run and nothing a user can act on, is silenced.
    For the console scripts; installed once."""
    import warnings

    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
    shown = warnings.showwarning
    if getattr(shown, "attnflow", False):
        return

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, AttnflowWarning):
            print(f"attnflow: warning: {message}", file=file or sys.stderr, flush=True)
        else:
            shown(message, category, filename, lineno, file, line)

    show.attnflow = True
    warnings.showwarning = show


_ELSEWHERE = False  # set by printing_elsewhere()


@contextlib.contextmanager
def printing_elsewhere() -> Iterator[None]:
    """Within it :func:`is_interactive` is False: the runs whose configs are checked print to
    files of their own, not to this terminal (a sweep's jobs on a cluster's nodes), so ``auto``
    is the text bar for them."""
    global _ELSEWHERE
    before, _ELSEWHERE = _ELSEWHERE, True
    try:
        yield
    finally:
        _ELSEWHERE = before


def is_interactive() -> bool:
    """Whether stdout is a terminal, or a Jupyter kernel (as rich detects it). Not FORCE_COLOR
    and the like: colour wanted in a CI log still needs lines, not a redrawn bar."""
    if _ELSEWHERE:
        return False
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


def print_metrics(metrics: Mapping[str, float], title: str = "final metrics (best checkpoint)",
                  file=None) -> None:
    """The final metrics as a table: a row per metric, a column per split (``val/acc`` → row
    ``acc``, column ``validation``), printed with rich (plain characters when not a terminal)."""
    from rich.console import Console
    from rich.table import Table

    splits = {"train": "train", "val": "validation", "test": "test"}
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
