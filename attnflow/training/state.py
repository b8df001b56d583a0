"""What a checkpoint holds beyond Lightning's for a resumed run to equal the uninterrupted one:
the global random streams (Lightning does not restore them; :func:`attnflow.data.resumable.rng_state`)
and the train loader's position within an epoch (:class:`TrainingState`), as tensors, since
checkpoints are read with ``weights_only=True``. Checkpoints are written atomically with their digests
(:class:`SafeCheckpointIO`, :mod:`attnflow.io.weights`); a signal writes ``last.ckpt`` at the next
step (:mod:`attnflow.training.preemption`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import WandbLogger
from pytorch_lightning.plugins import TorchCheckpointIO

from attnflow.data.resumable import Resumable, rng_state, set_rng_state
from attnflow.io import checkpoints
from attnflow.io.checkpoints import WANDB_ID_KEY
from attnflow.io.weights import atomic_torch_save, remove_checkpoint
from attnflow.training.lightning_internals import fit_loop_state, finish_epoch, last_saved_step, mark_saved
from attnflow.training.preemption import StopOnSignal


class SafeCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint IO with atomic writes with digests, checked ``weights_only=True``
    reads, and removals that take the digest along (a run's checkpoints are local files)."""

    def save_checkpoint(self, checkpoint: Dict[str, Any], path: Any, storage_options: Any = None) -> None:
        atomic_torch_save(checkpoint, path)

    def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: Optional[bool] = None) -> Dict[str, Any]:
        # (also a plain state dict: ddp_spawn hands the weights back so)
        return checkpoints.read_checkpoint(path, map_location if map_location is not None else "cpu",
                                           lightning=False)

    def remove_checkpoint(self, path: Any) -> None:
        remove_checkpoint(path)


class _TracksValidation(pl.Callback):
    """The global step of the last validation in fit."""

    _validated_step: int = -1

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking and trainer.state.fn == "fit":
            self._validated_step = trainer.global_step
        super().on_validation_end(trainer, pl_module)


class TrainingState(_TracksValidation):
    """Saves the random streams, the train loader's position and the W&B run id; restores the
    first two. The position is the loader's own state, which Lightning saves with the fit loop
    and restores where it makes the loader after restoring the loops; where it made it before
    (a schedule that reads ``trainer.estimated_stepping_batches`` in ``configure_optimizers``)
    it restores nothing, so the same state is kept here too and restored as training starts."""

    def __init__(self) -> None:
        self._to_restore: Optional[Dict[str, Any]] = None
        self._position: Optional[Dict[str, Any]] = None  # the loader's, from the checkpoint
        self._loader: Any = None  # the fit's resumable train loader

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._loader = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # after the loops are restored, before the loader's first batch (its iterator is lazy)
        loader = trainer.train_dataloader  # (several: none resumes mid-epoch)
        self._loader = loader if isinstance(loader, Resumable) else None
        if self._loader is not None and self._position:
            self._loader.load_state_dict(self._position)  # (Lightning's restore: the same state)
        self._position = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if self._loader is not None:  # (found as training started)
            done = batch_idx + 1
            self._loader.trained = 0 if done >= trainer.num_training_batches else done

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if self._loader is not None:
            self._loader.trained = 0

    def state_dict(self) -> Dict[str, Any]:
        loader = {} if self._loader is None else self._loader.state_dict()
        return {"rng": rng_state(), "loader": loader}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self._to_restore = state_dict.get("rng")
        self._position = state_dict.get("loader") or None

    def on_fit_start(self, trainer, pl_module) -> None:
        # after weights and callbacks are restored, before the loader's first iterator
        if self._to_restore is not None:
            set_rng_state(self._to_restore)
            self._to_restore = None

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: Dict[str, Any]) -> None:
        run_id = wandb_run_id(trainer)
        if run_id:
            checkpoint[WANDB_ID_KEY] = run_id
        if trainer.state.fn == "fit" and self._validated_step != trainer.global_step:
            finish_epoch(fit_loop_state(checkpoint), trainer.num_training_batches)


def wandb_run_id(trainer: pl.Trainer) -> Optional[str]:
    """The id of the W&B run this trainer logs to (None without a W&B logger)."""
    version = next((lg.version for lg in trainer.loggers if isinstance(lg, WandbLogger)), None)
    return str(version) if version else None


def _moved(path: Any, old: str, new: str) -> Any:
    """``path`` under ``old`` as the same name under ``new``; other values unchanged."""
    if not path:
        return path
    try:
        return str(Path(new) / Path(path).relative_to(old))
    except ValueError:
        return path


