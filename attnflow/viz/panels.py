"""Dashboard panels (:func:`attnflow.viz.figures.image_panel` and its kin: plain dicts) sent to the
W&B and TensorBoard loggers, and what draws them (:class:`Dashboard`)."""

from __future__ import annotations

from typing import Any, List, Protocol, runtime_checkable

from pytorch_lightning.loggers import TensorBoardLogger, WandbLogger


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
