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
- **A GPU the machine does not have is refused before any work** (:func:`check_devices`):
  ``trainer.accelerator=gpu`` (``trainer=gpu``) where no CUDA GPU is visible, or more
  ``trainer.devices`` than there are (or ids it lacks, or on the CPU anything but a count; the
  forms: :func:`parse_devices`), is a config error naming the fields, before the data and the
  model are made; Lightning would raise it only when the Trainer is built. Whatever else
  Lightning refuses when it builds the Trainer is reported the same way, as one message
  (:func:`lightning_refusals`).
- **Evaluation counts each item once** (:func:`eval_sampler`): validation and test loaders give
  every item to exactly one rank, and the tasks reduce their metrics over ranks (``sync_dist``,
  torchmetrics, BLEU over the gathered corpus).
"""

from __future__ import annotations

import contextlib
import csv
import os
import re
from pathlib import Path
from typing import Any, Iterator, List, Mapping, Optional, Union

from attnflow.config.registry import ConfigError

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


DEVICES_FORMS = ("auto; a count: an int >= 1, or -1 for all GPUs; GPU ids: a list such as [0,1] "
                 "or a string such as '0,1'")


def parse_devices(devices: Any, accelerator: Any = "auto",
                  shown: Optional[str] = None) -> Union[str, int, List[int]]:
    """``trainer.devices`` in one of the forms ``Trainer(devices=…)`` takes (:data:`DEVICES_FORMS`;
    on the CPU a count of processes only), as ``"auto"``, an int or a list of GPU ids; anything
    else is a :class:`ConfigError`. Lightning would refuse it only when it builds the Trainer,
    after the data and the model are made, with a bare ``TypeError``. ``shown``: the accelerator
    as the message names it (default: ``accelerator``)."""
    value = devices.strip() if isinstance(devices, str) else devices
    if isinstance(value, str) and value != "auto":
        if re.fullmatch(r"-1|\d+", value):
            value = int(value)
        elif re.fullmatch(r"\d+(\s*,\s*\d+)*\s*,?", value):  # Lightning's "0,1" (and "1,")
            value = [int(d) for d in value.split(",") if d.strip()]
    if isinstance(value, (list, tuple)):
        ids = list(value)
        good = (ids and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in ids)
                and len(set(ids)) == len(ids))
    else:
        good = value == "auto" or (isinstance(value, int) and not isinstance(value, bool)
                                   and (value >= 1 or value == -1))
    if not good:
        raise ConfigError(f"trainer.devices (at 'trainer.devices') must be {DEVICES_FORMS} "
                          f"(distinct ids), got {devices!r}")
    if str(accelerator).lower() == "cpu" and not (value == "auto" or isinstance(value, int) and value >= 1):
        raise ConfigError(f"trainer.devices={devices} with trainer.accelerator={shown or 'cpu'}: on the CPU "
                          f"trainer.devices counts processes (an int >= 1, or auto), not device ids "
                          f"or -1")
    return value


def _device_count(devices: Any, accelerator: Any) -> int:
    """How many devices per node ``Trainer(devices=…)`` asks for (``auto``/-1: all there are)."""
    devices = parse_devices(devices, accelerator)
    if isinstance(devices, list):
        return len(devices)
    if devices == "auto" or devices == -1:
        if accelerator == "cpu":
            return 1 if devices == "auto" else (os.cpu_count() or 1)
        import torch

        return max(1, torch.cuda.device_count())
    return devices


def check_devices(trainer: Optional[Mapping[str, Any]]) -> None:
    """Refuse devices this machine cannot give: a CUDA run without (enough) CUDA GPUs, GPU ids
    it does not have, or on the CPU (``accelerator`` cpu, or ``auto`` where there is no GPU) a
    ``devices`` that is not a count; a :class:`ConfigError` naming the fields and the way out.
    Checked in the process that trains (a sweep's job on a cluster's GPU node), not when a config
    is composed (e.g. on a login node that submits it)."""
    trainer = trainer or {}
    accelerator = str(trainer.get("accelerator", "auto")).lower()
    import torch

    shown = accelerator
    if accelerator == "auto" and not torch.cuda.is_available() and not has_mps():
        accelerator, shown = "cpu", "auto (the CPU: no GPU is visible here)"  # devices: a count
    devices = parse_devices(trainer.get("devices", "auto"), accelerator, shown)
    if accelerator not in ("gpu", "cuda"):
        return
    count = torch.cuda.device_count()
    if count == 0:
        build = "a CPU build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        raise ConfigError(f"trainer.accelerator={accelerator} (as trainer=gpu sets it) asks for a CUDA "
                          f"GPU, but none is visible to this process (torch {torch.__version__}, "
                          f"{build}); use trainer.accelerator=cpu, or auto (a GPU where there is one)")
    if isinstance(devices, list) and max(devices) >= count:
        raise ConfigError(f"trainer.devices={trainer['devices']} with trainer.accelerator={accelerator} "
                          f"names GPU {max(devices)}, but this machine shows {count} CUDA GPU(s), ids "
                          f"0-{count - 1}")
    if isinstance(devices, int) and devices > count:
        raise ConfigError(f"trainer.devices={devices} with trainer.accelerator={accelerator}, but this "
                          f"machine shows {count} CUDA GPU(s); use trainer.devices={count} (or -1: "
                          f"all of them)")


def has_mps() -> bool:
    """Whether Lightning's ``auto`` accelerator would pick Apple's MPS here."""
    from pytorch_lightning.accelerators import MPSAccelerator

    return MPSAccelerator.is_available()


@contextlib.contextmanager
def lightning_refusals(trainer: Mapping[str, Any]) -> Iterator[None]:
    """Around building a ``pl.Trainer`` from ``trainer``: Lightning's refusal of its settings
    (``MisconfigurationException``: an accelerator or strategy this machine lacks, devices it does
    not have …; ``ModuleNotFoundError``: a package an accelerator needs, e.g. torch_xla for
    ``tpu``) becomes a :class:`ConfigError` that names the fields, printed as one message."""
    from lightning_fabric.utilities.exceptions import MisconfigurationException

    try:
        yield
    except (MisconfigurationException, ModuleNotFoundError) as err:
        shown = ", ".join(f"trainer.{k}={trainer[k]}" for k in
                          ("accelerator", "devices", "strategy", "num_nodes", "precision") if k in trainer)
        raise ConfigError(f"Lightning refuses the trainer settings ({shown}): {err}") from err


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
    if not multirun or not relaunches_script(strategy):
        return
    try:
        devices = _device_count(trainer.get("devices", "auto"), trainer.get("accelerator", "auto"))
        nodes = int(trainer.get("num_nodes", 1) or 1)
    except (TypeError, ValueError):  # a malformed value (a ConfigError too): the trainer field checks name it
        return
    if devices * nodes <= 1 or _scheduler_makes_processes():
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

    Where this process never used the logger (the spawned ``fit`` did), its version is the newest
    one on disk (what that ``fit`` made) and its writer is made without Lightning's "delete an
    existing metrics.csv" step, so a later stage neither starts ``version_1`` nor erases the log."""
    from unittest import mock

    from lightning_fabric.loggers.csv_logs import _ExperimentWriter
    from pytorch_lightning.loggers import CSVLogger

    if not _spawns_workers(trainer):
        return
    for logger in trainer.loggers:
        if not isinstance(logger, CSVLogger):
            continue
        if logger._version is None:
            logger._version = max(0, logger._get_next_version() - 1)
        path = os.path.join(logger.log_dir, _ExperimentWriter.NAME_METRICS_FILE)
        if not os.path.isfile(path):
            continue
        if logger._experiment is None:
            with mock.patch.object(_ExperimentWriter, "_check_log_dir_exists", lambda self: None):
                logger.experiment  # noqa: B018  (creates the writer)
        with open(path, newline="") as f:
            header = next(csv.reader(f), [])
        writer = logger.experiment
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
