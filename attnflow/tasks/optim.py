"""Optimisers and learning-rate schedules of the tasks' ``optim`` child config.

Schedules multiply ``lr`` at optimiser step s (w warm-up steps, S the run's steps):
``none`` 1; ``cosine`` ½(1 + cos(π·min(s, S)/S)); ``noam`` min(s/w, √(w/s)) (Vaswani et al.
2017, normalised to peak at 1); ``linear`` s/w, then (S − s)/(S − w) (Devlin et al. 2019 §A.2);
``constant_with_warmup`` min(1, s/w). A warm-up longer than the run (w > S) becomes S/10, with
one warning line: a preset's warm-up, tuned to its data set, still peaks on a small one.

``cooldown`` = f multiplies any schedule by (1 − p)/f over the last fraction f of the run, p the
larger of s/S and elapsed/``trainer.max_time`` (Zhai et al. 2022, §3.5; Hägele et al. 2024, §3),
so a time-boxed run anneals in its last minutes; a time-based p is not bit-reproducible.
``decay_bias_and_norm: false`` exempts one-dimensional parameters from weight decay (BERT's).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Callable, Iterable, Literal, Optional

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Timer
from pytorch_lightning.plugins.precision import FSDPPrecision, MixedPrecision, Precision

from attnflow.config.registry import AttnflowWarning, ConfigError, NonNegativeFloat, NonNegativeInt, PositiveFloat, Probability

Optimizer = Literal["adam", "adamw", "sgd"]
Scheduler = Literal["none", "cosine", "noam", "linear", "constant_with_warmup"]
WARMS_UP = ("noam", "linear", "constant_with_warmup")  # the schedules with a warm-up


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """A task's ``optim``: 'adam' (coupled L2), 'adamw' (decoupled) or 'sgd' (momentum 0.9),
    with a schedule and cool-down (module docstring)."""

    optimizer: Optimizer = "adam"
    lr: PositiveFloat = 1e-3
    weight_decay: NonNegativeFloat = 0.0
    scheduler: Scheduler = "none"
    warmup_steps: NonNegativeInt = 4000
    decay_bias_and_norm: bool = True
    cooldown: Probability = 0.0


def make_optimizer(params: Iterable[torch.nn.Parameter], name: str, lr: float,
                   weight_decay: float, fused: bool = True) -> torch.optim.Optimizer:
    """Adam, AdamW or SGD (momentum 0.9); ``fused``: PyTorch's one-kernel step (same update)."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay, momentum=0.9, fused=fused)
    cls = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
    return cls(params, lr=lr, weight_decay=weight_decay, fused=fused)


def attached_trainer(module) -> Optional[pl.Trainer]:
    """The Trainer ``module`` is attached to, else None (a LightningModule's ``trainer`` raises
    where it has none; any other module has none)."""
    if not isinstance(module, pl.LightningModule):
        return None
    try:
        return module.trainer
    except RuntimeError:
        return None


def fused_fits(trainer: Optional[pl.Trainer]) -> bool:
    """Whether a fused optimiser can step in ``trainer``'s run: not with clipping under a float16
    GradScaler (it unscales inside the fused step) or a plugin that clips its own way."""
    if trainer is None or not trainer.gradient_clip_val:
        return True
    plugin = trainer.precision_plugin
    if isinstance(plugin, (MixedPrecision, FSDPPrecision)) and plugin.scaler is not None:
        return False
    return isinstance(plugin, MixedPrecision) or type(plugin).clip_gradients is Precision.clip_gradients


def lr_factor(name: str, total_steps: int, warmup_steps: int = 4000) -> Callable[[int], float]:
    """The schedule's multiplier of the base learning rate at optimiser step ``step``."""
    w = max(1, warmup_steps)
    ramp = lambda step: max(step, 1) / w  # noqa: E731  (the warm-up; step 0 counts as 1)
    if name == "none":
        return lambda step: 1.0
    if name == "noam":
        return lambda step: min(ramp(step), math.sqrt(w / max(step, 1)))
    if name == "constant_with_warmup":
        return lambda step: min(1.0, ramp(step))
    if name == "linear":
        total = max(1, total_steps)
        return lambda step: (ramp(step) if step < w
                             else max(0.0, (total - step) / max(1, total - w)))
    total = max(1, total_steps)  # cosine
    return lambda step: 0.5 * (1.0 + math.cos(math.pi * min(step, total) / total))


