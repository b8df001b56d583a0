"""``callbacks.ema``: an exponential moving average of the weights, validated and saved in their place.

After every optimiser step whose 0-based index s satisfies s ≥ ``start_step`` and
s % ``every_n_steps`` == 0,

    θ̄ ← β θ̄ + (1 − β) θ,     θ̄ = θ at the first update,

the Polyak–Ruppert average in its exponential form (Polyak & Juditsky 1992; Marian's
exponential smoothing, Junczys-Dowmunt et al. 2018). Lightning's ``EMAWeightAveraging`` does the
work: validations of the fit score θ̄, checkpoints hold θ̄ as ``state_dict`` and θ as
``current_model_state``. The subclass keeps that to the fit: evaluating a saved checkpoint later
scores its θ̄ as saved, and a checkpoint written after the fit still keeps θ to resume.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Dict, Optional

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import EMAWeightAveraging
from pytorch_lightning.utilities import rank_zero_warn

from attnflow.config.registry import AttnflowWarning, NonNegativeInt, PositiveInt, Range
from attnflow.training.lightning_internals import last_average_step


@dataclasses.dataclass(frozen=True)
class EMAConfig:
    """``callbacks.ema`` (null: none): β = ``decay``; see the module."""

    decay: Annotated[float, Range(gt=0, lt=1, what="β of θ̄ ← βθ̄ + (1 − β)θ")] = 0.999
    start_step: NonNegativeInt = 0
    every_n_steps: PositiveInt = 1


class ExponentialMovingAverage(EMAWeightAveraging):
    """Lightning's EMA callback with attnflow's field names, during the fit only."""

    def __init__(self, decay: float = 0.999, start_step: int = 0, every_n_steps: int = 1):
        super().__init__(decay=decay, update_every_n_steps=every_n_steps,
                         update_starting_at_step=start_step)
        self.decay, self.start_step, self.every_n_steps = decay, start_step, every_n_steps
        self._trained: Optional[Dict[str, torch.Tensor]] = None  # θ, once θ̄ replaced it at the end

    def averaged_state_dict(self, trainer: pl.Trainer) -> Optional[Dict[str, torch.Tensor]]:
        """θ̄ under the LightningModule's names while fitting (as a checkpoint saves it); else None."""
        if trainer.state.fn != "fit":
            return None
        ckpt: Dict[str, Any] = {"state_dict": {}}
        EMAWeightAveraging.on_save_checkpoint(self, trainer, trainer.lightning_module, ckpt)
        return ckpt["state_dict"] if "current_model_state" in ckpt else None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._trained = None
        super().setup(trainer, pl_module, stage)

    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.state.fn == "fit":
            super().on_validation_epoch_start(trainer, pl_module)

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.state.fn == "fit":
            super().on_validation_epoch_end(trainer, pl_module)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if last_average_step(self) == 0 and trainer.global_step > 0:
            rank_zero_warn(f"callbacks.ema made no average: training ended at step "
                           f"{trainer.global_step}, before callbacks.ema.start_step={self.start_step}; "
                           f"validation, test and checkpoints have the initial weights",
                           category=AttnflowWarning)
        self._trained = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}
        super().on_train_end(trainer, pl_module)

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: Dict[str, Any]) -> None:
        super().on_save_checkpoint(trainer, pl_module, checkpoint)
        if self._trained is not None and "current_model_state" in checkpoint:
            checkpoint["current_model_state"] = self._trained

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: Dict[str, Any]) -> None:
        if trainer.state.fn == "fit":  # (evaluating: its state_dict, θ̄, is loaded as it is)
            super().on_load_checkpoint(trainer, pl_module, checkpoint)


def averaged_weights(trainer: pl.Trainer) -> Optional[Dict[str, torch.Tensor]]:
    """θ̄ of the trainer's ``callbacks.ema`` while fitting, else None."""
    for cb in trainer.callbacks:
        if isinstance(cb, ExponentialMovingAverage):
            return cb.averaged_state_dict(trainer)
    return None
