"""attnflow's Lightning callbacks: attention pictures, a stop on a non-finite loss, the
float32 matmul precision in every training process, and the model compiled there; and what a
callback that adds fields to the run's summary offers (:class:`SummaryFields`)."""

from __future__ import annotations

import dataclasses
import math
import weakref
from pathlib import Path
from typing import Annotated, Any, Dict, Literal, Optional, Protocol, runtime_checkable

import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import TensorBoardLogger, WandbLogger

from attnflow.config.contracts import DataContract
from attnflow.config.registry import NonNegativeFloat, NonNegativeInt, Range
from attnflow.io.console import warn_unread
from attnflow.viz.panels import Dashboard, log_panels


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    """``callbacks.checkpoint`` (null: none): the ``save_top_k`` best by ``monitor`` (null: the
    task's metric and mode), and ``last.ckpt`` when ``save_last``."""

    monitor: Optional[str] = None
    mode: Optional[Literal["min", "max"]] = None
    save_top_k: Annotated[int, Range(ge=-1, what="-1 keeps every checkpoint")] = 1
    save_last: bool = True


@dataclasses.dataclass(frozen=True)
class EarlyStoppingConfig:
    """``callbacks.early_stopping`` (null: none): Lightning's ``EarlyStopping``."""

    monitor: Optional[str] = None
    mode: Optional[Literal["min", "max"]] = None
    patience: NonNegativeInt = 3
    min_delta: NonNegativeFloat = 0.0


@dataclasses.dataclass(frozen=True)
class AttentionMapsConfig:
    """``callbacks.attention_maps`` (null: none): :class:`AttentionMaps`."""

    examples: NonNegativeInt = 4
    every_n_epochs: NonNegativeInt = 1


@runtime_checkable
class SummaryFields(Protocol):
    """A callback that adds fields to ``metrics.json`` (and the loggers' summaries) at the end
    of a run, e.g. a sweep trial's number and state."""

    def summary_fields(self) -> Dict[str, Any]:
        """The fields, by name."""


class AttentionMaps(pl.Callback):
    """Every ``every_n_epochs`` validations (0: only after training) and at the final validation,
    the task's ``dashboard`` of ``examples`` validation examples (the data module's
    ``example_batch``) goes to the W&B and TensorBoard loggers on rank 0; at the end of training
    its images are written to ``out_dir``."""

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
            log_panels(loggers, self._panels(trainer, pl_module), trainer.global_step,
                       when=_when(trainer))

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


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN or infinite loss; the message names the step."""


class StopOnNonFiniteLoss(pl.Callback):
    """Stops training at the first NaN/∞ training loss, before a checkpoint holds the broken
    weights. Under DDP the ranks decide together, so none waits alone in an all-reduce."""

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs,
                           batch, batch_idx: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        value = None if loss is None else float(loss)
        bad = value is not None and not math.isfinite(value)
        if trainer.world_size > 1:
            bad = trainer.strategy.reduce_boolean_decision(bad, all=False)
        if bad:
            where = "" if value is None or not math.isfinite(value) else " on another rank"
            raise NonFiniteLossError(
                f"the training loss is {'non-finite' if where else value}{where} at epoch "
                f"{trainer.current_epoch}, step {trainer.global_step}; training stopped unsaved. "
                f"Lower task.optim.lr, clip gradients (trainer.gradient_clip_val) or check the data")


# torch.set_float32_matmul_precision's settings (high: TF32 tensor cores; medium: bfloat16)
MATMUL_PRECISIONS = ("highest", "high", "medium")


class Float32MatmulPrecision(pl.Callback):
    """The run's ``float32_matmul_precision`` in every process that trains (those of ddp_spawn
    do not inherit it), put back at teardown."""

    def __init__(self, value: str):
        self.value, self._found = value, None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._found = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision(self.value)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._found is not None:
            torch.set_float32_matmul_precision(self._found)
            self._found = None


class CompiledModel(pl.Callback):
    """``trainer.compile=true``: the task's ``model`` compiled in place (``nn.Module.compile``:
    its ``state_dict`` keys unchanged, so checkpoints load into an uncompiled run) as each stage
    sets up, once per model object. A pickled module drops its compilation, so ddp_spawn's
    workers compile their own copy."""

    def __init__(self):
        self._compiled = None  # a weak reference to the model compiled last (in this process)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        model = pl_module.model
        if self._compiled is not None and self._compiled() is model:
            return
        model.compile()
        self._compiled = weakref.ref(model)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_compiled": None}  # (ddp_spawn's copy: not compiled there)
