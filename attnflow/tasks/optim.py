"""Optimisers and learning-rate schedules shared by the tasks.

A task's ``optim`` field is one :class:`OptimConfig` (``task.optim.lr=0.01``,
``task.optim.scheduler=noam task.optim.warmup_steps=300``); each task class gives its own default.
Schedules (multiplying ``lr``, stepped every optimiser step):

- ``none``: constant.
- ``cosine``: ½(1 + cos(π·min(s, S)/S)) over the S steps of training.
- ``noam``: min(s/w, √(w/s)) — Vaswani et al. 2017's warm-up schedule, d^{-½}·min(s^{-½}, s·w^{-3/2}),
  normalised so that the factor is 1 at the end of the w warm-up steps (``lr`` is the peak).
- ``linear``: s/w for s < w, then (S − s)/(S − w) down to 0 at the last of the S steps — Devlin et
  al. 2019 §A.2 (BERT: "linear warmup … and linear decay of the learning rate"), as HF
  transformers' ``get_linear_schedule_with_warmup``.
- ``constant_with_warmup``: min(1, s/w) — linear warm-up, then the peak rate (HF's
  ``get_constant_schedule_with_warmup``). With ``cooldown`` it is the warmup-stable-decay schedule
  of Hu et al. 2024 ("MiniCPM", §4.1) and Hägele et al. 2024 (§3): the rate stays at its peak until
  the cool-down, while noam's falls as √(w/s) from the end of the warm-up.

Cool-down (``cooldown=f``, any schedule): over the last fraction f of training the schedule's factor
is multiplied by (1 − p)/f, falling linearly to 0 at the end, where p ∈ [0, 1] is the progress of
the run: the larger of step/S (S: the run's steps from ``trainer.max_steps``/``max_epochs``) and
elapsed/``trainer.max_time`` (Lightning's Timer, validation included, carried across resumes). So
a time-boxed run anneals in its last minutes however fast the machine is — the reciprocal-square-root
schedule with a linear cool-down of Zhai et al. 2022 ("Scaling Vision Transformers", §3.5), which
Hägele et al. 2024 ("Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations",
§3) find as good as a cosine tuned to the length; Li et al. 2020 ("Budgeted Training", ICLR) find
linear decay to zero best under a fixed budget. A time-based progress depends on the machine's
speed, so such a run is not bit-reproducible on another machine or load. A run resumed with a
longer ``trainer.max_time`` moves its cool-down to the new end (the rate rises again first).

Weight decay: ``decay_bias_and_norm: false`` puts the parameters of one dimension (biases, the
gains and shifts of layer norms) in a group without weight decay, as BERT's reference optimiser
(Devlin et al. 2019's AdamWeightDecayOptimizer excludes "LayerNorm" and "bias"); matrices and
embeddings are decayed. The default (true) decays every parameter.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Iterable, Literal, Optional, get_args

import torch
from pytorch_lightning.callbacks import Timer
from pytorch_lightning.plugins.precision import MixedPrecision, Precision

from attnflow.config.registry import ConfigError, NonNegativeFloat, NonNegativeInt, PositiveFloat, Probability

Optimizer = Literal["adam", "adamw", "sgd"]
Scheduler = Literal["none", "cosine", "noam", "linear", "constant_with_warmup"]
OPTIMIZERS = get_args(Optimizer)  # the names, for error messages: written once, in the Literal
SCHEDULERS = get_args(Scheduler)


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """The optimiser and its learning-rate schedule: a task's ``optim`` child config.

    Args:
        optimizer: 'adam' (coupled L2 weight decay), 'adamw' (decoupled) or 'sgd' (momentum 0.9).
        lr: learning rate; with scheduler 'noam' the peak, reached at ``warmup_steps``.
        weight_decay: L2 penalty (Adam, SGD) or decoupled decay (AdamW).
        scheduler: 'none' (constant), 'cosine' (decay to 0 over the run), 'noam' (linear
            warm-up, then ∝ step^−½; Vaswani et al. 2017), 'linear' (linear warm-up, then linear
            decay to 0 at the end of the run; Devlin et al. 2019) or 'constant_with_warmup'
            (linear warm-up, then constant; with ``cooldown``: warmup-stable-decay).
        warmup_steps: warm-up of 'noam', 'linear' and 'constant_with_warmup'.
        decay_bias_and_norm: false: no weight decay on one-dimensional parameters (biases, norm
            gains and shifts), as BERT's optimiser; true: decay on every parameter.
        cooldown: the last fraction of the run (of its steps, or of ``trainer.max_time`` when
            that ends it first) over which the learning rate falls linearly to 0; 0: none.
    """

    optimizer: Optimizer = "adam"
    lr: PositiveFloat = 1e-3
    weight_decay: NonNegativeFloat = 0.0
    scheduler: Scheduler = "none"
    warmup_steps: NonNegativeInt = 4000
    decay_bias_and_norm: bool = True
    cooldown: Probability = 0.0


def make_optimizer(params: Iterable[torch.nn.Parameter], name: str, lr: float,
                   weight_decay: float, fused: bool = True) -> torch.optim.Optimizer:
    """Adam (coupled L2 ``weight_decay``), AdamW (decoupled) or SGD with momentum 0.9.

    ``fused``: PyTorch's fused implementation (one kernel over every parameter, on the CPU as on a
    GPU): the same update to float rounding, without a Python loop over the parameters and their
    few small operations each — for the 7.6M-parameter CPU Transformer, Adam's step takes 8 ms on
    one thread instead of 28 (docs/benchmarks.md, "A faster CPU step")."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay, momentum=0.9, fused=fused)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=fused)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay, fused=fused)
    raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {name!r}")


