"""The ``trainer`` entry: the Trainer's arguments less those attnflow sets, scalar values
converted by the Trainer's annotations; the rest Lightning checks when the run builds its
Trainer, before the data. And the settings a run config leaves unread."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import traceback
import typing
from typing import Any, Dict, Iterator, Optional

from pytorch_lightning import Trainer
from pytorch_lightning.utilities.exceptions import MisconfigurationException
from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

from attnflow.config.registry import ConfigError, suggest, type_name
from attnflow.config.secrets import leaves
from attnflow.training import resume
from attnflow.viz.panels import Dashboard

# Trainer arguments attnflow sets itself (from other config entries), so not trainer.* fields.
SET_BY_ATTNFLOW = ("logger", "callbacks", "default_root_dir", "enable_progress_bar", "enable_checkpointing",
                   "plugins", "barebones")
# trainer.* fields attnflow adds to the Trainer's arguments (taken out before it is built).
ATTNFLOW_FIELDS = {"compile": bool}  # the task's model through torch.compile (CompiledModel)


@functools.lru_cache(maxsize=1)
def _schema() -> type:
    """A structured config of the Trainer's arguments and attnflow's (every field required, so
    MISSING where not given): a scalar kind where one is annotated, else Any."""
    hints, fields = typing.get_type_hints(Trainer.__init__), []
    for name in list(inspect.signature(Trainer.__init__).parameters)[1:]:  # (after self)
        hint = hints.get(name, Any)
        args = typing.get_args(hint) if typing.get_origin(hint) is typing.Union else (hint,)
        kinds = [k for k in args if k is not type(None)]
        kind = kinds[0] if len(kinds) == 1 and kinds[0] in (int, float, bool, str) else Any
        fields.append((name, Optional[kind] if len(kinds) < len(args) else kind))
    return dataclasses.make_dataclass("Trainer", fields + list(ATTNFLOW_FIELDS.items()))


def check_trainer(trainer: Dict[str, Any]) -> Dict[str, Any]:
    """``trainer`` with its keys checked and its scalar values converted, or a :class:`ConfigError`."""
    kinds = {f.name: f.type for f in dataclasses.fields(_schema())}
    for key in trainer:
        if key not in kinds or key in SET_BY_ATTNFLOW:
            raise ConfigError(
                f"trainer has no field '{key}' (at 'trainer.{key}'); fields are compile and the "
                f"arguments of lightning's Trainer except {', '.join(SET_BY_ATTNFLOW)} (set by "
                f"attnflow: logger=…, callbacks.…, callbacks.checkpoint (null: none); barebones "
                f"forbids the tasks' logging).{suggest(key, kinds)}")
    try:
        typed = OmegaConf.to_container(OmegaConf.merge(OmegaConf.structured(_schema()), trainer))
    except ValidationError as err:
        raise ConfigError(f"trainer.{err.full_key} (at 'trainer.{err.full_key}') must be "
                          f"{type_name(kinds[err.full_key])}, got {err.value!r}") from None
    return {key: typed[key] for key in trainer}


@contextlib.contextmanager
def lightning_errors(own_only: bool = False) -> Iterator[None]:
    """Lightning's refusal of its arguments (by type) as a :class:`ConfigError` of one line;
    ``own_only``: only an error raised in Lightning's own code (at the start of a fit, e.g.
    ``val_check_interval`` above the batches of an epoch), not one of a model or data module."""
    try:
        yield
    except (MisconfigurationException, ValueError, TypeError, ModuleNotFoundError) as err:
        if own_only and not raised_by_lightning(err):
            raise
        raise ConfigError(f"trainer: {' '.join(str(err).split())}") from err


def raised_by_lightning(err: BaseException) -> bool:
    """Whether ``err`` was raised in Lightning's code (the innermost frame of its traceback)."""
    frames = [frame for frame, _ in traceback.walk_tb(err.__traceback__)]
    module = frames[-1].f_globals.get("__name__", "") if frames else ""
    return module.split(".")[0] in ("pytorch_lightning", "lightning_fabric", "lightning")


def reads_no_batch(limit: Any) -> bool:
    """Whether a ``trainer.limit_<split>_batches`` value reads no batch (0 or 0.0)."""
    return isinstance(limit, (int, float)) and not isinstance(limit, bool) and limit == 0


def idle_settings(cfg: Dict[str, Any], task_cls: Any) -> Dict[str, str]:
    """{setting: why ``cfg`` leaves it unread}: one warning each; a callback so named is not built."""
    trainer, callbacks, out = cfg.get("trainer") or {}, cfg.get("callbacks") or {}, {}
    for low, high in (("min_epochs", "max_epochs"), ("min_steps", "max_steps")):
        least, most = trainer.get(low), trainer.get(high)
        if isinstance(least, int) and isinstance(most, int) and most != -1 and least > most:
            out[f"trainer.{low}"] = f"trainer.{low}={least} is unread: the run ends at trainer.{high}={most}"
    limit = trainer.get("limit_test_batches")
    if cfg.get("test", True) and reads_no_batch(limit) and not trainer.get("fast_dev_run"):
        out["test"] = f"test=true is unread: trainer.limit_test_batches={limit} tests no batch"
    if callbacks.get("lr_monitor") and not set(cfg.get("logger") or {}) - {"none"}:
        out["callbacks.lr_monitor"] = "callbacks.lr_monitor is unread: logger=none gives it no logger"
    val, every = trainer.get("limit_val_batches"), trainer.get("check_val_every_n_epoch")
    late = not cfg.get("resume") and resume.next_validation(trainer) is not None
    if late:
        out["trainer.check_val_every_n_epoch"] = (
            f"trainer.check_val_every_n_epoch={every} is unread: the run ends at trainer.max_epochs="
            f"{trainer['max_epochs']}, before its first validation (no best checkpoint is chosen)")
    off = (f"trainer.limit_val_batches={val} validates nothing" if reads_no_batch(val)
           and not trainer.get("fast_dev_run") else "no epoch is validated" if late else None)
    stop = callbacks.get("early_stopping")
    if off and stop is not None and (stop.get("monitor") or task_cls.monitor).startswith("val/"):
        out["callbacks.early_stopping"] = f"callbacks.early_stopping is unread: {off}"
    if off and callbacks.get("average") is not None:
        out["callbacks.average"] = f"callbacks.average is unread (it averages validated epochs): {off}"
    if callbacks.get("attention_maps") is not None and not issubclass(task_cls, Dashboard):
        out["callbacks.attention_maps"] = (f"callbacks.attention_maps is unread: task "
                                           f"'{task_cls.registry_name}' draws no pictures of its examples")
    ema, steps = callbacks.get("ema"), trainer.get("max_steps")
    if ema is not None and isinstance(steps, int) and 0 < steps < (ema.get("start_step") or 0):
        out["callbacks.ema"] = f"callbacks.ema is unread: its start_step comes after trainer.max_steps={steps}"
    return out


def asks_for_flex(cfg: Any) -> bool:
    """Whether a block of a resolved config sets ``backend: flex``."""
    return any(key.rpartition(".")[2] == "backend" and value == "flex" for key, value in leaves(cfg))


def refuse_flex_without_backward(model_cfg: Dict[str, Any], trainer: Trainer) -> None:
    """ConfigError when a block asks for FlexAttention where it has no backward: the CPU in
    torch 2.13."""
    if trainer.strategy.root_device.type == "cpu" and asks_for_flex(model_cfg):
        raise ConfigError("attention.backend=flex trains only on a GPU: FlexAttention has no "
                          "backward on the CPU; use backend=auto (flex on CUDA, else SDPA or "
                          "explicit) or explicit")
