"""``callbacks.ema``: an exponential moving average of the weights, validated and saved in their place.

After every optimiser step s ≥ ``start_step`` (every ``every_n_steps``-th),

    θ̄ ← β θ̄ + (1 − β) θ,     θ̄ = θ at the first update,

the Polyak–Ruppert average in its exponential form (Polyak & Juditsky 1992; the "running average of
the parameters" Szegedy et al. 2016 §8 evaluate; in translation, Marian's exponential smoothing,
Junczys-Dowmunt et al. 2018). θ keeps training; θ̄ is what each validation scores, so the
checkpoint metric, ``callbacks.average``'s kept epochs and early stopping all judge θ̄, and what
every checkpoint's ``state_dict`` holds, so ``attnflow-eval``, ``-translate`` and ``-predict`` use
it unchanged. The checkpoint keeps θ as ``current_model_state`` (and the average's count) for an
exact resume. With β = 0.999 the average spans about 1/(1 − β) = 1,000 steps.

Lightning's :class:`~pytorch_lightning.callbacks.WeightAveraging` does the bookkeeping (the copy
of the model, the swap around validation, the checkpoint keys); this subclass adds the update rule
(PyTorch's foreach ``get_ema_multi_avg_fn``) and changes four things for attnflow's runs: the swap
happens only while fitting (``trainer.validate``/``test`` of a saved checkpoint after the fit score
that checkpoint's θ̄, not the end of training's) and only once θ̄ exists (before ``start_step``
Lightning's would validate and save the initial weights), loading a checkpoint to evaluate it is
not warned about, and a checkpoint written after the end of training still keeps θ, not θ̄, as the
state to resume.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Dict, Optional

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import WeightAveraging
from pytorch_lightning.utilities import rank_zero_warn
from torch.optim.swa_utils import get_ema_multi_avg_fn

from attnflow.config.registry import AttnflowWarning, NonNegativeInt, PositiveInt, Range


@dataclasses.dataclass(frozen=True)
class EMAConfig:
    """``callbacks.ema`` (null: none): θ̄ ← β θ̄ + (1 − β) θ with β = ``decay``, after every
    ``every_n_steps``-th optimiser step from ``start_step`` on."""

    decay: Annotated[float, Range(gt=0, lt=1, what="β of θ̄ ← βθ̄ + (1 − β)θ")] = 0.999
    start_step: NonNegativeInt = 0
    every_n_steps: PositiveInt = 1


class ExponentialMovingAverage(WeightAveraging):
    """See the module docstring. Before the first update (``start_step``) there is no θ̄: validation
    and checkpoints use θ."""

    def __init__(self, decay: float = 0.999, start_step: int = 0, every_n_steps: int = 1):
        super().__init__(use_buffers=True, multi_avg_fn=get_ema_multi_avg_fn(decay))
        self.decay, self.start_step, self.every_n_steps = decay, start_step, every_n_steps
        self._swapped = False
        self._trained: Optional[Dict[str, torch.Tensor]] = None  # θ, once θ̄ replaced it at the end

    def should_update(self, step_idx: Optional[int] = None, epoch_idx: Optional[int] = None) -> bool:
        return (step_idx is not None and step_idx >= self.start_step
                and (step_idx - self.start_step) % self.every_n_steps == 0)

    def _has_average(self, trainer: pl.Trainer) -> bool:
        """Whether this fit has a θ̄ yet (not before its first update, not outside the fit)."""
        return (self._average_model is not None and trainer.state.fn == "fit"
                and int(self._average_model.n_averaged) > 0)

    def averaged_state_dict(self, trainer: pl.Trainer) -> Optional[Dict[str, torch.Tensor]]:
        """θ̄ under the LightningModule's parameter names, or None where there is none yet."""
        return self._average_model.module.state_dict() if self._has_average(trainer) else None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._swapped, self._trained = False, None
        super().setup(trainer, pl_module, stage)

    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._has_average(trainer):
            self._swap_models(pl_module)
            self._swapped = True

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._swapped:
            self._swap_models(pl_module)
            self._swapped = False

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._has_average(trainer):  # the module holds θ̄ from here on; θ stays for last.ckpt
            self._trained = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}
            self._copy_average_to_current(pl_module)
        elif trainer.global_step > 0:  # said, not silent: the config asked for an average
            rank_zero_warn(f"callbacks.ema made no average: training ended at step "
                           f"{trainer.global_step}, before callbacks.ema.start_step={self.start_step}; "
                           f"validation, test and checkpoints have the trained weights",
                           category=AttnflowWarning)

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: Dict[str, Any]) -> None:
        if not self._has_average(trainer):
            return  # θ is the state_dict
        super().on_save_checkpoint(trainer, pl_module, checkpoint)  # θ̄ → state_dict, θ → current_model_state
        if self._trained is not None:
            checkpoint["current_model_state"] = self._trained

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: Dict[str, Any]) -> None:
        # resuming a fit that had a θ̄: θ̄, its count and θ; a checkpoint without (saved before the
        # first update, or by a run without EMA): θ was loaded, θ̄ begins at the first update;
        # evaluating a checkpoint: its state_dict (θ̄) is what was loaded
        if self._average_model is not None and trainer.state.fn == "fit" \
                and "current_model_state" in checkpoint:
            super().on_load_checkpoint(trainer, pl_module, checkpoint)


def averaged_weights(trainer: pl.Trainer) -> Optional[Dict[str, torch.Tensor]]:
    """θ̄ of the trainer's ``callbacks.ema``, or None (no EMA, or none yet): the weights that a
    checkpoint saved now would hold, for callbacks that save weights themselves."""
    for cb in getattr(trainer, "callbacks", ()):
        if isinstance(cb, ExponentialMovingAverage):
            return cb.averaged_state_dict(trainer)
    return None
