"""What ``attnflow-train`` prints: a progress line that works in a terminal, a pipe or a log file,
and the final metrics as a table.

``callbacks.progress_bar`` chooses the bar (:func:`progress_bar`):

- ``auto`` (the default): Lightning's rich bar on a terminal (or in Jupyter), else ``text``;
- ``text``: :class:`TextProgressBar`, plain lines flushed as they are written — what a log file or
  ``attnflow-train | tee log`` needs (a redrawn bar writes nothing to a pipe until it ends);
- ``rich``, ``tqdm``: Lightning's bars; ``none``: no bar.

:func:`print_metrics` prints the run's final validation and test metrics (of the best checkpoint,
as in ``metrics.json``) as a rich table, one row per metric and one column per split.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any, Dict, Iterator, Mapping, Optional

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ProgressBar, RichProgressBar, TQDMProgressBar

BARS = ("auto", "rich", "tqdm", "text", "none")


def plain_warnings() -> None:
    """attnflow's own warnings (:class:`attnflow.registry.AttnflowWarning`: a field left out, a
    fallback taken) as one line on stderr, ``attnflow: warning: …``, instead of Python's form with
    attnflow's file and source line; other warnings as before. Lightning's deprecation of
    ``LeafSpec``, raised by its own code on every run and nothing a user can act on, is silenced.
    For the console scripts; installed once."""
    import warnings

    from attnflow.registry import AttnflowWarning

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


def progress_bar(kind: Optional[str], every_n_steps: Optional[int] = None) -> Optional[ProgressBar]:
    """The progress-bar callback for ``callbacks.progress_bar`` (None for ``none``)."""
    if kind == "auto":
        kind = "rich" if is_interactive() else "text"
    if kind == "rich":
        return RichProgressBar()
    if kind == "tqdm":
        return TQDMProgressBar()
    if kind == "text":
        return TextProgressBar(every_n_steps)
    return None


def _fmt(value: Any) -> str:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return str(value)
    return f"{value:.4g}"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


class TextProgressBar(ProgressBar):
    """Progress as plain lines, each flushed at once: one every ``every_n_steps`` batches of a loop
    (default: the trainer's ``log_every_n_steps``) and one at the end of each training epoch with
    its training and validation metrics.

        epoch 1/4 step 50/313 (16%) 21.3 it/s eta 0:12 train/loss=1.82
        epoch 1/4 done in 0:15: train/loss=0.913 val/loss=0.412 val/seq_acc=0.62
        test step 50/63 (79%) 8.2 it/s eta 0:01

    A loop of one batch (full-graph GAT) prints only its epoch line. Runs on global rank 0 only
    (Lightning's ProgressBar disables the others).
    """

    def __init__(self, every_n_steps: Optional[int] = None):
        super().__init__()
        self.every_n_steps = every_n_steps
        self._enabled = True
        self._started: Dict[str, float] = {}
        self._skipped: Dict[str, int] = {}  # batches of the loop done before its clock started

    # -- ProgressBar interface -----------------------------------------------------------------------
    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def print(self, *args: Any, **kwargs: Any) -> None:
        if self._enabled:
            print(*args, **kwargs, flush=True)

    # -- helpers -------------------------------------------------------------------------------------
    def _every(self, trainer: pl.Trainer) -> int:
        return max(1, int(self.every_n_steps or trainer.log_every_n_steps or 50))

    def _epoch(self, trainer: pl.Trainer) -> str:
        total = trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else "?"
        return f"epoch {trainer.current_epoch + 1}/{total}"

    def _step_line(self, trainer: pl.Trainer, loop: str, done: int, total: Any) -> Optional[str]:
        """The line after ``done`` batches of ``total``, or None when none is due."""
        if done % self._every(trainer) or (isinstance(total, (int, float)) and done >= total):
            return None  # the last batch of a loop is covered by the epoch (or final) line
        elapsed = max(time.monotonic() - self._started.get(loop, time.monotonic()), 1e-9)
        timed = done - self._skipped.get(loop, 0)
        rate = timed / elapsed
        where = f"step {done}"
        if isinstance(total, int) and total > 0:
            where += f"/{total} ({100 * done // total}%)"
            if timed > 0:
                where += f" {rate:.1f} it/s eta {_duration((total - done) / rate)}"
        elif timed > 0:
            where += f" {rate:.1f} it/s"
        return where

    def _metrics(self, trainer: pl.Trainer, prefixes=("train/", "val/")) -> str:
        items = sorted((k, v) for k, v in trainer.callback_metrics.items()
                       if k.startswith(prefixes) and not k.endswith("_step"))
        return " ".join(f"{k.removesuffix('_epoch')}={_fmt(v)}" for k, v in items)

    # -- training ------------------------------------------------------------------------------------
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._started["train"] = self._started["epoch"] = time.monotonic()
        self._skipped["train"] = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if "train" not in self._started:  # resumed mid-epoch: Lightning starts no epoch; time
            self._started["train"] = self._started["epoch"] = time.monotonic()  # from this batch
            self._skipped["train"] = batch_idx + 1
        line = self._step_line(trainer, "train", batch_idx + 1, self.total_train_batches)
        if line:
            # the bar's metrics of this step (validation values shown would be last epoch's)
            bar = {k: v for k, v in self.get_metrics(trainer, pl_module).items()
                   if k.startswith("train/") or "/" not in k and k != "v_num"}
            extra = " ".join(f"{k.removesuffix('_step')}={_fmt(v)}" for k, v in sorted(bar.items()))
            self.print(f"{self._epoch(trainer)} {line} {extra}".rstrip())

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        took = _duration(time.monotonic() - self._started.get("epoch", time.monotonic()))
        if self._skipped.get("train"):
            took += f" (resumed after step {self._skipped['train']})"
        self.print(f"{self._epoch(trainer)} done in {took}: {self._metrics(trainer)}".rstrip(": "))

    # -- evaluation loops (validation during fit, validate, test) -------------------------------------
    def on_validation_epoch_start(self, trainer, pl_module) -> None:
        self._started["eval"] = time.monotonic()

    on_test_epoch_start = on_validation_epoch_start

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx,
                                dataloader_idx: int = 0) -> None:
        if trainer.sanity_checking:
            return
        self.has_dataloader_changed(dataloader_idx)
        total = (self.total_test_batches_current_dataloader if trainer.testing
                 else self.total_val_batches_current_dataloader)
        line = self._step_line(trainer, "eval", batch_idx + 1, total)
        if line:
            prefix = (f"{self._epoch(trainer)} val" if trainer.state.fn == "fit"
                      else "test" if trainer.testing else "validation")
            self.print(f"{prefix} {line}")

    on_test_batch_end = on_validation_batch_end

    def on_validation_end(self, trainer, pl_module) -> None:
        self.reset_dataloader_idx_tracker()

    on_test_end = on_validation_end


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
        table.add_row(name, *(_fmt(rows[name][c]) if c in rows[name] else "" for c in columns))
    Console(file=file or sys.stdout, soft_wrap=False).print(table)
