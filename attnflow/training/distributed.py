"""Running on many devices and machines: what attnflow adds to Lightning's strategies.

Lightning does the data parallelism (``trainer=ddp``: one process per device, gradients averaged
over ranks; DistributedSampler injected into the data loaders). What is ours around it:

- **Multirun + a script-relaunching strategy is refused.** ``strategy=ddp`` (and fsdp,
  deepspeed) starts ranks 1…N-1 by re-running the command line with ``hydra.run.dir`` pinned
  (``lightning_fabric``'s ``_hydra_subprocess_cmd``). In a Hydra multirun (``-m``) that command
  is the whole sweep, so every rank would run its own sweep — jobs that never meet in the same
  collective, i.e. a deadlock, or N sweeps. :func:`check_multirun_strategy` refuses it before any
  work, unless the processes are made by a cluster scheduler (SLURM via the submitit launcher,
  torchrun, LSF), where Lightning relaunches nothing. ``trainer=ddp_spawn`` is safe in
  sweeps: it spawns workers inside the job with ``torch.multiprocessing``.
- **ddp_spawn's CSV log is continued, not cut** (:func:`continue_csv_logs`). Under ddp_spawn each
  of ``fit``, ``validate`` and ``test`` runs in freshly spawned processes that get a copy of the
  main process's CSVLogger — which never saw what the previous stage wrote. Lightning's CSV writer
  then rewrites ``metrics.csv`` with only the new stage's columns, fails on the old rows and
  leaves the file cut to its header. Telling the logger the columns already in the file first
  makes it append as in a single process; :func:`fit_progress` reads the fit's epochs and steps
  back from its checkpoint for ``metrics.json``.
- **Evaluation counts each item once** (:func:`eval_sampler`): validation and test loaders give
  every item to exactly one rank, and the tasks reduce their metrics over ranks (``sync_dist``,
  torchmetrics, BLEU over the gathered corpus).
"""

from __future__ import annotations

import csv
import logging
import os
from pathlib import Path
from typing import Any, Mapping, Optional

from attnflow.config.registry import ConfigError
from attnflow.training.trainer_checks import lightning_errors

_SPAWNING = ("spawn", "fork", "notebook")  # start methods that make workers inside the job


def relaunches_script(strategy: Any) -> bool:
    """Whether Lightning starts the other ranks of ``strategy`` (a registry name) by re-running
    the command line (its subprocess-script launcher): ddp and its variants, fsdp, deepspeed."""
    if not isinstance(strategy, str):
        return False
    name = strategy.lower()
    if name.startswith("ddp"):
        return not any(method in name for method in _SPAWNING)
    return name.startswith(("fsdp", "deepspeed"))


def device_trainer(trainer: Mapping[str, Any]):
    """A Trainer of ``trainer``'s device fields (accelerator, devices, strategy, num_nodes), quietly:
    Lightning refuses what this machine cannot give (:func:`lightning_errors`); its
    ``num_devices`` and ``num_nodes`` are what a run of these fields uses."""
    import pytorch_lightning as pl

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
    """A cluster environment in which Lightning relaunches nothing: the processes come from srun
    (SLURM), torchrun or LSF's jsrun (Kubeflow cannot be detected)."""
    from lightning_fabric.plugins.environments import (LSFEnvironment, SLURMEnvironment,
                                                       TorchElasticEnvironment)

    return any(env.detect() for env in (SLURMEnvironment, TorchElasticEnvironment, LSFEnvironment))


def check_multirun_strategy(trainer: Optional[Mapping[str, Any]], multirun: bool) -> None:
    """Refuse a Hydra multirun whose trainer relaunches the script on more than one device or
    node (see the module docstring); a :class:`ConfigError` naming the fields and the ways out."""
    from omegaconf import DictConfig, OmegaConf

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
    if devices * nodes <= 1:
        return
    raise ConfigError(
        f"a multirun (-m) with trainer.strategy={strategy} on {devices} device(s) × {nodes} node(s) "
        f"is refused: Lightning starts the other ranks by re-running this command, so every rank "
        f"would run the whole sweep (and the jobs can deadlock). For a sweep use trainer=ddp_spawn "
        f"(workers spawned inside each job), or the submitit launcher "
        f"(hydra/launcher=slurm: one SLURM job per run, its ranks started by srun; docs/sweeps.md "
        f"\"Many devices, many machines\"), or run the jobs one by one without -m")


def _spawns_workers(trainer) -> bool:
    """Whether the trainer's strategy runs each stage in new worker processes (ddp_spawn,
    ddp_fork, ddp_notebook: Lightning's multiprocessing launcher)."""
    from pytorch_lightning.strategies.launchers.multiprocessing import _MultiProcessingLauncher

    return isinstance(getattr(trainer.strategy, "launcher", None), _MultiProcessingLauncher)


def continue_csv_logs(trainer) -> None:
    """Under ddp_spawn (or ddp_fork), make each CSVLogger of ``trainer`` append to the
    ``metrics.csv`` already on disk with its columns (see the module docstring); else nothing.
    Called before the fit too: the writer made then (in this process, while its folder is empty)
    fixes the version every stage writes to, and is never made again over a written log."""
    from pytorch_lightning.loggers import CSVLogger

    if not _spawns_workers(trainer):
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
    """(epochs, global_step) of the finished ``fit``. Under ddp_spawn the fit ran in spawned
    processes and this process's trainer still counts 0 (Lightning sends back only the weights,
    the best checkpoint's path and the callback metrics): then they are read from the newest
    checkpoint the fit wrote (``last.ckpt`` when kept, else the newest one: its epoch + 1)."""
    if not _spawns_workers(trainer) or trainer.global_step > 0:
        return trainer.current_epoch, trainer.global_step
    from attnflow.training.state import load_checkpoint_file

    files = sorted(Path(checkpoint_dir).glob("*.ckpt"), key=lambda p: p.stat().st_mtime)
    if not files:
        return trainer.current_epoch, trainer.global_step
    ckpt = load_checkpoint_file(files[-1], mmap=True)  # weights_only, naming a bad file
    return int(ckpt.get("epoch", -1)) + 1, int(ckpt.get("global_step", 0))
