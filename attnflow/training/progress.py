"""``callbacks.progress_bar``: ``auto`` (rich on a terminal, else ``text``), ``text`` (plain
lines flushed as written: a log file or a pipe), ``rich``, ``tqdm`` or ``none``."""

from __future__ import annotations

import time
from typing import Any, Dict, Optional

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ProgressBar, RichProgressBar, TQDMProgressBar

from attnflow.io import console
from attnflow.io.console import duration, fmt_value


def progress_bar(kind: Optional[str], every_n_steps: Optional[int] = None) -> Optional[ProgressBar]:
    """The progress-bar callback for ``callbacks.progress_bar`` (None for ``none``)."""
    if kind == "auto":
        kind = "rich" if console.is_interactive() else "text"
    bars = {"rich": RichProgressBar, "tqdm": TQDMProgressBar, "text": lambda: TextProgressBar(every_n_steps)}
    return bars[kind]() if kind in bars else None


def epoch_label(trainer: pl.Trainer) -> str:
    """``epoch 3/9``: the 0-based epoch and the last one, as Lightning's bar, checkpoint names
    and the loggers' ``epoch`` count (``?`` for a run without an epoch limit)."""
    last = trainer.max_epochs - 1 if trainer.max_epochs and trainer.max_epochs > 0 else "?"
    return f"epoch {trainer.current_epoch}/{last}"


def epoch_metrics(trainer: pl.Trainer, prefixes=("train/", "val/")) -> str:
    """The epoch's train and validation metrics as ``name=value`` pairs."""
    items = sorted((k, v) for k, v in trainer.callback_metrics.items()
                   if k.startswith(prefixes) and not k.endswith("_step"))
    return " ".join(f"{k.removesuffix('_epoch')}={fmt_value(v)}" for k, v in items)


class TextProgressBar(ProgressBar):
    """Plain lines, each flushed: one every ``every_n_steps`` batches of a loop (default: the
    trainer's ``log_every_n_steps``) and one per training epoch with its metrics::

        epoch 0/3 step 50/313 (16%) 21.3 it/s eta 0:12 train/loss=1.82
        epoch 0/3 done in 0:15: train/loss=0.913 val/loss=0.412 val/seq_acc=0.62
    """

    def __init__(self, every_n_steps: Optional[int] = None):
        super().__init__()
        self.every_n_steps = every_n_steps
        self._enabled = True
        self._started: Dict[str, float] = {}
        self._skipped: Dict[str, int] = {}  # batches done before the clock started (resume)

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def print(self, *args: Any, **kwargs: Any) -> None:
        if self._enabled:
            print(*args, **kwargs, flush=True)

    def _step_line(self, trainer: pl.Trainer, loop: str, done: int, total: Any) -> Optional[str]:
        """The line after ``done`` batches of ``total``, or None when none is due."""
        every = max(1, int(self.every_n_steps or trainer.log_every_n_steps or 50))
        if done % every or (isinstance(total, (int, float)) and done >= total):
            return None  # (the last batch: the epoch line)
        elapsed = max(time.monotonic() - self._started.get(loop, time.monotonic()), 1e-9)
        timed = done - self._skipped.get(loop, 0)
        rate, bounded = timed / elapsed, isinstance(total, int) and total > 0
        where = f"step {done}/{total} ({100 * done // total}%)" if bounded else f"step {done}"
        if timed > 0:
            where += f" {rate:.1f} it/s" + (f" eta {duration((total - done) / rate)}" if bounded else "")
        return where

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._started["train"] = self._started["epoch"] = time.monotonic()
        self._skipped["train"] = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if "train" not in self._started:  # resumed mid-epoch: no epoch start
            self._started["train"] = self._started["epoch"] = time.monotonic()
            self._skipped["train"] = batch_idx + 1
        line = self._step_line(trainer, "train", batch_idx + 1, self.total_train_batches)
        if line:
            bar = {k: v for k, v in self.get_metrics(trainer, pl_module).items()
                   if k.startswith("train/") or "/" not in k and k != "v_num"}
            extra = " ".join(f"{k.removesuffix('_step')}={fmt_value(v)}" for k, v in sorted(bar.items()))
            self.print(f"{epoch_label(trainer)} {line} {extra}".rstrip())

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        took = duration(time.monotonic() - self._started.get("epoch", time.monotonic()))
        if self._skipped.get("train"):
            took += f" (resumed after step {self._skipped['train']})"
        self.print(f"{epoch_label(trainer)} done in {took}: {epoch_metrics(trainer)}".rstrip(": "))

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
            prefix = (f"{epoch_label(trainer)} val" if trainer.state.fn == "fit"
                      else "test" if trainer.testing else "validation")
            self.print(f"{prefix} {line}")

    on_test_batch_end = on_validation_batch_end

    def on_validation_end(self, trainer, pl_module) -> None:
        self.reset_dataloader_idx_tracker()

    on_test_end = on_validation_end
