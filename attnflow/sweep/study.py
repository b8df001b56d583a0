"""The study a sweep fills, in its storage (:func:`attnflow.config.sweeps.storage_spec`: null keeps
it in ``<sweep dir>/optuna.db``; a ``.journal`` path is an Optuna journal file, for file systems
where sqlite locks badly, e.g. NFS; else an SQLAlchemy URL): opened by the sweeper, continued
after a stop, and reached by each trial to report its validation metric (the pruner's input).

A continued study: trials still ``RUNNING`` were cut off when the sweep stopped (one sweep runs a
study at a time: its folder's lock). Each is failed and its parameters queued again, the re-run
naming it in the user attribute ``retry_of``; ``n_trials`` counts the finished trials that were
not cut off.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from attnflow.config.sweeps import RETRY_OF, open_storage


def study_name(name: Optional[str], hydra_cfg: Any) -> str:
    """``hydra.sweeper.study_name``; null: the ``hparams_search`` name, else ``attnflow``."""
    from omegaconf import OmegaConf

    return name or OmegaConf.select(hydra_cfg, "runtime.choices.hparams_search") or "attnflow"


def cut_off(study: Any) -> List[Any]:
    """Fail the trials a stopped sweep left running and queue each again; the trials failed."""
    import optuna

    stale = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    for trial in stale:
        study.tell(trial.number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
        study.enqueue_trial(trial.params, user_attrs={RETRY_OF: trial.number})
    return stale


def finished(study: Any) -> int:
    """The trials that count towards ``n_trials``: finished, and not cut off (re-run instead)."""
    trials = study.get_trials(deepcopy=False)
    redone = {t.user_attrs[RETRY_OF] for t in trials if RETRY_OF in t.user_attrs}
    return sum(t.state.is_finished() and t.number not in redone for t in trials)


def trial_handle(spec: str, study_name: str, number: int, pruner: Any) -> Tuple[Any, Any]:
    """(study, trial) of trial ``number`` in another process than the sweeper's: its reports
    reach the storage, and ``trial.should_prune()`` asks ``pruner``."""
    import optuna

    storage = open_storage(spec)
    study = optuna.load_study(study_name=study_name, storage=storage, pruner=pruner)
    study_id = storage.get_study_id_from_name(study_name)
    trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, number)
    return study, optuna.trial.Trial(study, trial_id)
