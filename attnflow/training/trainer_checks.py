"""Checks of the ``trainer`` and ``callbacks`` entries of a run config, before any work."""

from __future__ import annotations


import inspect
import re
import typing
from typing import Any, Dict, List, Optional

import pytorch_lightning as pl

import attnflow  # noqa: F401  (the ${attnflow_root:} resolver of conf/paths)
from attnflow.training.distributed import (parse_devices)
from attnflow.training import resume  # resume=, ckpt_path=; exact restarts, atomic checkpoints
from attnflow.training.precision import AUTO as PRECISION_AUTO  # =auto
from attnflow.config.registry import (TASKS, ConfigError, Range, suggest,
                               type_name)
from attnflow.tasks.optim import schedule_length_error



SET_BY_ATTNFLOW = ("logger", "callbacks", "default_root_dir", "enable_progress_bar", "enable_checkpointing",
                   "plugins", "barebones")


def trainer_fields() -> List[str]:
    return [p for p in inspect.signature(pl.Trainer.__init__).parameters if p != "self"]


def _fits(value: Any, hint: Any) -> bool:
    """Whether a YAML value fits a Trainer argument's annotation (unknown kinds: yes)."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if origin is typing.Union:
        return any(_fits(value, h) for h in typing.get_args(hint))
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin in (list, dict) or hint in (list, dict):
        return isinstance(value, origin or hint)
    return True  # classes (an Accelerator, a Strategy object): not expressible in YAML anyway


# The ranges of Trainer arguments: Lightning checks some only once the data is made (after the
# run's config.yaml is written, as a traceback), and accumulate_grad_batches=0 not at all (a
# division by zero in the fit). A float of the FRACTIONS is a share of the batches, an int a count.
TRAINER_RANGES = {"max_epochs": Range(ge=-1, what="-1: no limit"), "min_epochs": Range(ge=0),
                  "max_steps": Range(ge=-1, what="-1: no limit"), "min_steps": Range(ge=0),
                  "accumulate_grad_batches": Range(ge=1), "gradient_clip_val": Range(ge=0),
                  "num_sanity_val_steps": Range(ge=-1, what="-1: the whole validation set"),
                  "check_val_every_n_epoch": Range(ge=1), "num_nodes": Range(ge=1),
                  "log_every_n_steps": Range(ge=1), "reload_dataloaders_every_n_epochs": Range(ge=0),
                  "fast_dev_run": Range(ge=0, what="a count of batches; true: 1")}
# String values Lightning takes (it would refuse others only when it builds the Trainer, after
# the data): its GradClipAlgorithmType, and the profilers of its _init_profiler.
TRAINER_CHOICES = {"gradient_clip_algorithm": ("norm", "value"),
                   "profiler": ("simple", "advanced", "pytorch", "xla")}
DURATION_KEYS = ("days", "hours", "minutes", "seconds", "milliseconds", "microseconds", "weeks")
SHARE = "a share of the batches as a float; an int counts batches"
FRACTIONS = {key: Range(ge=0, le=1, what=SHARE) for key in (
    "limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches",
    "overfit_batches")} | {"val_check_interval": Range(gt=0, le=1, what=SHARE)}


def check_trainer_types(trainer: Dict[str, Any]) -> None:
    hints = typing.get_type_hints(pl.Trainer.__init__)
    for key, value in trainer.items():
        if key == "precision" and value == PRECISION_AUTO:  # attnflow's value (attnflow.training.precision)
            continue
        if key in hints and not _fits(value, hints[key]):
            also = (f" or {PRECISION_AUTO} (bf16-mixed where the hardware has native bfloat16, else "
                    f"32-true)" if key == "precision" else "")
            raise ConfigError(f"trainer.{key} (at 'trainer.{key}') must be {type_name(hints[key])}"
                              f"{also}, got {value!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if key in FRACTIONS and not isinstance(value, float):
            rng = Range(ge=1 if key == "val_check_interval" else 0,
                        what="a count of batches as an int; a float is a share")
        else:
            rng = FRACTIONS.get(key) or TRAINER_RANGES.get(key)
        if rng is not None and not rng.holds(value):
            raise ConfigError(f"trainer.{key} (at 'trainer.{key}') {rng.refusal(value)}")
    check_trainer_names(trainer)
    if "devices" in trainer:  # its form (the machine's devices: check_devices, in the training process)
        parse_devices(trainer["devices"], trainer.get("accelerator", "auto"))
    for key, names in TRAINER_CHOICES.items():
        value = trainer.get(key)
        if isinstance(value, str) and value.lower() not in names:
            raise ConfigError(f"trainer.{key} (at 'trainer.{key}') must be one of {', '.join(names)} "
                              f"or null, got {value!r}.{suggest(value.lower(), names)}")
    for key in ("max_time", "val_check_interval"):
        check_duration(key, trainer.get(key))


def check_duration(key: str, value: Any) -> None:
    """A time span of ``trainer.max_time`` / ``val_check_interval`` (Lightning's Timer): the string
    DD:HH:MM:SS, or a mapping of timedelta's fields with values >= 0."""
    if isinstance(value, str) and not re.fullmatch(r"\d+:\d\d:\d\d:\d\d", value.strip()):
        raise ConfigError(f"trainer.{key} must be DD:HH:MM:SS (two digits for hours, minutes "
                          f"and seconds, e.g. 00:01:30:00 for 90 minutes), got {value!r}")
    if isinstance(value, dict):
        bad = [k for k, v in value.items() if k not in DURATION_KEYS or isinstance(v, bool)
               or not isinstance(v, (int, float)) or v < 0]
        if bad or not value:
            raise ConfigError(f"trainer.{key} as a mapping takes {', '.join(DURATION_KEYS)} with "
                              f"values >= 0 (e.g. {{hours: 1, minutes: 30}}), got {value!r}")


def check_trainer_names(trainer: Dict[str, Any]) -> None:
    """``trainer.accelerator`` and ``trainer.strategy`` name what Lightning's registries hold
    (Lightning would refuse a misspelling only when it builds the Trainer, after the data)."""
    from pytorch_lightning.accelerators import AcceleratorRegistry
    from pytorch_lightning.strategies import StrategyRegistry

    for key, names in (("accelerator", ["auto", "gpu", *AcceleratorRegistry.available_accelerators()]),
                       ("strategy", ["auto", *StrategyRegistry.available_strategies()])):
        value = trainer.get(key)
        if isinstance(value, str) and value.lower() not in names:
            raise ConfigError(f"trainer.{key} (at 'trainer.{key}') must be one of "
                              f"{', '.join(names)}, got {value!r}.{suggest(value.lower(), names)}")


def check_schedule_length(cfg: Dict[str, Any]) -> None:
    """A schedule that decays over the run's steps (cosine, linear) needs a run of known length:
    ``trainer.max_epochs=-1`` without ``max_steps`` (a run ended by ``max_time`` or by hand) has
    none, and Lightning's step estimate would be infinite once the data is made. So has
    ``max_epochs=null`` with a ``max_time``: Lightning then sets no epoch limit (without one, 1000)."""
    trainer = cfg.get("trainer") or {}
    epochs = trainer.get("max_epochs")
    unbounded = epochs == -1 or (epochs is None and trainer.get("max_time") is not None)
    if not unbounded or (trainer.get("max_steps") or -1) > 0 or trainer.get("fast_dev_run"):
        return  # (fast_dev_run: Lightning sets max_steps)
    scheduler = TASKS.validate(cfg["task"], "task").get("optim", {}).get("scheduler")
    if scheduler in ("cosine", "linear"):
        raise schedule_length_error(scheduler, "trainer.max_epochs=-1" if epochs == -1 else
                                    "trainer.max_epochs=null with trainer.max_time (Lightning then "
                                    "sets no epoch limit)")


def check_minimums(trainer: Dict[str, Any]) -> None:
    """``trainer.min_epochs`` (``min_steps``) above ``max_epochs`` (``max_steps``): Lightning ends
    the run at the maximum first, so the minimum the user asked for was silently not kept."""
    for low, high in (("min_epochs", "max_epochs"), ("min_steps", "max_steps")):
        least, most = trainer.get(low), trainer.get(high)
        if isinstance(least, int) and isinstance(most, int) and most != -1 and least > most:
            raise ConfigError(f"trainer.{low}={least} is more than trainer.{high}={most}: Lightning "
                              f"ends the run at trainer.{high} first, so the minimum is never kept; "
                              f"lower trainer.{low}, or raise trainer.{high}")


def check_trains_something(trainer: Dict[str, Any]) -> None:
    """``trainer.max_epochs=0`` or ``trainer.max_steps=0``: Lightning's fit ended before its first
    step, then the run validated and tested its untrained weights, wrote them to ``metrics.json``
    as its final metrics (no checkpoint) and exited 0. Refused; ``fast_dev_run`` sets limits of
    its own (one epoch of a few batches), so neither is read there."""
    if trainer.get("fast_dev_run"):
        return
    for key, unit in (("max_epochs", "epochs"), ("max_steps", "steps")):
        value = trainer.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value == 0:
            raise ConfigError(f"trainer.{key}=0 (at 'trainer.{key}') trains nothing: the run would "
                              f"validate and test its untrained weights and report them as its final "
                              f"metrics; give a number of {unit} >= 1 (or -1: no limit), or evaluate "
                              f"a trained run with attnflow-eval <run dir>")


def check_validation_schedule(cfg: Dict[str, Any]) -> None:
    """A new run whose last epoch comes before its first validation (``check_val_every_n_epoch``
    beyond ``max_epochs``) trained without a word: no checkpoint chosen on a validation metric
    (``best_checkpoint`` empty), no early stopping. Refused, unless validation is switched off
    (``limit_val_batches=0``); a resume is checked for the epochs it adds
    (:func:`attnflow.training.resume.next_validation`)."""
    trainer = cfg.get("trainer") or {}
    first = None if cfg.get("resume") else resume.next_validation(trainer)
    if first is not None:
        every, epochs = trainer["check_val_every_n_epoch"], trainer["max_epochs"]
        raise ConfigError(f"trainer.check_val_every_n_epoch={every} with trainer.max_epochs={epochs} "
                          f"runs no validation: the run ends before epoch {every}, its first, so no "
                          f"checkpoint is chosen on a validation metric (best_checkpoint stays empty) "
                          f"and early stopping never runs; validate (e.g. "
                          f"trainer.check_val_every_n_epoch={epochs}, or trainer.max_epochs={every}), "
                          f"or train without validation: trainer.limit_val_batches=0")


def check_test_reads_batches(cfg: Dict[str, Any]) -> None:
    """``test=true`` (the default) with ``trainer.limit_test_batches=0``: the final test pass read
    no batch, so the run trained and ended without test metrics, exit 0, nothing said. Refused
    (``test=false`` says so, and ``test=false`` with a typed limit is refused as unread:
    :func:`attnflow.config.overrides._trainer_inert`). ``limit_val_batches=0`` is the supported way to
    train without validation and stays accepted; ``fast_dev_run`` sets the limit itself."""
    trainer = cfg.get("trainer") or {}
    limit = trainer.get("limit_test_batches")
    if cfg.get("test", True) and reads_no_batch(limit) and not trainer.get("fast_dev_run"):
        raise ConfigError(f"trainer.limit_test_batches={limit} (at 'trainer.limit_test_batches') with "
                          f"test=true tests no batch: the run's final test pass would read none and "
                          f"report no test metrics; to train without testing give test=false, else "
                          f"a limit > 0 (a number of batches >= 1, a share in (0, 1]) or leave it "
                          f"out (every batch)")


def reads_no_batch(limit: Any) -> bool:
    """Whether a ``trainer.limit_<split>_batches`` value lets that split's loop read no batch (0 or
    0.0; None is every batch)."""
    return isinstance(limit, (int, float)) and not isinstance(limit, bool) and limit == 0


def no_validation(trainer: Dict[str, Any]) -> Optional[tuple]:
    """(the trainer fields under which no validation runs during training, as typed; how to
    validate), or None where some does."""
    limit = trainer.get("limit_val_batches")
    if reads_no_batch(limit):
        return f"trainer.limit_val_batches={limit}", "trainer.limit_val_batches=1.0"
    every, epochs = trainer.get("check_val_every_n_epoch"), trainer.get("max_epochs")
    if resume.next_validation(trainer) is not None:  # (a new run: refused, check_validation_schedule)
        return (f"trainer.check_val_every_n_epoch={every} with trainer.max_epochs={epochs}",
                f"trainer.check_val_every_n_epoch={epochs}")
    return None


def check_callback_needs(cfg: Dict[str, Any], task_cls: Any) -> None:
    """Callbacks that the rest of the config leaves without what they work on, refused before any
    work: ``lr_monitor`` without a logger (Lightning stops the run once the data and the model are
    made), early stopping on a validation metric and checkpoint averaging (of validated epochs)
    where no validation runs during training (the first failed after an epoch of training, the
    second silently averaged nothing), an EMA that would start after ``trainer.max_steps``."""
    callbacks = cfg.get("callbacks") or {}
    if callbacks.get("lr_monitor") and not set(cfg.get("logger") or {}) - {"none"}:
        raise ConfigError("callbacks.lr_monitor=true logs the learning rate to the run's logger, but "
                          "logger=none gives it none; choose one (e.g. logger=csv) or drop "
                          "callbacks.lr_monitor")
    off, fix = no_validation(cfg.get("trainer") or {}) or (None, None)
    stop = callbacks.get("early_stopping")
    watched = (stop or {}).get("monitor") or getattr(task_cls, "monitor", "val/loss")
    if off and stop is not None and watched.startswith("val/"):
        raise ConfigError(f"callbacks.early_stopping watches {watched}, but {off} runs no validation "
                          f"during training, so it is never computed; validate (e.g. {fix}), watch a "
                          f"training metric (callbacks.early_stopping.monitor=train/loss), or drop "
                          f"early stopping (callbacks.early_stopping=null)")
    ema, steps = callbacks.get("ema"), (cfg.get("trainer") or {}).get("max_steps")
    if ema is not None and isinstance(steps, int) and 0 < steps < (ema.get("start_step") or 0):
        raise ConfigError(f"callbacks.ema.start_step={ema['start_step']} is after the run's last step "
                          f"(trainer.max_steps={steps}), so no average would be made; start it "
                          f"earlier, or drop callbacks.ema")
    if off and callbacks.get("average") is not None:
        raise ConfigError(f"callbacks.average averages the checkpoints of validated epochs, but {off} "
                          f"runs no validation during training, so there would be none; validate "
                          f"(e.g. {fix}), or drop callbacks.average (callbacks.average=null)")