def _trainer_of(module):
    """The module's Trainer, or None where it has none (a LightningModule's ``trainer`` raises)."""
    return module._trainer if hasattr(module, "_trainer") else getattr(module, "trainer", None)


def fused_fits(trainer) -> bool:
    """Whether a fused optimiser can step in ``trainer``'s run (None: outside a Trainer, yes).

    Not when gradients are clipped and the precision plugin must unscale them first: a float16
    GradScaler (``trainer.precision=16-mixed``) unscales inside a fused step, after clipping would
    have to happen, so Lightning refuses the pair; nor with a plugin that clips its own way
    (DeepSpeed's). bf16-mixed has no scaler, and :meth:`attnflow.tasks.base.Task.
    configure_gradient_clipping` clips there itself; 32-true, bf16-true and 64-true clip as usual."""
    if trainer is None or not getattr(trainer, "gradient_clip_val", None):
        return True
    plugin = trainer.precision_plugin
    if getattr(plugin, "scaler", None) is not None:
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
    if name == "cosine":
        total = max(1, total_steps)
        return lambda step: 0.5 * (1.0 + math.cos(math.pi * min(step, total) / total))
    raise ValueError(f"scheduler must be one of {', '.join(SCHEDULERS)}, got {name!r}")


def cooldown_factor(fraction: float, progress: float) -> float:
    """1 until the last ``fraction`` of the run, then (1 − progress)/fraction, down to 0 at its end."""
    if fraction <= 0 or progress <= 1 - fraction:
        return 1.0
    return max(0.0, (1.0 - progress) / fraction)


def run_progress(trainer, steps: Optional[float] = None) -> Callable[[int], float]:
    """The fraction of ``trainer``'s run done after optimiser step s: the larger of s over its
    estimated steps (``steps``, when the caller has read them already) and, when
    ``trainer.max_time`` is set, the Timer's elapsed over that time."""
    steps = float(trainer.estimated_stepping_batches if steps is None else steps)
    timer = next((cb for cb in trainer.callbacks if isinstance(cb, Timer)), None)
    # the time box in seconds (elapsed + remaining: Lightning's Timer keeps it private), or None
    box = None if timer is None or timer.time_remaining() is None else \
        timer.time_elapsed() + timer.time_remaining()
    if not math.isfinite(steps) and box is None:
        raise ConfigError("task.optim.cooldown needs the run's end: set trainer.max_steps, "
                          "trainer.max_epochs or trainer.max_time (or task.optim.cooldown=0)")
    per_step = 1.0 / steps if math.isfinite(steps) and steps > 0 else 0.0

    def progress(step: int) -> float:
        done = step * per_step
        if box is not None:
            done = max(done, timer.time_elapsed() / max(box, 1e-9))
        return min(1.0, done)
    return progress


def schedule_length_error(scheduler: str, epochs: str = "trainer.max_epochs=-1") -> ConfigError:
    """The error for a decaying schedule in a run with no step count (``epochs``: how the run
    came to have no epoch limit)."""
    return ConfigError(f"task.optim.scheduler={scheduler} decays the learning rate over the run's "
                       f"steps, but {epochs} without trainer.max_steps sets no end; set "
                       "trainer.max_steps (or max_epochs), task.optim.scheduler=noam, "
                       "constant_with_warmup or none, or, for a run that trainer.max_time ends, "
                       "task.optim.cooldown (it follows the time box)")


def param_groups(module: torch.nn.Module, weight_decay: float) -> list:
    """Two groups: the parameters of two or more dimensions with ``weight_decay``, those of one
    (biases, norm gains and shifts) without — BERT's exclusion of "bias" and "LayerNorm"."""
    params = list(module.parameters())
    return [{"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]


def configure(module, cfg: OptimConfig):
    """What a LightningModule's ``configure_optimizers`` returns, for ``module``'s parameters."""
    params = (module.parameters() if cfg.decay_bias_and_norm
              else param_groups(module, cfg.weight_decay))
    opt = make_optimizer(params, cfg.optimizer, cfg.lr, cfg.weight_decay,
                         fused=fused_fits(_trainer_of(module)))
    if cfg.scheduler == "none" and cfg.cooldown == 0:
        return opt
    decays = cfg.scheduler in ("cosine", "linear")
    steps = float(module.trainer.estimated_stepping_batches) if decays or cfg.cooldown > 0 else 0.0
    if decays and not math.isfinite(steps):  # attnflow-train checks it first
        raise schedule_length_error(cfg.scheduler)
    factor = lr_factor(cfg.scheduler, int(steps) if math.isfinite(steps) else 0, cfg.warmup_steps)
    if cfg.cooldown > 0:
        base, progress, f = factor, run_progress(module.trainer, steps), cfg.cooldown
        factor = lambda step: base(step) * cooldown_factor(f, progress(step))  # noqa: E731
    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
