"""A trial of an Optuna sweep, seen from its run: it beats its heartbeat while it runs
(:mod:`.liveness`), records where it runs (``run_dir``, ``pid``, ``host``, the GPUs it sees), reports
to its study after each validation, and stops when the pruner says so.

The reported value is the trial's ``optimized_metric`` (a ``val/`` metric) as that validation
logged it, at step k for the k-th validation. A pruned trial ends like an early-stopped run (its
best checkpoint evaluated, ``metrics.json`` written, the run folder kept) and is recorded as
``PRUNED`` in the study, whose value is then its last report (Optuna's rule). With several
objectives Optuna takes no reports, and the sweep prunes nothing. A trial that resumes an
interrupted one (``retry_of``) counts on from its checkpoint's validations, the reports made
before them carried over from the first trial.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path
from typing import Any, Dict, Optional

import pytorch_lightning as pl
from pytorch_lightning.trainer.states import TrainerFn

from attnflow.sweep import study as studies
from attnflow.sweep.config import build
from attnflow.sweep.plugins import RETRY_OF, is_optuna_sweeper
from attnflow.sweep.storage import open_storage, storage_spec

log = logging.getLogger(__name__)


class TrialReports(pl.Callback):
    """Trial ``number`` of ``study_name`` in ``spec`` (:func:`attnflow.sweep.storage.storage_spec`),
    run in ``run_dir``: report ``metric`` (None: no reports) of each validation; stop the fit
    when ``pruner`` prunes it."""

    def __init__(self, spec: str, study_name: str, number: int, metric: Optional[str], pruner: Any,
                 run_dir: Path | str, heartbeat_interval: float = 60) -> None:
        self.spec, self.study_name, self.number, self.metric = spec, study_name, number, metric
        self.pruner, self.run_dir, self.interval = pruner, str(Path(run_dir).resolve()), heartbeat_interval
        self.step, self.pruned_at, self.resumed_at = 0, None, None
        self._study = self._trial = self._beating = None
        self.attrs: Dict[str, Any] = {}

    def start(self) -> None:
        """Open the trial (first rank only): its heartbeat on, where it runs recorded."""
        # Optuna (the sweep extra), and liveness, which imports it, only in a trial: every run
        # imports this module (attnflow-train's trial_reports)
        import optuna

        from attnflow.sweep import liveness

        storage = open_storage(self.spec)
        self._study = optuna.load_study(study_name=self.study_name, storage=storage, pruner=self.pruner)
        tid = studies.trial_id(storage, self.study_name, self.number)
        self._trial, self._storage = optuna.trial.Trial(self._study, tid), storage
        self._beating = liveness.Beating(storage, tid, self.interval)
        here = {studies.RUN_DIR: self.run_dir, "pid": os.getpid(), "host": socket.gethostname()}
        if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
            here["cuda_visible_devices"] = os.environ["CUDA_VISIBLE_DEVICES"]
        for key, value in here.items():
            self._trial.set_user_attr(key, value)
        self.attrs = self._study.get_trials(deepcopy=False)[self.number].user_attrs

    def close(self) -> None:
        if self._beating is not None:
            self._beating.stop()

    def continue_command(self) -> Optional[str]:
        """The command that continues the study (what a stopped trial prints)."""
        return self.attrs.get(studies.COMMAND)

    def state_dict(self) -> Dict[str, Any]:
        return {"step": self.step}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.step = self.resumed_at = int(state_dict.get("step", 0))

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.resumed_at and trainer.is_global_zero and self._study is not None:
            studies.carry_reports(self._study, self._storage, self.number, self.resumed_at)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if (trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING or self.pruned_at is not None
                or self.metric is None):
            return  # (the final evaluation of the best checkpoint is no report)
        value = trainer.callback_metrics.get(self.metric)
        self.step += 1
        prune = False
        if trainer.is_global_zero and value is not None and self._trial is not None:
            self._trial.report(float(value), self.step)
            prune = self._trial.should_prune()
        if trainer.strategy.broadcast(prune, src=0):
            self.pruned_at = self.step
            trainer.should_stop = True
            log.info(f"Trial {self.number} pruned after validation {self.step} "
                     f"({self.metric}={float(value):.4g})")

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.pruned_at is not None and trainer.is_global_zero:
            import optuna

            self._study.tell(self.number, state=optuna.trial.TrialState.PRUNED, skip_if_finished=True)

    def summary_fields(self) -> Dict[str, Any]:
        """``metrics.json``'s ``trial`` (and the W&B summary's): number, state, where pruned."""
        state = {"number": self.number, "study": self.study_name,
                 "state": "pruned" if self.pruned_at is not None else "complete"}
        if RETRY_OF in self.attrs:
            state[RETRY_OF] = self.attrs[RETRY_OF]
        return {"trial": {**state, **({"pruned_at": self.pruned_at} if self.pruned_at else {})}}


def trial_reports(hydra_cfg: Any, metric: Any) -> Optional[TrialReports]:
    """The :class:`TrialReports` of this job if it is a trial of attnflow's Optuna sweeper (its
    reports: a single ``val/`` objective's), else None."""
    sweeper = hydra_cfg.sweeper
    if not is_optuna_sweeper(sweeper.get("_target_")):
        return None
    reported = metric if isinstance(metric, str) and metric.startswith("val/") else None
    pruner = build(sweeper.pruner, None) if sweeper.get("pruner") else None  # (the sweeper warned)
    return TrialReports(storage_spec(sweeper.storage, hydra_cfg.sweep.dir),
                        studies.study_name(sweeper.study_name, hydra_cfg),
                        int(hydra_cfg.job.num), reported, pruner, hydra_cfg.runtime.output_dir,
                        sweeper.get("heartbeat_interval", 60))
