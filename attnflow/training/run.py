"""One training run, from a resolved config to files in the run directory.

This module owns the run directory: ``config.yaml`` (the resolved config; a resumed run keeps
its own and records each resume in ``resume-<n>.yaml``: :mod:`attnflow.training.resume`), ``checkpoints/``
(Lightning's ModelCheckpoint: best and last), ``attention/`` (heat maps), ``metrics.json`` (final
validation and test metrics by name), and the logger's files (``csv/``, ``tensorboard/``,
``wandb/``). Order of work:

1. validate every block config against the registries and the trainer/callback fields — before
   any data is made or loaded, so a typo fails in a second with a message, not a traceback;
2. build the data module, the model (a tree of blocks) and the task from the registries;
3. ``Trainer.fit``, then validation and test of the best checkpoint;
4. write ``metrics.json`` (atomically; a failed run writes none and overwrites nothing) and always
   finish the W&B run, with a failure exit code if training failed.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import inspect
import json
import re
import time
import typing
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf, open_dict
from pytorch_lightning.callbacks import EarlyStopping, LearningRateMonitor, ModelCheckpoint
from pytorch_lightning.utilities import rank_zero_info, rank_zero_warn

import attnflow  # noqa: F401  (the ${attnflow_root:} resolver of conf/paths)
from attnflow.blocks.attention.multihead import check_heads
from attnflow.blocks.positional.learned import check_table_covers
from attnflow.training.callbacks import (MATMUL_PRECISIONS, AttentionMaps, AttentionMapsConfig,
                                CheckpointConfig, EarlyStoppingConfig, Float32MatmulPrecision,
                                StopOnNonFiniteLoss)
from attnflow.training.distributed import (check_devices, continue_csv_logs, fit_progress,
                                  lightning_refusals, parse_devices)
from attnflow.io.console import BARS
from attnflow.training.progress import progress_bar
from attnflow import config_dir
from attnflow.training import resume, state as training_state  # resume=, ckpt_path=; exact restarts, atomic checkpoints
from attnflow.training import averaging  # callbacks.average: checkpoint averaging
from attnflow.training.ema import EMAConfig, ExponentialMovingAverage  # callbacks.ema
from attnflow.config.groups import (drop_swapped_block_fields, fill_default_blocks, prune_unused,
                             top_level_keys, top_level_refusal, unused_groups)
from attnflow.training.loggers import (LOGGER_CONFIG, build_loggers, finish_loggers, log_hyperparams,
                              logger_identity, run_identity, summarize_loggers)
from attnflow.config.overrides import (command_line, hydra_references, read_keys, typed_groups,
                                unread_overrides)
from attnflow.training.precision import AUTO as PRECISION_AUTO, check_precision, resolve_precision  # =auto
from attnflow.config.registry import (AGGREGATORS, ATTENTIONS, DATA, ENCODERS, MODELS, NORMALIZERS,
                               POOLINGS, POSITIONALS, SCORERS, TASKS, ConfigError, Range, _suggest,
                               build_config, type_name)
from attnflow.tasks.optim import schedule_length_error
from attnflow.io.text import atomic_path

# Top-level config groups validated by a registry. The shared choices (scorer, normalizer,
# aggregator, attention, positional, pooling) are interpolated into models (attnflow.config.groups);
# validating the ones the model uses here names the path the user typed (``scorer.name=...``).
BLOCK_GROUPS = [("scorer", SCORERS), ("normalizer", NORMALIZERS), ("aggregator", AGGREGATORS),
                ("attention", ATTENTIONS), ("positional", POSITIONALS), ("pooling", POOLINGS),
                ("data", DATA), ("model", MODELS), ("task", TASKS),
                ("logger", LOGGER_CONFIG)]  # a mapping logger name -> fields (attnflow.training.loggers)

CALLBACK_FIELDS = {  # a dataclass: the entry's typed config (names, types, ranges: build_config)
    "checkpoint": CheckpointConfig,
    "early_stopping": EarlyStoppingConfig,
    "attention_maps": AttentionMapsConfig,
    "progress_bar": None,  # one of attnflow.io.console.BARS: auto rich tqdm text none
    "lr_monitor": None,  # bool
    "average": averaging.AverageConfig,  # {last: N} or {best: N} (+ monitor, mode)
    "ema": EMAConfig,  # {decay: β} (+ start_step, every_n_steps)
}


# Trainer arguments attnflow sets itself (from other config entries), so not trainer.* fields.
SET_BY_ATTNFLOW = ("logger", "callbacks", "default_root_dir", "enable_progress_bar", "enable_checkpointing",
                   "plugins", "barebones")


def _trainer_fields() -> List[str]:
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


def _check_trainer_types(trainer: Dict[str, Any]) -> None:
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
    _check_trainer_names(trainer)
    if "devices" in trainer:  # its form (the machine's devices: check_devices, in the training process)
        parse_devices(trainer["devices"], trainer.get("accelerator", "auto"))
    for key, names in TRAINER_CHOICES.items():
        value = trainer.get(key)
        if isinstance(value, str) and value.lower() not in names:
            raise ConfigError(f"trainer.{key} (at 'trainer.{key}') must be one of {', '.join(names)} "
                              f"or null, got {value!r}.{_suggest(value.lower(), names)}")
    for key in ("max_time", "val_check_interval"):
        _check_duration(key, trainer.get(key))


def _check_duration(key: str, value: Any) -> None:
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


def _check_trainer_names(trainer: Dict[str, Any]) -> None:
    """``trainer.accelerator`` and ``trainer.strategy`` name what Lightning's registries hold
    (Lightning would refuse a misspelling only when it builds the Trainer, after the data)."""
    from pytorch_lightning.accelerators import AcceleratorRegistry
    from pytorch_lightning.strategies import StrategyRegistry

    for key, names in (("accelerator", ["auto", "gpu", *AcceleratorRegistry.available_accelerators()]),
                       ("strategy", ["auto", *StrategyRegistry.available_strategies()])):
        value = trainer.get(key)
        if isinstance(value, str) and value.lower() not in names:
            raise ConfigError(f"trainer.{key} (at 'trainer.{key}') must be one of "
                              f"{', '.join(names)}, got {value!r}.{_suggest(value.lower(), names)}")


def _check_schedule_length(cfg: Dict[str, Any]) -> None:
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


def _check_minimums(trainer: Dict[str, Any]) -> None:
    """``trainer.min_epochs`` (``min_steps``) above ``max_epochs`` (``max_steps``): Lightning ends
    the run at the maximum first, so the minimum the user asked for was silently not kept."""
    for low, high in (("min_epochs", "max_epochs"), ("min_steps", "max_steps")):
        least, most = trainer.get(low), trainer.get(high)
        if isinstance(least, int) and isinstance(most, int) and most != -1 and least > most:
            raise ConfigError(f"trainer.{low}={least} is more than trainer.{high}={most}: Lightning "
                              f"ends the run at trainer.{high} first, so the minimum is never kept; "
                              f"lower trainer.{low}, or raise trainer.{high}")


def _check_trains_something(trainer: Dict[str, Any]) -> None:
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


def validate_config(cfg: Dict[str, Any]) -> None:
    """Raise :class:`ConfigError` for any unknown block name or bad field in ``cfg``."""
    known = top_level_keys(config_dir())
    for key in cfg:
        if key not in known:
            raise ConfigError(top_level_refusal(key, known))
    for group, registry in BLOCK_GROUPS:
        if group in cfg and cfg[group] is not None:
            registry.validate(cfg[group], group)
        elif group in ("data", "model", "task"):
            raise ConfigError(f"the config has no '{group}': choose one with {group}=NAME")
    allowed = _trainer_fields()
    for key in cfg.get("trainer") or {}:
        if key not in allowed or key in SET_BY_ATTNFLOW:
            raise ConfigError(
                f"trainer has no field '{key}' (at 'trainer.{key}'); fields are the arguments of "
                f"lightning's Trainer except {', '.join(SET_BY_ATTNFLOW)} (set by attnflow: "
                f"logger=…, callbacks.…, callbacks.progress_bar, callbacks.checkpoint (null: none); "
                f"plugins: the atomic, weights-only checkpoint IO; barebones: off, as the tasks log "
                f"their metrics, which barebones forbids).{_suggest(key, allowed)}")
    _check_trainer_types(cfg.get("trainer") or {})
    _check_trains_something(cfg.get("trainer") or {})
    _check_minimums(cfg.get("trainer") or {})
    check_precision(cfg.get("trainer") or {})  # 16-mixed on the CPU: Lightning swaps in bf16
    _check_schedule_length(cfg)
    for key, value in (cfg.get("callbacks") or {}).items():
        if key not in CALLBACK_FIELDS:
            raise ConfigError(f"callbacks has no entry '{key}' (at 'callbacks.{key}'); entries: "
                              f"{', '.join(CALLBACK_FIELDS)}.{_suggest(key, CALLBACK_FIELDS)}")
        fields = CALLBACK_FIELDS[key]
        if fields is not None and value is not None and not isinstance(value, dict):
            names = ", ".join(f.name for f in dataclasses.fields(fields))
            raise ConfigError(f"callbacks.{key} must be a mapping of its fields ({names}) or null, "
                              f"got {value!r}")
        if fields is not None and isinstance(value, dict):
            build_config(fields, value, f"callbacks.{key}", f"callbacks.{key}")
    task_cls = TASKS.get(cfg["task"]["name"])  # callbacks.average: its monitor, a metric it logs
    averaging.check_config(cfg.get("callbacks") or {},
                           lambda: metric_names(task_cls, cfg) if getattr(task_cls, "metrics", None) else [])
    matmul = cfg.get("float32_matmul_precision")
    if matmul not in (None, *MATMUL_PRECISIONS):
        raise ConfigError(f"float32_matmul_precision must be one of {', '.join(MATMUL_PRECISIONS)} "
                          f"(torch.set_float32_matmul_precision: high uses TF32 tensor cores) or "
                          f"null (PyTorch's setting as it is), got {matmul!r}")
    bar = (cfg.get("callbacks") or {}).get("progress_bar", "auto")
    if bar not in (*BARS, None):
        raise ConfigError(f"callbacks.progress_bar must be one of {', '.join(BARS)} (auto: rich on a "
                          f"terminal, else text lines), got {bar!r}")
    lr_monitor = (cfg.get("callbacks") or {}).get("lr_monitor")
    if not isinstance(lr_monitor, (bool, type(None))):  # any other value would switch it on
        raise ConfigError(f"callbacks.lr_monitor must be true or false (log the learning rate every "
                          f"step), got {lr_monitor!r}")
    _check_validation_schedule(cfg)
    _check_test_reads_batches(cfg)
    _check_callback_needs(cfg, task_cls)
    _check_root_fields(cfg)
    check_composition(cfg)
    check_model_builds(cfg)


def _check_validation_schedule(cfg: Dict[str, Any]) -> None:
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


def _check_test_reads_batches(cfg: Dict[str, Any]) -> None:
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


def _no_validation(trainer: Dict[str, Any]) -> Optional[tuple]:
    """(the trainer fields under which no validation runs during training, as typed; how to
    validate), or None where some does."""
    limit = trainer.get("limit_val_batches")
    if reads_no_batch(limit):
        return f"trainer.limit_val_batches={limit}", "trainer.limit_val_batches=1.0"
    every, epochs = trainer.get("check_val_every_n_epoch"), trainer.get("max_epochs")
    if resume.next_validation(trainer) is not None:  # (a new run: refused, _check_validation_schedule)
        return (f"trainer.check_val_every_n_epoch={every} with trainer.max_epochs={epochs}",
                f"trainer.check_val_every_n_epoch={epochs}")
    return None


def _check_callback_needs(cfg: Dict[str, Any], task_cls: Any) -> None:
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
    off, fix = _no_validation(cfg.get("trainer") or {}) or (None, None)
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


@functools.lru_cache(maxsize=1)
def _paths_fields() -> List[str]:
    """The fields of conf/paths/default.yaml (read once: every validation, e.g. each probed job of
    a sweep, asks)."""
    return list(OmegaConf.load(config_dir() / "paths" / "default.yaml").keys())


def _check_root_fields(cfg: Dict[str, Any]) -> None:
    """The root config's own fields (conf/train.yaml) and ``paths.*``: another type would fail
    late (a seed numpy refuses, after the run directory is made; ``resume=5``) or do something
    unasked (``test=maybe`` tests; a misspelt ``paths.data_dri`` is ignored)."""
    seed = cfg.get("seed", 1234)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 32:
        raise ConfigError(f"seed must be an int in [0, 2^32 - 1] (what numpy and Lightning seed "
                          f"with), got {seed!r}")
    if not isinstance(cfg.get("test", True), bool):
        raise ConfigError(f"test must be true or false (evaluate the best checkpoint on the test "
                          f"split after training), got {cfg['test']!r}")
    for key in ("resume", "ckpt_path", "optimized_metric"):
        if not isinstance(cfg.get(key), (str, type(None))):
            raise ConfigError(f"{key} must be a string or null, got {cfg[key]!r}")
    paths = cfg.get("paths") or {}
    known = _paths_fields()
    for key, value in paths.items():
        if key not in known:
            raise ConfigError(f"paths has no field '{key}' (at 'paths.{key}'); fields: "
                              f"{', '.join(known)}.{_suggest(key, known)}")
        if not isinstance(value, str):
            raise ConfigError(f"paths.{key} (at 'paths.{key}') must be a path (a string), got {value!r}")


# What a data module gives, and what a model or task works on: the ``interface`` class attribute
# of data modules, models and tasks (None: not declared, not checked).
INTERFACES = {"seq2seq": "sequence pairs (source and target token ids)",
              "documents": "labelled documents (sentences × words)",
              "graph": "graphs (node features, edges, node labels)",
              "pretraining": "unlabelled text as sentence pairs (MLM and NSP batches)",
              "text_classification": "labelled texts (token ids, one label per text)",
              "multitask": "several tasks' data at once (a batch of each per step)",
              "captioning": "images with captions (pixels or region features, caption token ids)"}


def _interface(cls: Any, block_cfg: Dict[str, Any]) -> Any:
    """What a block of this config works on: its class's ``interface``, or, for a class whose
    batches depend on a field (BERT's ``head``), its ``interface_of(config)``."""
    of = getattr(cls, "interface_of", None)
    return of(block_cfg) if of is not None else getattr(cls, "interface", None)


def _works_on(cls: Any, interface: str) -> bool:
    """Whether some config of ``cls`` works on ``interface`` (a class whose interface depends on
    its config lists them all in ``interfaces``)."""
    return interface == getattr(cls, "interface", None) or interface in getattr(cls, "interfaces", ())


def _check_encoder_kinds(model_cfg: Dict[str, Any]) -> None:
    """An image encoder (``input_kind`` 'image' or 'image_features': ``forward(images)``) in a
    model that reads token sequences (``forward(x, lengths)``) would fail only at the first
    batch; refused here, naming the field and the encoders that fit. A model that takes images
    says so with ``image_encoders = True``."""
    if getattr(MODELS.get(model_cfg["name"]), "image_encoders", False):
        return
    for key, value in model_cfg.items():
        if not (key.endswith("encoder") and isinstance(value, dict)) or value.get("name") not in ENCODERS:
            continue
        kind = getattr(ENCODERS.get(value["name"]), "input_kind", None)
        if kind:
            text = [n for n in ENCODERS.names() if not getattr(ENCODERS.get(n), "input_kind", None)]
            raise ConfigError(f"model.{key}: encoder '{value['name']}' reads {kind.replace('_', ' ')}s, "
                              f"but model '{model_cfg['name']}' gives it token sequences; encoders "
                              f"for sequences: {', '.join(text)}")


def _check_own_encoder(cfg: Dict[str, Any]) -> None:
    """A model's own encoder (``model.encoder``: seq2seq's or self_attentive's
    ``transformer_encoder``), before any data is made, with messages naming its own fields — the
    shared ``attention`` and ``positional`` groups that the Transformer and BERT read (and check in
    their ``check_config``) are not what such an encoder uses:

    - its attention's heads divide its width (``model.encoder.d_model``, else ``model.embed_dim``);
      the build on the meta device refused it too, but named ``attention.heads``, which these
      models refuse as a group they do not use;
    - a bounded positional table (``learned``) covers the longest input the data gives the encoder
      (the data class's ``longest_source_positions``, else ``longest_positions``); the table
      refused a longer input only at the first such batch, mid-run."""
    if not isinstance((cfg["model"] or {}).get("encoder"), dict):
        return
    model = MODELS.validate(cfg["model"], "model")  # (with the blocks' defaults)
    encoder = model["encoder"]
    attention = encoder.get("attention")
    width = encoder.get("d_model") or model.get("embed_dim")
    if isinstance(attention, dict) and "heads" in attention and isinstance(width, int):
        check_heads(attention["name"], width, attention["heads"], attention.get("head_dim"),
                    at="model.encoder.attention", size="model.encoder.d_model, else model.embed_dim")
    positional = encoder.get("positional")
    if isinstance(positional, dict) and positional.get("max_len"):
        longest = (DATA.ask(cfg["data"], "longest_source_positions", "data")
                   or DATA.ask(cfg["data"], "longest_positions", "data"))
        check_table_covers(positional, longest, "model.encoder.positional", " the encoder",
                           "model.encoder.positional.name=sinusoidal")


def check_model_builds(cfg: Dict[str, Any]) -> None:
    """The model is built from its config on the meta device (shapes, no memory, no data) with the
    data's stand-in context (its class's ``placeholder_context``): a config its constructor or a
    child block's refuses — heads that do not divide a width, a scorer that needs equal sizes, an
    output aggregator that does not give the classes — is refused here, before the data is read
    and before the run folder is written, rather than after. Only what depends on the config alone
    is found: the stand-in sizes are chosen to pass every check that compares real ones (both
    vocabularies the same size), and a data module without stand-ins (its sizes are in its files)
    skips this. An error the meta device itself raises leaves the decision to the real build."""
    context = DATA.ask(cfg["data"], "placeholder_context", "data")
    if context is None:
        return
    model_cfg = dict(cfg["model"])
    if model_cfg.get("init_from"):  # the weights are not the question here: no file is read
        model_cfg["init_from"] = None
    try:
        with torch.device("meta"):
            MODELS.build(model_cfg, path="model", **context)
    except ConfigError:
        raise
    except ValueError as err:  # a block's own refusal of its fields (its message names them)
        raise ConfigError(str(err)) from None
    except Exception:  # noqa: BLE001 — an operation the meta device lacks, not the config's fault
        return


def check_composition(cfg: Dict[str, Any]) -> None:
    """Data, model and task fit together (by their ``interface``), and an explicit checkpoint or
    early-stopping ``monitor`` is a metric the task logs; before any data is made."""
    picked = [(group, cfg[group]["name"], reg) for group, reg in
              (("data", DATA), ("model", MODELS), ("task", TASKS))]
    _check_encoder_kinds(cfg["model"])
    _check_own_encoder(cfg)
    for group, name, reg in picked:  # composite blocks (multitask): their parts fit, first
        check = getattr(reg.get(name), "check_config", None)
        if check is not None:
            check(cfg)
    ifaces = [(group, name, _interface(reg.get(name), cfg[group])) for group, name, reg in picked]
    declared = [i for _, _, i in ifaces if i]
    if len(set(declared)) > 1:
        ref = ifaces[0][2] or declared[0]  # what the data gives, if it says
        fits = {i: {g: [n for n in reg.names() if _works_on(reg.get(n), i)]
                    for g, _, reg in picked} for i in set(declared)}

        def works_on(i):
            return (f"{INTERFACES.get(i, i)} (data {', '.join(fits[i]['data']) or '-'}; models "
                    f"{', '.join(fits[i]['model']) or '-'}; tasks {', '.join(fits[i]['task']) or '-'})")

        (dg, dn, di), *others = ifaces
        lines = [f"{g} '{n}' works on {works_on(i)}" for g, n, i in others if i and i != ref]
        lines.append(f"data '{dn}' gives {works_on(di)}" if di else
                     f"the rest works on {works_on(ref)}")
        raise ConfigError(f"data '{dn}', model '{ifaces[1][1]}' and task '{ifaces[2][1]}' do not fit "
                          f"together: " + "; ".join(lines))
    task = TASKS.get(cfg["task"]["name"])
    for key in ("checkpoint", "early_stopping"):
        entry = (cfg.get("callbacks") or {}).get(key)
        if not isinstance(entry, dict):
            continue
        monitor = entry.get("monitor")
        metrics = getattr(task, "metrics", None)
        if monitor is None or not metrics:
            continue
        names = metric_names(task, cfg)
        if monitor not in names:
            raise ConfigError(
                f"callbacks.{key}.monitor '{monitor}' is not a metric that task '{cfg['task']['name']}' "
                f"logs; it logs {', '.join(names)} (null: its default, {task.monitor})."
                f"{_suggest(monitor, names)}")


def metric_names(task: Any, cfg: Dict[str, Any], splits=("train", "val")) -> List[str]:
    """``<split>/<metric>`` that task class ``task`` logs with this config: its
    ``metric_names_of(task config)`` (a conditional metric, e.g. ``penalty``, only where its weight
    is set; multitask: its tasks'), else its class's."""
    of = getattr(task, "metric_names_of", None)
    return of(cfg["task"], splits) if of is not None else task.metric_names(splits)


def _with_task_monitor(entry: Dict[str, Any], task: Any) -> Dict[str, Any]:
    """``entry`` (checkpoint or early-stopping fields) with ``monitor``/``mode`` taken from the
    task where null: its checkpoint metric, and the mode of the monitored metric."""
    entry = dict(entry)
    if task is None:
        return {k: v for k, v in entry.items() if not (k in ("monitor", "mode") and v is None)}
    if entry.get("monitor") is None:
        entry["monitor"] = task.monitor
    if entry.get("mode") is None:
        metric = entry["monitor"].split("/", 1)[-1]
        entry["mode"] = (task.monitor_mode if entry["monitor"] == task.monitor
                         else getattr(task, "metrics", {}).get(metric, "min"))
    return entry


def build_callbacks(cfg: Dict[str, Any], run_dir: Path, task: Any = None) -> List[pl.Callback]:
    """The callbacks of ``cfg`` (the ``callbacks`` config); a checkpoint or early-stopping entry
    without ``monitor``/``mode`` monitors the ``task``'s metric (``Task.monitor``; a task class,
    or the built task, whose ``metrics`` give the mode of a metric its config adds)."""
    out: List[pl.Callback] = [StopOnNonFiniteLoss()]
    ck = cfg.get("checkpoint")  # (an entry of {}: its fields' defaults, not "off"; only null is off)
    if ck is not None:
        ck = dict(ck)
        save_last = ck.pop("save_last", True)
        out.append(training_state.RunCheckpoint(
            dirpath=run_dir / "checkpoints", filename="epoch{epoch}-step{step}",
            auto_insert_metric_name=False, **_with_task_monitor(ck, task)))
        if save_last:  # Lightning writes last.ckpt only when a top-k checkpoint was written: a
            # second, unmonitored callback keeps last.ckpt the state after every epoch
            out.append(training_state.LastCheckpoint(run_dir))  # … and at the end of training
    es = cfg.get("early_stopping")
    if es is not None:
        out.append(EarlyStopping(**_with_task_monitor(es, task)))
    maps = cfg.get("attention_maps")
    if maps is not None:
        out.append(AttentionMaps(run_dir / "attention", **maps))
    bar = progress_bar(cfg.get("progress_bar", "auto"))  # auto: rich on a terminal, else text lines
    if bar is not None:
        out.append(bar)
    if cfg.get("lr_monitor"):
        out.append(LearningRateMonitor(logging_interval="step"))
    ema = cfg.get("ema")
    if ema is not None:  # ({}: the defaults) before callbacks.average, which keeps what it validates
        out.append(ExponentialMovingAverage(**ema))
    avg = cfg.get("average")
    if avg is not None:  # best N by the checkpoint's metric (the task's) unless the entry names one
        watch = _with_task_monitor(averaging.monitor_of(avg, cfg.get("checkpoint")), task)
        out.append(averaging.CheckpointAverage(run_dir, avg.get("last"), avg.get("best"),
                                               watch.get("monitor"), watch.get("mode")))
    return out


def _write_json(path: Path, data: dict) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True))


