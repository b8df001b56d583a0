"""Lightning's internals that attnflow reads, in one place, checked against pytorch-lightning
2.6.6 (lightning-fabric 2.6.6); ``tests/test_library_internals.py`` checks each on the installed
version. Lightning has no public API for any of them:

- ``ModelCheckpoint._last_global_step_saved``: the step its last save was at. Its hooks save no
  second file at that step; :class:`attnflow.training.state.LastCheckpoint` saves outside them.
- The fit loop's state in a checkpoint (``loops`` → ``fit_loop``): its epoch counters tell an
  epoch-end checkpoint, and one written at the end of an unvalidated epoch is rewritten as the
  next epoch's start (:func:`finish_epoch`).
- ``WeightAveraging.state_dict()``'s ``latest_update_step``: the step of the last average.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional

if TYPE_CHECKING:  # (only: attnflow-train reads checkpoints before Lightning's seconds-long import)
    import pytorch_lightning as pl
    from pytorch_lightning.callbacks import ModelCheckpoint, WeightAveraging


def last_saved_step(callback: ModelCheckpoint) -> int:
    """The global step ``callback`` saved its last file at (0 before any)."""
    return int(callback._last_global_step_saved)


def mark_saved(callback: ModelCheckpoint, step: int) -> None:
    """Note a file of ``callback`` saved at ``step`` outside its own hooks, so that they save
    none again at that step."""
    callback._last_global_step_saved = step


def fit_loop_state(ckpt: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """A checkpoint's fit loop state (in place: changes to it change the checkpoint), or None."""
    return (ckpt.get("loops") or {}).get("fit_loop") or None


def epoch_counts(ckpt: Mapping[str, Any]) -> Dict[str, Any]:
    """A checkpoint's epoch counters over the whole fit: ``ready``, ``started``, ``processed``
    (trained) and ``completed`` (their end hooks done); {} where it has none."""
    return ((fit_loop_state(ckpt) or {}).get("epoch_progress") or {}).get("total") or {}


def restore_fit_progress(trainer: pl.Trainer, ckpt: Mapping[str, Any]) -> None:
    """The fit's counters (epochs, steps) of ``ckpt`` into ``trainer``'s fit loop, where it has them."""
    fit = fit_loop_state(ckpt)
    if fit is not None:
        trainer.fit_loop.load_state_dict(fit)


def finish_epoch(fit: Optional[Dict[str, Any]], batches: float) -> None:
    """The fit loop state of a checkpoint written at the end of an unvalidated epoch, in place,
    as the next epoch's start (Lightning would resume a step-limited run within the old epoch
    and train one more batch of it)."""
    if not fit:
        return
    epochs, progress = fit["epoch_progress"], fit["epoch_loop.batch_progress"]
    current = epochs["current"]
    at_end = (current["ready"] == current["processed"]
              and current["completed"] in (current["processed"] - 1, current["processed"])
              and progress["current"]["completed"] >= batches)
    if not at_end:
        return
    for counts in epochs.values():
        counts["completed"] = counts["processed"]
    optim = fit["epoch_loop.automatic_optimization.optim_progress"]["optimizer"]
    for current in (progress["current"], fit["epoch_loop.scheduler_progress"]["current"],
                    optim["step"]["current"], optim["zero_grad"]["current"],
                    fit["epoch_loop.val_loop.batch_progress"]["total"]):
        current.update(dict.fromkeys(current, 0))
    progress["is_last_batch"] = False


def last_average_step(callback: WeightAveraging) -> int:
    """The global step of ``callback``'s last update of the average (0: none yet)."""
    return int(callback.state_dict()["latest_update_step"])
