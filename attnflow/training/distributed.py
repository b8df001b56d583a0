"""Many devices and machines: what attnflow adds to Lightning's strategies.

- A Hydra multirun (``-m``) with a strategy whose ranks Lightning starts by re-running the
  command line (ddp, fsdp, deepspeed) would run the whole sweep on every rank: refused
  (:func:`check_multirun_strategy`) unless a scheduler (SLURM, torchrun, LSF) makes the processes.
- Under ddp_spawn each stage runs in new processes with a copy of the CSVLogger that never saw
  the earlier stage's rows; :func:`continue_csv_logs` makes it append to ``metrics.csv``.
"""

from __future__ import annotations

import csv
import logging
import os
from pathlib import Path
from typing import Any, Mapping, Optional

import pytorch_lightning as pl
from lightning_fabric.plugins.environments import LSFEnvironment, SLURMEnvironment, TorchElasticEnvironment
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.loggers import CSVLogger

from attnflow.config.registry import ConfigError
from attnflow.io.checkpoints import read_checkpoint
from attnflow.training.lightning_internals import restore_fit_progress
from attnflow.training.trainer_checks import lightning_errors

_SPAWNING = ("spawn", "fork", "notebook")  # start methods that make workers inside the job


def relaunches_script(strategy: Any) -> bool:
    """Whether Lightning starts the ranks of ``strategy`` (a name) by re-running the script."""
    name = strategy.lower() if isinstance(strategy, str) else ""
    if name.startswith("ddp"):
        return not any(method in name for method in _SPAWNING)
    return name.startswith(("fsdp", "deepspeed"))


def device_trainer(trainer: Mapping[str, Any]):
    """A quiet Trainer of ``trainer``'s device fields: its ``num_devices`` and ``num_nodes``."""
    fields = {k: trainer[k] for k in ("accelerator", "devices", "strategy", "num_nodes") if k in trainer}
    info = logging.getLogger("pytorch_lightning.utilities.rank_zero")  # "GPU available: …"
    level = info.level
    info.setLevel(logging.WARNING)
    try:
        with lightning_errors():
            return pl.Trainer(**fields, logger=False, enable_checkpointing=False,
                              enable_progress_bar=False, enable_model_summary=False)
    finally:
        info.setLevel(level)


def _scheduler_makes_processes() -> bool:
    """Whether SLURM, torchrun or LSF made the processes (Lightning then relaunches nothing)."""
    return any(env.detect() for env in (SLURMEnvironment, TorchElasticEnvironment, LSFEnvironment))


def check_multirun_strategy(trainer: Optional[Mapping[str, Any]], multirun: bool) -> None:
    """Refuse a multirun whose trainer relaunches the script on more than one device or node."""
    if isinstance(trainer, DictConfig):
        trainer = OmegaConf.to_container(trainer, resolve=True)
    trainer = trainer or {}
    strategy = trainer.get("strategy", "auto")
    if not multirun or not relaunches_script(strategy) or _scheduler_makes_processes():
        return
    try:
        probe = device_trainer(trainer)
    except ConfigError:  # (the run itself reports it, building its Trainer)
        return
    devices, nodes = probe.num_devices, probe.num_nodes
    if devices * nodes > 1:
        raise ConfigError(
            f"a multirun (-m) with trainer.strategy={strategy} on {devices} device(s) × {nodes} node(s) "
            f"is refused: Lightning starts the other ranks by re-running this command, so every rank "
            f"would run the whole sweep. Use trainer=ddp_spawn, or the submitit launcher (docs/sweeps.md)")


def continue_csv_logs(trainer) -> None:
    """Make each CSVLogger of ``trainer`` know the columns of the ``metrics.csv`` on disk, so a
    stage run in new processes (ddp_spawn) appends to it; within one process it knows them
    already. Called before the fit too: the writer made then fixes the version every stage uses."""
    if not trainer.is_global_zero:
        return
    for logger in trainer.loggers:
        if not isinstance(logger, CSVLogger):
            continue
        writer = logger.experiment
        path = os.path.join(logger.log_dir, "metrics.csv")
        if os.path.isfile(path):
            with open(path, newline="") as f:
                header = next(csv.reader(f), [])
            writer.metrics_keys = sorted(set(writer.metrics_keys) | set(header))


def fit_progress(trainer, checkpoint_dir) -> tuple:
    """(epochs, global_step) of the finished ``fit``. Where this process counts no step (the fit
    ran in ddp_spawn's processes, which hand back weights and metrics only), the fit loop's
    progress is loaded from the newest checkpoint the fit wrote, so that the later stages log
    at the fit's last step, as in one process."""
    if trainer.global_step > 0:
        return trainer.current_epoch, trainer.global_step
    files = sorted(Path(checkpoint_dir).glob("*.ckpt"), key=lambda p: p.stat().st_mtime)
    if not files:
        return trainer.current_epoch, trainer.global_step
    ckpt = read_checkpoint(files[-1])
    restore_fit_progress(trainer, ckpt)
    return int(ckpt.get("epoch", -1)) + 1, int(ckpt.get("global_step", 0))
