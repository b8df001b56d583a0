"""The study a sweep fills, shared by any number of workers (sweep commands, each with its own
folder) through its storage (:func:`attnflow.sweep.storage.storage_spec`: null keeps it in
``<sweep dir>/optuna.db``; a ``.journal`` path is an Optuna journal file, for shared file systems;
else an SQLAlchemy URL, e.g. ``postgresql+psycopg2://…``).

What each trial's user attributes record: ``run_dir`` (its run folder), ``worker`` (the sweep
folder that started it), ``command`` (the command that continues the study), ``pid``/``host``
(its process), ``fail_reason``, ``interrupted`` (the stop that ended it), ``retry_of`` (the
interrupted trial it takes up), ``surplus`` (asked beyond ``n_trials`` in a race, never run).

An interrupted trial (a stop signal, a worker lost) is FAIL and queued again with its parameters
as a new trial naming it in ``retry_of``; that trial resumes the first one's ``last.ckpt`` where
there is one. ``n_trials`` counts the study's trials that are finished or running, less those
taken up by a retry and the surplus ones.

Optuna (the sweep extra) is imported where it is used: every attnflow-train run imports this
module (through :mod:`.pruning`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, List, Optional, Set

from omegaconf import OmegaConf

from attnflow.sweep.plugins import RETRY_OF, RUN_DIR

class TrialFailed(RuntimeError):
    """A trial's run refused or failed (its one line): the trial is FAIL, the sweep goes on."""


WORKER, COMMAND = "worker", "command"
FAIL_REASON, INTERRUPTED, SURPLUS = "fail_reason", "interrupted", "surplus"


def study_name(name: Optional[str], hydra_cfg: Any) -> str:
    """``hydra.sweeper.study_name``; null: the ``hparams_search`` name, else ``attnflow``."""
    return name or OmegaConf.select(hydra_cfg, "runtime.choices.hparams_search") or "attnflow"


def trial_id(storage: Any, name: str, number: int) -> int:
    """The storage's id of trial ``number`` of study ``name``."""
    return storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(name), number)


def taken_up(trials: Iterable[Any]) -> Set[int]:
    """The numbers of the trials that a retry takes up."""
    return {t.user_attrs[RETRY_OF] for t in trials if RETRY_OF in t.user_attrs}


def counted(trials: List[Any]) -> List[Any]:
    """The trials that count towards ``n_trials``: finished, running or queued, and neither taken
    up by a retry nor surplus."""
    redone = taken_up(trials)
    return [t for t in trials if t.number not in redone and SURPLUS not in t.user_attrs]


def failure_rate(trials: List[Any]) -> tuple:
    """(failed, finished) among the counted trials."""
    done = [t for t in counted(trials) if t.state.is_finished()]
    return sum(t.state.name == "FAIL" for t in done), len(done)


def is_surplus(trials: List[Any], number: int, n_trials: int) -> bool:
    """Whether trial ``number``, just asked, is beyond ``n_trials``: that many counted trials were
    asked before it (workers asking at once). A retry never is: it replaces a counted trial."""
    mine = next(t for t in trials if t.number == number)
    if RETRY_OF in mine.user_attrs:
        return False
    return sum(t.number < number for t in counted(trials)) >= n_trials


def end(storage: Any, name: str, number: int, state: Any, values: Optional[list] = None,
        **attrs: Any) -> bool:
    """Record ``attrs`` on running trial ``number``, then end it in ``state``; False where
    another process ended it first."""
    from optuna.exceptions import UpdateFinishedTrialError

    tid = trial_id(storage, name, number)
    try:
        for key, value in attrs.items():
            storage.set_trial_user_attr(tid, key, value)
        return bool(storage.set_trial_state_values(tid, state, values))
    except UpdateFinishedTrialError:
        return False


def interrupt(storage: Any, study: Any, number: int, why: str) -> bool:
    """Fail running trial ``number`` as interrupted (``why``) and queue it again; False where
    another process ended it first."""
    import optuna

    if not end(storage, study.study_name, number, optuna.trial.TrialState.FAIL, **{INTERRUPTED: why}):
        return False
    retry(study, study.get_trials(deepcopy=False)[number])
    return True


def retry(study: Any, trial: Any) -> None:
    """Queue ``trial``'s parameters again as a new trial that takes it up."""
    study.enqueue_trial(trial.params, user_attrs={RETRY_OF: trial.number})


def own_leftovers(storage: Any, study: Any, worker: str) -> List[Any]:
    """Fail and queue again the trials this sweep folder's last run left running (it holds the
    folder's lock now, so no process of it runs them)."""
    left = [t for t in study.get_trials(deepcopy=False) if t.state.name == "RUNNING"
            and t.user_attrs.get(WORKER) == worker]
    return [t for t in left if interrupt(storage, study, t.number, "its sweep was stopped")]


def resumable(trials: List[Any], number: int) -> Optional[str]:
    """The run folder that trial ``number`` continues: the one of the trial it takes up, where
    that run left a ``last.ckpt`` and did not finish; else None."""
    mine = next(t for t in trials if t.number == number)
    if RETRY_OF not in mine.user_attrs:
        return None
    run = trials[mine.user_attrs[RETRY_OF]].user_attrs.get(RUN_DIR)
    if not run or not (Path(run) / "checkpoints" / "last.ckpt").is_file():
        return None
    return None if (Path(run) / "metrics.json").is_file() else run


def carry_reports(study: Any, storage: Any, number: int, upto: int) -> None:
    """Copy the reports (steps ≤ ``upto``) of the trial that trial ``number`` takes up."""
    trials = study.get_trials(deepcopy=False)
    first = trials[number].user_attrs.get(RETRY_OF)
    if first is None:
        return
    tid = trial_id(storage, study.study_name, number)
    for step, value in sorted(trials[first].intermediate_values.items()):
        if step <= upto:
            storage.set_trial_intermediate_value(tid, step, value)
