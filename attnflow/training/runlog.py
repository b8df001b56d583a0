"""What a run tells its user: its folder, a table of the model, one line per epoch trained and the
final metrics. The console shows them as they come (beside the progress bar); ``<run dir>/train.log``
keeps the folder, the epoch lines and the final table, with their times, next to Hydra's lines.
"""

from __future__ import annotations

import io
import logging
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator

import pytorch_lightning as pl
from pytorch_lightning.utilities import rank_zero_only
from pytorch_lightning.utilities.model_summary import summarize
from rich.console import Console
from rich.table import Table

from attnflow.config.contracts import TaskContract
from attnflow.io.console import duration, print_metrics
from attnflow.training.progress import epoch_label, epoch_metrics
from attnflow.training.runlock import first_rank

LOG = logging.getLogger("attnflow.run")
LOG.propagate = False  # (Hydra's root handlers would print it again; :func:`say` prints)


@contextmanager
def recording(run_dir: Path) -> Iterator[None]:
    """:data:`LOG`'s lines appended to ``<run_dir>/train.log`` (global rank 0) while in it."""
    if not first_rank():
        yield
        return
    handler = logging.FileHandler(Path(run_dir) / "train.log", encoding="utf-8", delay=True)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", "%Y-%m-%d %H:%M:%S"))
    LOG.addHandler(handler)
    LOG.setLevel(logging.INFO)
    try:
        yield
    finally:
        LOG.removeHandler(handler)
        handler.close()


@rank_zero_only
def say(line: str) -> None:
    """``line`` on the console and in ``train.log``."""
    print(line, flush=True)
    LOG.info(line)


def evaluated_weights(summary: Dict[str, Any]) -> str:
    """Which weights a run's final metrics are of, from its ``metrics.json`` summary."""
    return ("averaged checkpoint" if summary.get("averaged_from") else "best checkpoint"
            if summary.get("best_checkpoint") else "last weights")  # (none kept)


@rank_zero_only
def final_table(summary: Dict[str, Any], file: Any = None) -> None:
    """The final metrics as a table titled with the weights they are of (``best/val/…`` and
    ``test/…``; the ``val/`` curves' last points are the last epoch line's), on ``file``
    (default: the console)."""
    result = {k: v for k, v in (summary.get("metrics") or {}).items() if not k.startswith("val/")}
    if result:
        print_metrics(result, f"final metrics ({evaluated_weights(summary)})", file=file)


def log_final_table(summary: Dict[str, Any]) -> None:
    """:func:`final_table` in ``train.log``."""
    text = io.StringIO()
    final_table(summary, text)
    if text.getvalue():
        LOG.info("%s", "\n" + text.getvalue().rstrip())


class EpochLog(pl.Callback):
    """One line per training epoch in ``train.log``: ``epoch 2/9 done in 0:15: train/loss=…
    val/loss=…`` (the console's progress bar shows its own)."""

    def __init__(self) -> None:
        self._started = time.monotonic()

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._started = time.monotonic()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # on every rank: reading the epoch's metrics may sync them (only rank 0's LOG writes)
        took = duration(time.monotonic() - self._started)
        LOG.info("%s", f"{epoch_label(trainer)} done in {took}: {epoch_metrics(trainer)}".rstrip(": "))


class ModelTable(pl.Callback):
    """The model's modules two levels down that hold parameters, then one line: parameters, size,
    device and precision. A FLOPs column only where FLOPs were counted (the task has an
    ``example_input_array``)."""

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        summary = summarize(pl_module, max_depth=2)  # on every rank, as Lightning's (a forward
        if not trainer.is_global_zero:               # of an example input may meet collectives)
            return
        names = summary.layer_names
        flops = [sum(c.values()) for c in summary.flop_counts.values()] if summary.total_flops else None
        model = pl_module.model if isinstance(pl_module, TaskContract) else pl_module
        table = Table(title=type(model).__name__, title_justify="left")
        for column in ("module", "type", "parameters", *(["FLOPs"] if flops else [])):
            table.add_column(column, justify="left" if column in ("module", "type") else "right")
        for i, (name, kind, n) in enumerate(zip(names, summary.layer_types, summary.param_nums)):
            if n and ("." in name or not any(m.startswith(name + ".") for m in names)):
                table.add_row(name, kind, f"{n:,}", *([f"{flops[i]:,}"] if flops else []))
        Console(soft_wrap=False).print(table)
        frozen = summary.total_parameters - summary.trainable_parameters
        device = type(trainer.accelerator).__name__.removesuffix("Accelerator").lower()
        nodes = f" on each of {trainer.num_nodes} nodes" if trainer.num_nodes > 1 else ""
        say(f"{summary.total_parameters:,} parameters" + (f" ({frozen:,} frozen)" if frozen else "")
            + f", {summary.model_size:.1f} MB; {device} × {trainer.num_devices}{nodes}, "
              f"precision {trainer.precision}")
