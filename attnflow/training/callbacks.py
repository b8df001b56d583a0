"""attnflow's Lightning callbacks: a stop on a non-finite loss, the float32 matmul precision in
every training process, and the model compiled there; early stopping after the warm-up; what a callback that adds fields to the
run's summary offers (:class:`SummaryFields`); and the configs of the callbacks of Lightning's
and of :class:`attnflow.viz.panels.AttentionMaps` (attention pictures)."""

from __future__ import annotations

import dataclasses
import math
import weakref
from typing import Annotated, Any, Dict, Literal, Optional, Protocol, runtime_checkable

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import EarlyStopping

from attnflow.config.registry import NonNegativeFloat, NonNegativeInt, Range


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
    """``callbacks.attention_maps`` (null: none): :class:`attnflow.viz.panels.AttentionMaps`."""

    examples: NonNegativeInt = 4
    every_n_epochs: NonNegativeInt = 1


@runtime_checkable
class SummaryFields(Protocol):
    """A callback that adds fields to ``metrics.json`` (and the loggers' summaries) at the end
    of a run, e.g. a sweep trial's number and state."""

    def summary_fields(self) -> Dict[str, Any]:
        """The fields, by name."""


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


class WarmEarlyStopping(EarlyStopping):
    """Lightning's ``EarlyStopping``, counting validations once the learning rate has stopped
    rising (a warm-up's peak; a schedule without a warm-up, from its first step): the first
    epochs of a long warm-up on a small data set are not a plateau."""

    warm = False
    _rates: Optional[list] = None  # the learning rates after the last step

    def __init__(self, **kwargs: Any) -> None:  # (a monitor not logged yet, a run cut short
        super().__init__(**{"strict": False, **kwargs})  # in its first epoch: no check; a
        # misspelt monitor is refused before any work, callbacks.*.monitor)

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if not self.warm:
            rates = [lr for config in trainer.lr_scheduler_configs for lr in config.scheduler.get_last_lr()]
            self.warm = self._rates is not None and all(b <= a for a, b in zip(self._rates, rates))
            self._rates = rates

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.warm:
            super().on_train_epoch_end(trainer, pl_module)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.warm:
            super().on_validation_end(trainer, pl_module)

    def state_dict(self) -> Dict[str, Any]:
        return {**super().state_dict(), "warm": self.warm}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.warm = state_dict.get("warm", True)


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
