"""Live and dead trials told apart. Each trial's own process beats while it runs, every
``heartbeat_interval`` seconds: Optuna's heartbeat on an RDB storage (SQLite, PostgreSQL, …), a
lease (the time of the last beat, in the trial's system attribute ``attnflow:lease``) on a journal
file. A running trial silent for ``grace_period`` seconds belongs to a process or machine that is
gone: any worker of the study fails it and queues it again (:func:`attnflow.sweep.study.interrupt`),
once (the storage lets one process end a trial).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import RDBStorage

from attnflow.sweep import study as studies

LEASE = "attnflow:lease"
LOST = "no heartbeat for {} s: its process or machine was lost"


def has_heartbeat(storage: Any) -> bool:
    """Whether ``storage`` keeps Optuna's heartbeats (an RDB storage)."""
    return isinstance(storage, RDBStorage)


def beat(storage: Any, trial_id: int) -> None:
    """One heartbeat of a running trial."""
    if has_heartbeat(storage):
        storage.record_heartbeat(trial_id)
    else:
        storage.set_trial_system_attr(trial_id, LEASE, time.time())


class Beating:
    """A thread that beats for ``trial_id`` every ``interval`` seconds until :meth:`stop`."""

    def __init__(self, storage: Any, trial_id: int, interval: float) -> None:
        self.storage, self.trial_id, self.interval = storage, trial_id, interval
        self._done = threading.Event()
        beat(storage, trial_id)
        self._thread = threading.Thread(target=self._run, name="attnflow-heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(self.interval):
            try:
                beat(self.storage, self.trial_id)
            except UpdateFinishedTrialError:  # (ended: by this process, or failed as lost)
                return
            except Exception:  # noqa: BLE001  (a storage hiccup: the next beat tries again)
                continue

    def stop(self) -> None:
        self._done.set()


def reap(storage: Any, study: Any, grace: float) -> list:
    """Fail and queue again the study's running trials silent for ``grace`` seconds: the
    trials failed here."""
    if has_heartbeat(storage):
        if storage.get_heartbeat_stale_trial_callback() is None:  # (open_storage sets it)
            return []
        before = {t.number for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))}
        optuna.storages.fail_stale_trials(study)
        trials = study.get_trials(deepcopy=False)
        redone = studies.taken_up(trials)
        return [trials[n] for n in before if trials[n].state.name == "FAIL" and n in redone]
    now = time.time()
    stale = [t for t in study.get_trials(deepcopy=False) if t.state.name == "RUNNING"
             and now - float(t.system_attrs.get(LEASE, now)) > grace]
    return [t for t in stale if studies.interrupt(storage, study, t.number, LOST.format(int(grace)))]


def on_stale(study: Any, trial: Any) -> None:
    """Optuna's callback for a trial that its heartbeat check failed: queue it again."""
    studies.retry(study, trial)