def fitted_warmup(scheduler: str, warmup_steps: int, steps: float) -> int:
    """``warmup_steps``, or a tenth of the run's ``steps`` where the warm-up is longer than the
    run (its peak would never be reached): one warning line says so."""
    if scheduler not in WARMS_UP or not math.isfinite(steps) or warmup_steps <= steps:
        return warmup_steps
    fitted = max(1, int(steps) // 10)
    warnings.warn(f"task.optim.warmup_steps={warmup_steps} is longer than the run ({int(steps)} "
                  f"steps): the warm-up is {fitted} steps, a tenth of it", AttnflowWarning, stacklevel=2)
    return fitted


def cooldown_factor(fraction: float, progress: float) -> float:
    """1 until the last ``fraction`` of the run, then (1 − progress)/fraction, down to 0 at its end."""
    if fraction <= 0 or progress <= 1 - fraction:
        return 1.0
    return max(0.0, (1.0 - progress) / fraction)


def run_progress(trainer, steps: Optional[float] = None) -> Callable[[int], float]:
    """The fraction of the run done after step s: the larger of s/steps and the Timer's
    elapsed/``trainer.max_time``."""
    steps = float(trainer.estimated_stepping_batches if steps is None else steps)
    timer = next((cb for cb in trainer.callbacks if isinstance(cb, Timer)), None)
    # the time box in seconds (elapsed + remaining), or None
    box = None if timer is None or timer.time_remaining() is None else \
        timer.time_elapsed() + timer.time_remaining()
    if not math.isfinite(steps) and box is None:
        raise ConfigError("task.optim.cooldown needs the run's end: trainer.max_steps, "
                          "max_epochs or max_time")
    per_step = 1.0 / steps if math.isfinite(steps) and steps > 0 else 0.0

    def progress(step: int) -> float:
        done = step * per_step
        if box is not None:
            done = max(done, timer.time_elapsed() / max(box, 1e-9))
        return min(1.0, done)
    return progress


def param_groups(module: torch.nn.Module, weight_decay: float) -> list:
    """Matrices with ``weight_decay`` (group ``decay``), one-dimensional parameters (biases,
    norms) without (``no_decay``); the names name their learning-rate curves."""
    params = list(module.parameters())
    return [{"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay, "name": "decay"},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0, "name": "no_decay"}]


def configure(module, cfg: OptimConfig):
    """What a LightningModule's ``configure_optimizers`` returns, for ``module``'s parameters: the
    optimiser and its schedule per step (``none``: a constant one), named ``lr`` so that the
    learning rate is logged as ``lr`` (one parameter group) or ``lr/<group>``."""
    params = (module.parameters() if cfg.decay_bias_and_norm
              else param_groups(module, cfg.weight_decay))
    opt = make_optimizer(params, cfg.optimizer, cfg.lr, cfg.weight_decay,
                         fused=fused_fits(attached_trainer(module)))
    decays = cfg.scheduler in ("cosine", "linear")
    trainer = attached_trainer(module)  # (none: a warm-up is kept as it is)
    needs_steps = decays or cfg.cooldown > 0 or (cfg.scheduler in WARMS_UP and trainer is not None)
    steps = float(module.trainer.estimated_stepping_batches) if needs_steps else math.inf
    if decays and not math.isfinite(steps):
        raise ConfigError(f"task.optim.scheduler={cfg.scheduler} decays over the run's steps: set "
                          "trainer.max_steps or max_epochs, or use noam with task.optim.cooldown")
    warmup = fitted_warmup(cfg.scheduler, cfg.warmup_steps, steps)
    factor = lr_factor(cfg.scheduler, int(steps) if math.isfinite(steps) else 0, warmup)
    if cfg.cooldown > 0:
        base, progress, f = factor, run_progress(module.trainer, steps), cfg.cooldown
        factor = lambda step: base(step) * cooldown_factor(f, progress(step))  # noqa: E731
    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step", "name": "lr"}}
