"""Checkpoint averaging: the element-wise mean of several epochs' weights, as Vaswani et al.
(2017, §6.1: the last 5 or 20 checkpoints) and Wu et al. (2021: the last 10) report.
``callbacks.average={last: N}`` averages the last N validated epochs, ``{best: N}`` the N best by
the monitored metric. Lightning's ``WeightAveraging`` keeps one running average of every update,
not a chosen set of epochs, so it does not do this.

:class:`CheckpointAverage` saves the weights (θ̄ under ``callbacks.ema``) after each validation to
``checkpoints/avg/epoch<k>.pt`` and deletes those no longer in the kept set (its state, and
``kept.json``) once a checkpoint holds the new set. After the fit :func:`finish` writes
``checkpoints/averaged.ckpt``, a copy of ``last.ckpt`` with the mean, which the run validates and
tests as its best checkpoint.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional

import pytorch_lightning as pl
from pytorch_lightning.utilities import rank_zero_warn

from attnflow.config.registry import AttnflowWarning, ConfigError, PositiveInt
from attnflow.io.checkpoints import AVERAGED, AVG_DIR, INDEX, read_index  # noqa: F401
from attnflow.io.console import warn_unread
from attnflow.io.text import write_json
from attnflow.io.weights import atomic_torch_save, average_into, remove_checkpoint
from attnflow.training.ema import averaged_weights


NEAR_FRACTION = 0.01  # validations closer than this share of an epoch's steps are one model


@dataclasses.dataclass(frozen=True)
class AverageConfig:
    """``callbacks.average`` (null: none): exactly one of ``last`` or ``best`` (by ``monitor``;
    null monitor/mode: the checkpoint's)."""

    last: Optional[PositiveInt] = None
    best: Optional[PositiveInt] = None
    monitor: Optional[str] = None
    mode: Optional[Literal["min", "max"]] = None


def check_config(callbacks: Dict[str, Any]) -> None:
    """``callbacks.average``'s rules across fields: one of ``last``/``best``, and a checkpoint."""
    entry = (callbacks or {}).get("average")
    if entry is None:
        return
    given = [k for k in ("last", "best") if entry.get(k) is not None]
    if len(given) != 1:
        raise ConfigError("callbacks.average needs exactly one of 'last' (the last N validated "
                          "epochs) or 'best' (the N best by the monitored metric), got "
                          f"{', '.join(given) or 'neither'}")
    if entry.get("last") is not None and entry.get("mode") is not None:
        warn_unread(f"callbacks.average.mode={entry['mode']}", "last keeps the last epochs, unranked")
    if callbacks.get("checkpoint") is None:
        raise ConfigError("callbacks.average needs callbacks.checkpoint (averaged.ckpt is a copy "
                          "of the run's last checkpoint with the averaged weights)")


def monitor_of(entry: Dict[str, Any], checkpoint: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """``entry``'s monitor/mode, where null the checkpoint entry's."""
    if entry.get("monitor") is not None or not isinstance(checkpoint, dict):
        return {"monitor": entry.get("monitor"), "mode": entry.get("mode")}
    return {"monitor": checkpoint.get("monitor"), "mode": entry.get("mode") or checkpoint.get("mode")}


def select_kept(entries: List[Dict[str, Any]], by: str, n: int, mode: str) -> List[Dict[str, Any]]:
    """The entries that stay: the last ``n`` epochs, or the ``n`` best scores (ties: the newer;
    a missing or NaN score counts as the worst), in epoch order."""
    if by == "last":
        keep = sorted(entries, key=lambda e: e["epoch"])[-n:]
    else:
        sign = 1.0 if mode == "max" else -1.0

        def rank(e):
            s = e.get("score")
            good = s is not None and not math.isnan(s)
            return (good, sign * s if good else 0.0, e["epoch"])

        keep = sorted(entries, key=rank, reverse=True)[:n]
    return sorted(keep, key=lambda e: e["epoch"])


class CheckpointAverage(pl.Callback):
    """Keeps on disk the weights of the epochs that can still be averaged (see the module)."""

    def __init__(self, run_dir: Path | str, last: Optional[int] = None, best: Optional[int] = None,
                 monitor: Optional[str] = None, mode: Optional[str] = None):
        self.dir = Path(run_dir) / "checkpoints" / AVG_DIR
        self.by, self.n = ("last", int(last)) if last is not None else ("best", int(best))
        self.monitor, self.mode = monitor, mode or "min"
        self.kept: List[Dict[str, Any]] = []
        self.saved: set = set()  # the files of the kept set the newest checkpoint holds

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # (after the restore: files outside the kept set were written after that checkpoint)
        if trainer.is_global_zero:
            self._prune(index=True)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero:
            self.saved = {e["file"] for e in self.kept}  # (last.ckpt holds them now)
            self._prune()

    def _prune(self, index: bool = False) -> None:
        """Delete the epoch files neither the kept set nor the newest checkpoint's names: a
        resume from that checkpoint finds every file it keeps. ``index``: then write
        ``kept.json``."""
        names = {e["file"] for e in self.kept} | self.saved
        for p in self.dir.glob("epoch*.pt") if self.dir.is_dir() else ():
            if p.name not in names:
                remove_checkpoint(p)  # (and its digest)
        if index:
            write_json(self.dir / INDEX, {"by": self.by, "n": self.n, "monitor": self.monitor,
                                          "mode": self.mode, "kept": self.kept}, indent=2)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit" or trainer.fast_dev_run:
            return
        value = trainer.callback_metrics.get(self.monitor) if self.monitor else None
        score = float(value) if value is not None else None
        if self.by == "best" and score is None:
            rank_zero_warn(f"callbacks.average: no '{self.monitor}' after the validation of epoch "
                           f"{trainer.current_epoch}; this epoch is not a candidate",
                           category=AttnflowWarning)
            return
        epoch = trainer.current_epoch
        entry = {"epoch": epoch, "step": trainer.global_step, "score": score,
                 "file": f"epoch{epoch}.pt"}
        others = [e for e in self.kept if e["epoch"] != epoch]
        gap = near_steps(trainer)
        twin = next((e for e in others if 0 <= entry["step"] - e["step"] < gap), None)
        if twin is not None:  # nearly the same weights: one of the two stays
            if self.by == "best" and select_kept([twin, entry], "best", 1, self.mode)[0] is twin:
                return
            others.remove(twin)
        candidates = others + [entry]
        keep = select_kept(candidates, self.by, self.n, self.mode)
        if trainer.is_global_zero and entry in keep:
            weights = averaged_weights(trainer) or pl_module.state_dict()
            state = {k: v.detach().cpu() for k, v in weights.items()}
            atomic_torch_save({"state_dict": state, **{k: entry[k] for k in ("epoch", "step", "score")},
                               "monitor": self.monitor}, self.dir / entry["file"])
        self.kept = keep
        if trainer.is_global_zero:
            self._prune(index=True)

    def state_dict(self) -> Dict[str, Any]:  # (called as a checkpoint is saved)
        self.saved = {e["file"] for e in self.kept}
        return {"kept": [dict(e) for e in self.kept], "by": self.by, "n": self.n}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.kept = [dict(e) for e in state_dict.get("kept") or []]
        self.saved = {e["file"] for e in self.kept}


def near_steps(trainer: pl.Trainer) -> int:
    """Optimiser steps within which two validations hold one model (``NEAR_FRACTION`` of an
    epoch's, at least 1)."""
    batches = trainer.num_training_batches
    if not math.isfinite(batches):
        return 1
    per_epoch = batches / max(1, trainer.accumulate_grad_batches)
    return max(1, math.ceil(per_epoch * NEAR_FRACTION))


def finish(trainer: pl.Trainer, run_dir: Path | str, best: str = "") -> Optional[Dict[str, Any]]:
    """After the fit: rank 0 writes ``checkpoints/averaged.ckpt``; its record (or None) is
    broadcast, so every rank decides alike."""
    record = None
    if any(isinstance(c, CheckpointAverage) for c in trainer.callbacks) and trainer.is_global_zero:
        record = write_average(Path(run_dir), best)
    return trainer.strategy.broadcast(record, src=0)


def write_average(run_dir: Path, best: str) -> Optional[Dict[str, Any]]:
    """The mean of the kept files into a copy of ``last.ckpt`` (else ``best``); its record, or
    None with a warning."""
    index = read_index(run_dir)
    avg_dir = run_dir / "checkpoints" / AVG_DIR
    kept = [e for e in (index or {}).get("kept", []) if (avg_dir / e["file"]).is_file()]
    if not kept:
        rank_zero_warn("callbacks.average: no validated epoch to average; the run is evaluated "
                       "with its best checkpoint", category=AttnflowWarning)
        return None
    last = run_dir / "checkpoints" / "last.ckpt"
    base = last if last.is_file() else Path(best) if best else None
    if base is None or not base.is_file():
        rank_zero_warn("callbacks.average: no checkpoint to copy the averaged weights into; the "
                       "run is evaluated with its best checkpoint", category=AttnflowWarning)
        return None
    return average_into(run_dir, index, kept, base, run_dir / "checkpoints" / AVERAGED)
