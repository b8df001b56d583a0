"""Dashboard panels (:func:`attnflow.viz.figures.image_panel` and its kin: plain dicts) sent to the
W&B and TensorBoard loggers, what draws them (:class:`Dashboard`), and when a run draws them
(:class:`AttentionMaps`, ``callbacks.attention_maps``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Protocol, runtime_checkable

import pytorch_lightning as pl
from pytorch_lightning.loggers import TensorBoardLogger, WandbLogger

from attnflow.config.contracts import DataContract
from attnflow.io.console import warn_unread


@runtime_checkable
class Dashboard(Protocol):
    """A task that draws panels of a batch of validation examples (the data module's
    ``example_batch``); a task without pictures of its examples has no ``dashboard``."""

    def dashboard(self, batch: Any) -> List[dict]:
        """The panels of ``batch``."""


def log_panels(loggers, panels: list, step: int, when: str = "") -> None:
    """Panels to W&B (images, HTML, tables; one history row) and TensorBoard (images, tables as
    Markdown). A W&B image's caption ends with ``when`` (e.g. ``epoch 3, step 120``)."""
    if not panels:
        return
    for lg in loggers:
        if isinstance(lg, WandbLogger):
            import wandb  # (here: a second of import, for a run that logs to W&B only)

            row = {}
            for p in panels:
                if p["kind"] == "image":
                    caption = " · ".join(c for c in (p.get("caption"), when) if c)
                    row[p["key"]] = wandb.Image(p["image"], caption=caption or None)
                elif p["kind"] == "html":
                    row[p["key"]] = wandb.Html(p["html"], inject=False)
                elif p["kind"] == "table":
                    row[p["key"]] = wandb.Table(columns=p["columns"], data=p["rows"])
            lg.log_metrics(row, step=step)
        elif isinstance(lg, TensorBoardLogger):
            for p in panels:
                if p["kind"] == "image":
                    lg.experiment.add_image(p["key"], p["image"], step, dataformats="HWC")
                elif p["kind"] == "table":
                    lg.experiment.add_text(p["key"], markdown_table(p["columns"], p["rows"]), step)


def markdown_table(columns, rows) -> str:
    """A table as Markdown (TensorBoard's text plugin renders it)."""
    def cell(v) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(map(cell, columns)) + " |", "|" + " --- |" * len(columns)]
    return "\n".join(lines + ["| " + " | ".join(map(cell, r)) + " |" for r in rows])


class AttentionMaps(pl.Callback):
    """Every ``every_n_epochs`` validations (0: only after training) and at the final validation,
    the task's ``dashboard`` of ``examples`` validation examples (the data module's
    ``example_batch``) goes to the W&B and TensorBoard loggers on rank 0; at the end of training
    its images are written to ``out_dir``. A validation outside the fit (of the best checkpoint)
    logs its panels under their keys after :attr:`logged_as` (``best/val/attention/0``), so that
    a key keeps one step per validation of the fit."""

    logged_as: str = ""

    def __init__(self, out_dir: Path, examples: int = 4, every_n_epochs: int = 1):
        self.out_dir, self.examples, self.every_n_epochs = Path(out_dir), examples, every_n_epochs
        if examples == 0 and every_n_epochs != 1:
            warn_unread(f"callbacks.attention_maps.every_n_epochs={every_n_epochs}",
                        "examples=0 draws no maps")

    def _panels(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> list:
        dm = trainer.datamodule
        if (self.examples <= 0 or not isinstance(dm, DataContract)
                or not isinstance(pl_module, Dashboard)):
            return []
        return pl_module.dashboard(dm.example_batch(self.examples))

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero or not self.every_n_epochs:
            return
        if trainer.state.fn == "fit" and trainer.current_epoch % self.every_n_epochs:
            return  # (a validation after training, of the best checkpoint, is always shown)
        loggers = [lg for lg in trainer.loggers if isinstance(lg, (WandbLogger, TensorBoardLogger))]
        if loggers:
            panels = [{**p, "key": self.logged_as + p["key"]} for p in self._panels(trainer, pl_module)]
            log_panels(loggers, panels, trainer.global_step, when=_when(trainer))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.is_global_zero or trainer.fast_dev_run:
            return
        import matplotlib.pyplot as plt

        for panel in self._panels(trainer, pl_module):
            if panel["kind"] == "image" and panel.get("file"):
                self.out_dir.mkdir(parents=True, exist_ok=True)
                plt.imsave(self.out_dir / panel["file"], panel["image"])


def _when(trainer: pl.Trainer) -> str:
    """When a validation's pictures were drawn: an epoch of the fit, or after it (of which weights)."""
    if trainer.state.fn == "fit":
        return f"epoch {trainer.current_epoch}, step {trainer.global_step}"
    ckpt = trainer.ckpt_path
    return f"after training, weights of {Path(ckpt).name}" if ckpt else "after training"