class RunCheckpoint(_TracksValidation, ModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` whose restored paths follow the run folder (moved or
    copied), forgetting files it lacks, so a run's best checkpoint is one of its own files. A
    top-k file is scored only by a validation of its own weights, and is recorded in a
    ``last.ckpt`` of the same step, so a resume chooses among it."""

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        stale = (self.monitor is not None and self.monitor.startswith("val/")
                 and self._validated_step != trainer.global_step)
        if not stale:
            self._saving_top_k(trainer, pl_module, super().on_train_epoch_end)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._saving_top_k(trainer, pl_module, super().on_validation_end)

    def _saving_top_k(self, trainer: pl.Trainer, pl_module: pl.LightningModule, save: Any) -> None:
        """``save`` (a hook); a new top-k file is recorded in this step's ``last.ckpt``."""
        before = dict(self.best_k_models)
        save(trainer, pl_module)
        if self.monitor is None or self.best_k_models == before:
            return
        for cb in trainer.checkpoint_callbacks:
            if not isinstance(cb, LastCheckpoint) or cb is self:
                continue
            path = Path(cb.dirpath) / "last.ckpt"
            if trainer.is_global_zero and 0 < trainer.global_step == last_saved_step(cb):
                ckpt = checkpoints.read_checkpoint(path)  # (written by this fit at this step)
                ckpt["callbacks"][self.state_key] = self.state_dict()
                atomic_torch_save(ckpt, path)
            trainer.strategy.barrier()

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        old, new = state_dict.get("dirpath"), self.dirpath
        if old and new and os.path.normpath(old) != os.path.normpath(new):
            mapped = {k: _moved(state_dict.get(k), old, new)
                      for k in ("best_model_path", "kth_best_model_path", "last_model_path")}
            top = {_moved(k, old, new): v for k, v in (state_dict.get("best_k_models") or {}).items()}
            state_dict = {**state_dict, "dirpath": new, **mapped, "best_k_models": top}
            if any(p and not os.path.isfile(p) for p in (*mapped.values(), *top)):
                state_dict = self._own_files(state_dict)
        super().load_state_dict(state_dict)

    def _own_files(self, state_dict: Dict[str, Any]) -> Dict[str, Any]:
        """``state_dict`` without the files this run's folder lacks."""
        top = {p: v for p, v in state_dict["best_k_models"].items() if os.path.isfile(p)}
        last = state_dict.get("last_model_path") or ""
        out = {**state_dict, "best_k_models": top, "best_model_path": "", "best_model_score": None,
               "kth_best_model_path": "", "kth_value": self.kth_value,
               "last_model_path": last if os.path.isfile(last) else ""}
        if top:  # as Lightning chooses them
            best = (min if self.mode == "min" else max)(top, key=top.get)
            out.update(best_model_path=best, best_model_score=top[best])
            if len(top) == self.save_top_k:
                kth = (max if self.mode == "min" else min)(top, key=top.get)
                out.update(kth_best_model_path=kth, kth_value=top[kth])
        return out

    @property
    def state_key(self) -> str:
        """Lightning's own (``ModelCheckpoint{…}``)."""
        key = super().state_key
        if type(self) is RunCheckpoint:
            return key.replace(RunCheckpoint.__qualname__, ModelCheckpoint.__qualname__, 1)
        return key


class LastCheckpoint(RunCheckpoint):
    """``last.ckpt``: the state after every epoch and validation, and where training stops
    within an epoch, after its last batch (a resume continues at the next one)."""

    def __init__(self, run_dir: Path | str):
        super().__init__(dirpath=Path(run_dir) / "checkpoints", filename="last", monitor=None,
                         save_top_k=1, enable_version_counter=False)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs,
                           batch, batch_idx: int) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        mid_epoch = batch_idx + 1 < trainer.num_training_batches
        stopping = (0 < trainer.max_steps <= trainer.global_step or (
            trainer.should_stop and trainer.current_epoch >= (trainer.min_epochs or 0)
            and trainer.global_step >= (trainer.min_steps or 0)))
        if mid_epoch and stopping:
            self._save_unsaved(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_end(trainer, pl_module)
        self._save_unsaved(trainer)

    def _save_unsaved(self, trainer: pl.Trainer) -> None:
        """``last.ckpt`` of this step, unless saved already (or a ``fast_dev_run``)."""
        if trainer.global_step > last_saved_step(self) and not trainer.fast_dev_run:
            trainer.save_checkpoint(Path(self.dirpath) / "last.ckpt", weights_only=False)
            mark_saved(self, trainer.global_step)


def callbacks(run_dir: Path | str, output_root: Optional[str] = None) -> List[pl.Callback]:
    """The callbacks of every run for exact resume and a stop on a signal that loses no step
    (and, in a SLURM job, requeues it: ``output_root`` holds the note that names the run)."""
    return [TrainingState(), StopOnSignal(run_dir, output_root)]