def record_failure(run_dir: Path, reason: str) -> None:
    """A run that failed after writing its ``metrics.json`` (the metric a sweeper optimises was not
    among those it reported) says so there, as ``failed``: attnflow-report lists it as the run's
    status instead of ``ok``. Global rank 0 only, as metrics.json is written."""
    from pytorch_lightning.utilities import rank_zero_only

    path = Path(run_dir) / "metrics.json"
    if getattr(rank_zero_only, "rank", 0) == 0 and path.is_file():
        _write_json(path, {**json.loads(path.read_text()), "failed": reason})


def _metrics(results: List[dict]) -> Dict[str, float]:
    out: Dict[str, float] = {}
    for r in results or []:
        out.update({k: float(v) for k, v in r.items()})
    return out


def _choices(cfg: DictConfig) -> Dict[str, Any]:
    """Hydra's group choices of this run, when Hydra composed it (else {})."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return dict(HydraConfig.get().runtime.choices)
    if "hydra" in cfg:
        return dict(cfg.hydra.runtime.choices)
    return {}


def _sweep_job(cfg: Any) -> bool:
    """Whether this is a job of a multirun (Hydra's mode), where the sweep has been checked."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if HydraConfig.initialized():
        return HydraConfig.get().mode == RunMode.MULTIRUN
    return isinstance(cfg, DictConfig) and "hydra" in cfg and cfg.hydra.get("mode") == RunMode.MULTIRUN


def resolve_config(cfg: DictConfig | Dict[str, Any], unread: bool = True) -> Dict[str, Any]:
    """The run's resolved, validated config. A composed (unresolved) config goes through the
    shared-group contract first (:mod:`attnflow.config.groups`): groups the model does not use are
    refused when set, and left out of the result. ``unread``: refuse a field set on the command
    line that the config leaves unread (:mod:`attnflow.config.overrides`) — not in a sweep's job, nor
    in the sweep's pre-check, which weighs such settings over the jobs itself."""
    return _resolve(cfg, refuse=unread and not _sweep_job(cfg))[0]


def unread_settings(cfg: DictConfig) -> tuple:
    """(the resolved config, {key: (the override as typed, its refusal)}) of a config composed
    with Hydra's node: the typed shared groups the model does not use and the typed fields the
    config leaves unread, listed instead of refused — a sweep's pre-check refuses only those that
    no job uses (:func:`attnflow.config.sweeps.check_sweep_values`)."""
    return _resolve(cfg, refuse=False)


def _resolve(cfg: DictConfig | Dict[str, Any], refuse: bool) -> tuple:
    """:func:`resolve_config` and :func:`unread_settings`: the resolved config and the typed
    settings it leaves unused, refused (the first of them) where ``refuse``."""
    typed, found, hydra_reads = None, {}, set()
    if not isinstance(cfg, DictConfig):
        resolved = dict(cfg)
    else:
        choices, typed, hydra_reads = _choices(cfg), command_line(cfg), hydra_references(cfg)
        cfg = copy.deepcopy(cfg)
        if "hydra" in cfg:  # composed with return_hydra_config: Hydra's own node is not the run's
            with open_dict(cfg):
                del cfg["hydra"]
        drop_swapped_block_fields(cfg, typed or ())  # model.encoder.name=…: the old block's fields
        fill_default_blocks(cfg, typed or ())  # model.encoder.attention.heads=4: its default block
        consumed, groups = unused_groups(cfg, config_dir(), choices, typed_groups(typed), typed)
        if refuse and groups:
            raise ConfigError(next(iter(groups.values())))
        found = {group: (" ".join(o.lstrip("+") for o in typed or () if typed_groups([o]) == {group}),
                         message) for group, message in groups.items()}
        resolved = prune_unused(OmegaConf.to_container(cfg, resolve=True), consumed)
    try:
        validate_config(resolved)
        # a field this config leaves unread (one an interpolation reads, Hydra's too, is read)
        fields = (unread_overrides(resolved, typed, read_keys(cfg, hydra_reads))
                  if typed else {})
        if refuse and fields:
            raise ConfigError(next(iter(fields.values()))[1])
    except ConfigError as err:  # a field that takes its value from another: say which
        note = _interpolation_note(cfg, str(err)) if isinstance(cfg, DictConfig) else ""
        if not note:
            raise
        raise ConfigError(f"{err}{note}") from None
    return resolved, {**found, **fields}


def _interpolation_note(cfg: DictConfig, message: str) -> str:
    """Where the field a message names (``(at 'data.num_hops')``) is an interpolation in the
    composed config (``num_hops: ${model.layers}``), a note naming the field its value comes from:
    the user set that one, not the field the message names."""
    found = re.search(r"\(at '([\w.]+)'", message)
    if not found:
        return ""
    path = found.group(1)
    parent_path, _, key = path.rpartition(".")
    parent = (OmegaConf.select(cfg, parent_path, throw_on_resolution_failure=False)
              if parent_path else cfg)
    if (not isinstance(parent, DictConfig) or key not in parent
            or not OmegaConf.is_interpolation(parent, key)):
        return ""
    source = OmegaConf.to_container(parent, resolve=False)[key]
    return f" ({path} is {source} in this config: the value comes from there)"


def train(cfg: DictConfig | Dict[str, Any], run_dir: Path | str) -> Dict[str, Any]:
    """Validate, build, fit, evaluate; return (and write) the final metrics."""
    run_dir = Path(run_dir)
    resolved = resolve_config(cfg)
    check_devices(resolved.get("trainer"))  # the GPUs a run asks for, on this machine
    resolved.update(run_identity(cfg, resolved))  # run name/experiment/group, tags
    run_dir.mkdir(parents=True, exist_ok=True)
    # config.yaml of a new run; a resumed one keeps its own and records the resume beside it
    # (resume-<n>.yaml); the checkpoint to fit from is checked here, before any work
    fit_from = resume.start(resolved, run_dir)

    pl.seed_everything(resolved.get("seed", 1234), workers=True, verbose=False)
    matmul, found = resolved.get("float32_matmul_precision"), torch.get_float32_matmul_precision()
    if matmul:  # here, before the Trainer checks it; in ddp_spawn's processes, by the callback
        torch.set_float32_matmul_precision(matmul)
    try:
        return _train(resolved, run_dir, fit_from, matmul)
    finally:
        torch.set_float32_matmul_precision(found)


@contextlib.contextmanager
def _fit_refusals() -> Iterator[None]:
    """Around ``trainer.fit``: what Lightning refuses only once the training batches are counted
    (after the data is made and the sanity check ran; still before any step) becomes a
    :class:`ConfigError` naming the field. An int ``val_check_interval`` is a number of batches
    within an epoch, and an epoch may have fewer (``limit_train_batches`` included)."""
    try:
        yield
    except ValueError as err:
        found = re.search(r"`val_check_interval` \((\d+)\) must be less than or equal to the number "
                          r"of the training batches \((\d+)\)", str(err))
        if not found:
            raise
        asked, batches = found.groups()
        raise ConfigError(f"trainer.val_check_interval={asked} (at 'trainer.val_check_interval') is "
                          f"more than the {batches} training batches of an epoch: give at most "
                          f"{batches}, a fraction of the epoch (e.g. 0.5), or count batches across "
                          f"epochs with trainer.check_val_every_n_epoch=null") from None


def _train(resolved: Dict[str, Any], run_dir: Path, fit_from: Any, matmul: Any) -> Dict[str, Any]:
    """:func:`train` from the data module on. A :class:`ConfigError` (or ``DataError``) raised
    before the first training step carries ``before_work=True``: nothing of value was made, so
    ``attnflow-train`` may forget what the run wrote (its ``config.yaml``, tokenizers)."""
    trainer, logger, failed = None, [], True
    try:
        dm = DATA.build(resolved["data"], path="data")
        if hasattr(dm, "set_run_dir"):  # data modules that keep files with the run (tokenizers)
            dm.set_run_dir(run_dir)
        model_cfg = resolved["model"]
        if fit_from and model_cfg.get("init_from"):  # the checkpoint fitted from holds every weight:
            model_cfg = {**model_cfg, "init_from": None}  # the pretraining run is not read again
        model = MODELS.build(model_cfg, path="model", **dm.model_context())
        task = TASKS.build(resolved["task"], model, path="task", **dm.task_context())
        why = dm.missing_test() if resolved.get("test", True) and hasattr(dm, "missing_test") else None
        if why:  # (its files are read by now) the fit would run, then the test stop on it
            raise ConfigError(why)
        if hasattr(dm, "save_artifacts"):  # what prediction needs besides weights (e.g. a vocabulary)
            dm.save_artifacts(run_dir)
        task.run_config = resolved
        logger = build_loggers(resolved.get("logger"), run_dir, logger_identity(resolved))  # [] for none
        callbacks = build_callbacks(resolved.get("callbacks") or {}, run_dir, task)  # the built task:
        # its metrics' modes may depend on its config (multitask: '<task>/acc' is 'max')
        if matmul:
            callbacks.append(Float32MatmulPrecision(matmul))
        bar = (resolved.get("callbacks") or {}).get("progress_bar", "auto")
        # callbacks.checkpoint=null: no checkpoints at all (else Lightning adds a ModelCheckpoint of its own)
        checkpoints = any(isinstance(c, ModelCheckpoint) for c in callbacks)
        trainer_args, note, warn = resolve_precision(resolved.get("trainer") or {})  # auto; emulated bf16
        if note:
            (rank_zero_warn if warn else rank_zero_info)(note)
        with lightning_refusals(trainer_args):
            trainer = pl.Trainer(**trainer_args, logger=logger or False,
                                 callbacks=[*callbacks, *training_state.callbacks(run_dir)],
                                 plugins=[training_state.SafeCheckpointIO()],  # atomic, weights_only
                                 default_root_dir=str(run_dir), enable_progress_bar=bar not in ("none", None),
                                 enable_checkpointing=checkpoints)
        start = time.time()
        log_hyperparams(logger, resolved)
        with _fit_refusals():
            trainer.fit(task, datamodule=dm, ckpt_path=fit_from, weights_only=True)
        fit_time = time.time() - start
        last_epoch = dict(trainer.callback_metrics)  # the last epoch's, before the best's validation
        best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
        ckpt = best or None
        # validate and test the best checkpoint; under ddp_spawn each stage runs in new processes
        # whose CSV logger must append to what the earlier stage wrote (attnflow.training.distributed)
        continue_csv_logs(trainer)
        epochs, global_step = fit_progress(trainer, run_dir / "checkpoints")  # (ddp_spawn: from disk)
        best_of = dict(datamodule=dm, ckpt_path=ckpt, verbose=False, weights_only=True)
        averaged = averaging.finish(trainer, run_dir, best)  # callbacks.average: averaged.ckpt
        if averaged:  # the best single checkpoint's val metrics, for comparison; then the average's
            single = _metrics(trainer.validate(task, **best_of))
            continue_csv_logs(trainer)
            best_of["ckpt_path"] = ckpt = averaged["path"]
        metrics = _metrics(trainer.validate(task, **best_of))
        if resolved.get("test", True):
            continue_csv_logs(trainer)
            metrics.update(_metrics(trainer.test(task, **best_of)))
        summary = {
            "metrics": metrics,
            "best_checkpoint": best,
            "epochs": epochs,
            "global_step": global_step,
            "fit_seconds": round(fit_time, 2),
            "parameters": sum(p.numel() for p in model.parameters()),
            "precision": str(trainer.precision),  # what ran (trainer.precision=auto: the choice)
        }
        if averaged:  # best_checkpoint is the averaged one: eval/translate/predict use it
            summary.update(best_checkpoint=ckpt, best_single_checkpoint=best,
                           metrics_best_single=single, averaged_from={
                               k: averaged[k] for k in ("by", "n", "monitor", "epochs", "steps",
                                                        "scores", "files")})
        if trainer.is_global_zero:
            _write_json(run_dir / "metrics.json", summary)
            summarize_loggers(logger, summary, last_epoch)
        failed = False
        return summary
    except ConfigError as err:  # a DataError too (a missing file): was it before any step?
        err.before_work = trainer is None or (  # (ddp_spawn trains in other processes: on disk)
            trainer.global_step == 0 and not any(run_dir.rglob("*.ckpt")))
        raise
    finally:
        finish_loggers(logger, failed)  # one W&B run per job, also when training failed
