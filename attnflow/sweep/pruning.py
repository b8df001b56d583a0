"""A trial of an Optuna sweep reports to its study after each validation, and stops when the pruner
says so.

The reported value is the trial's ``optimized_metric`` (a ``val/`` metric) as that validation
logged it, at step k for the k-th validation. A pruned trial ends like an early-stopped run (its
best checkpoint evaluated, ``metrics.json`` written, the run folder kept) and is recorded as
``PRUNED`` in the study, whose value is then its last report (Optuna's rule). With several
objectives Optuna takes no reports, and the sweep prunes nothing.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional

import pytorch_lightning as pl
from pytorch_lightning.trainer.states import TrainerFn

from attnflow.config.sweeps import storage_spec
from attnflow.sweep import study as studies

log = logging.getLogger(__name__)


class TrialReports(pl.Callback):
    """Report ``metric`` of each validation to trial ``number`` of ``study_name`` in ``spec``
    (:func:`attnflow.sweep.study.storage_spec`); stop the fit when ``pruner`` prunes it."""

    def __init__(self, spec: str, study_name: str, number: int, metric: str, pruner: Any) -> None:
        self.spec, self.study_name, self.number, self.metric = spec, study_name, number, metric
        self.pruner, self.step, self.pruned_at = pruner, 0, None
        self._study, self._trial = None, None

    def _handle(self):
        if self._trial is None:
            self._study, self._trial = studies.trial_handle(self.spec, self.study_name, self.number,
                                                            self.pruner)
        return self._trial

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING or self.pruned_at is not None:
            return  # (the final evaluation of the best checkpoint is no report)
        value = trainer.callback_metrics.get(self.metric)
        self.step += 1
        prune = False
        if trainer.is_global_zero and value is not None:
            trial = self._handle()
            trial.report(float(value), self.step)
            prune = trial.should_prune()
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
        return {"trial": {**state, **({"pruned_at": self.pruned_at} if self.pruned_at else {})}}


def trial_reports(hydra_cfg: Any, metric: Any) -> Optional[TrialReports]:
    """The :class:`TrialReports` of this job if it is a trial of attnflow's Optuna sweeper with a
    single ``val/`` objective, else None."""
    from attnflow.sweep.config import TARGET, build

    sweeper = hydra_cfg.sweeper
    if sweeper.get("_target_") != TARGET or not isinstance(metric, str) or not metric.startswith("val/"):
        return None
    pruner = build(sweeper.pruner, None)  # (the sweeper warned) if sweeper.get("pruner") else None
    return TrialReports(storage_spec(sweeper.storage, hydra_cfg.sweep.dir),
                        studies.study_name(sweeper.study_name, hydra_cfg),
                        int(hydra_cfg.job.num), metric, pruner)
