"""The loop of an Optuna sweep: ask a trial, launch its job, tell the study what it returned.

``n_jobs`` trials run at once, a new one asked as soon as one ends (no batches): with Hydra's basic
launcher in ``n_jobs`` processes of this machine (:mod:`.processes`), with another launcher (SLURM
through submitit) one launch per trial from ``n_jobs`` threads, each trial a cluster job writing the
same storage. Job number = trial number, so ``<sweep dir>/<n>/`` is trial ``n``'s run folder.

A job returns ``optimized_metric``'s value (a list: one per objective); NaN or an exception fails
its trial. A trial its pruner stopped has told the study itself (:mod:`attnflow.sweep.pruning`).
An exception ends the sweep once the running trials are told; a stopped sweep continues where it
was (:mod:`.study`).
"""

from __future__ import annotations

import logging
import math
import sys
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, List, Optional

from omegaconf import OmegaConf

from attnflow.config.registry import ConfigError
from attnflow.config.sweeps import open_storage, storage_spec
from attnflow.sweep import study as studies
from attnflow.sweep.checks import metric_directions
from attnflow.sweep.config import build
from attnflow.sweep.space import parse_space
from attnflow.training import runlock

log = logging.getLogger(__name__)

BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"


class OptunaSearch:
    """What ``hydra/sweeper=optuna`` does (its fields: :mod:`attnflow.sweep.config`)."""

    def __init__(self, sampler: Any, pruner: Any, direction: Any, storage: Optional[str],
                 study_name: Optional[str], n_trials: int, n_jobs: int, params: Any) -> None:
        self.sampler_cfg, self.pruner_cfg, self.params = sampler, pruner, params
        self.storage = storage  # (direction: read beside optimized_metric, checks.metric_directions)
        self.study_name, self.n_trials, self.n_jobs = study_name, n_trials, n_jobs

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        from hydra.core.plugins import Plugins

        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: List[str]) -> None:
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        try:
            runlock.hold(sweep_dir, "one sweep runs a study at a time; wait for it to end (the "
                                    "same command continues a stopped sweep)")
            try:
                OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
                self._sweep(arguments, sweep_dir)
            finally:
                runlock.release(sweep_dir)
        except ConfigError as err:  # attnflow-train's one line, exit 2 (not Hydra's report)
            print(f"attnflow: {'config error: ' if type(err) is ConfigError else ''}{err}", file=sys.stderr)
            sys.exit(2)

    def _sweep(self, arguments: List[str], sweep_dir: Path) -> None:
        space = parse_space(self.params, arguments)
        self.directions = metric_directions(self.config)
        study = self.open_study(space, sweep_dir)
        for t in studies.cut_off(study):
            log.info(f"Trial {t.number} was cut off when the sweep stopped: it runs again")
        done = studies.finished(study)
        wanted = min(self.n_trials, self.grid_points or self.n_trials)
        log.info(f"Study {study.study_name!r} in {self.spec}: {done} trials finished, "
                 f"{max(0, wanted - done)} to run ({self.n_jobs} at a time)")
        self._run(study, space, max(0, wanted - done))
        _save_results(study, sweep_dir / "optimization_results.yaml")

    def open_study(self, space: Any, sweep_dir: Path) -> Any:
        """The study in its storage (made if new), with its sampler and pruner."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.spec = storage_spec(self.storage, sweep_dir)
        storage = open_storage(self.spec)
        name = studies.study_name(self.study_name, self.config.hydra)
        known = {s.study_name: s for s in optuna.get_all_study_summaries(storage)}
        kept = [d.name.lower() for d in known[name].directions] if name in known else None
        if kept and kept != self.directions:
            raise ConfigError(f"study {name!r} in {self.spec} seeks {', '.join(kept)}, but "
                              f"hydra.sweeper.direction={','.join(self.directions)}")
        fields = {}
        if "seed" in self.sampler_cfg and self.sampler_cfg.seed is not None and name in known:
            fields["seed"] = self.sampler_cfg.seed + known[name].n_trials  # else it repeats itself
        self.grid_points = None
        if "search_space" in self.sampler_cfg and self.sampler_cfg.search_space is None:
            fields["search_space"] = space.grid()  # (a grid sampler: every combination once)
            self.grid_points = math.prod(len(v) for v in fields["search_space"].values())
        sampler = build(self.sampler_cfg, "hydra.sweeper.sampler", **fields)
        pruner = build(self.pruner_cfg, "hydra.sweeper.pruner") if self.pruner_cfg else None
        return optuna.create_study(storage=storage, sampler=sampler, pruner=pruner, study_name=name,
                                   directions=self.directions, load_if_exists=True)

    def _run(self, study: Any, space: Any, todo: int) -> None:
        """``todo`` trials, ``n_jobs`` at a time; the first exception raised once all are told."""
        runner = self._runner()
        pending: dict = {}
        asked, failure = 0, None
        try:
            while pending or (asked < todo and failure is None):
                while len(pending) < self.n_jobs and asked < todo and failure is None:
                    trial = study.ask(space.distributions)
                    pending[runner(trial.number, space.overrides(trial.params))] = trial
                    asked += 1
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    failure = _tell(study, pending.pop(future), future) or failure
        finally:
            runner.close()
        if failure is not None:
            raise failure

    def _runner(self) -> Any:
        """(trial number, overrides) → a future of the job's ``JobReturn``."""
        if self.n_jobs > 1 and self.config.hydra.launcher._target_ == BASIC_LAUNCHER:
            from attnflow.sweep.processes import JobProcesses

            return JobProcesses(self.n_jobs, self.hydra_context, self.config, self.task_function)
        return Launches(self.launcher, self.n_jobs)


class Launches:
    """Each trial one ``launcher.launch``: here and now with one job at a time, else from one of
    ``n_jobs`` threads (the launcher runs the job elsewhere, e.g. as a SLURM job)."""

    def __init__(self, launcher: Any, n_jobs: int) -> None:
        self.launcher = launcher
        self.pool = ThreadPoolExecutor(n_jobs) if n_jobs > 1 else None

    def launch(self, number: int, overrides: List[str]) -> Any:
        return self.launcher.launch([overrides], initial_job_idx=number)[0]

    def __call__(self, number: int, overrides: List[str]) -> Future:
        if self.pool is not None:
            return self.pool.submit(self.launch, number, overrides)
        future: Future = Future()
        try:
            future.set_result(self.launch(number, overrides))
        except Exception as err:  # noqa: BLE001  (told as the trial's failure)
            future.set_exception(err)
        return future

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def _tell(study: Any, trial: Any, future: Future) -> Optional[BaseException]:
    """Tell the study what trial's job returned; the exception that failed it, if one did."""
    import optuna
    from hydra.core.utils import JobStatus

    failure, values = None, None
    try:
        ret = future.result()
    except Exception as err:  # noqa: BLE001  (the launcher's: e.g. sbatch refused the job)
        study.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
        return err
    if ret.status == JobStatus.COMPLETED:
        value = ret.return_value
        values = [float(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
    else:
        try:
            ret.return_value  # (raises what failed the job)
        except Exception as err:  # noqa: BLE001  (the job's, whatever it was)
            failure = err
    bad = values is None or any(math.isnan(v) for v in values)
    try:
        study.tell(trial, None if bad else values, state=optuna.trial.TrialState.FAIL if bad else None,
                   skip_if_finished=True)
    except RuntimeError:  # a grid sampler's last point: its study.stop() works in optimize() only
        if not getattr(study.sampler, "is_exhausted", lambda s: False)(study):
            raise  # (the trial is stored either way: Optuna's tell stores it in a finally)
    frozen = study.get_trials(deepcopy=False)[trial.number]
    value = ", ".join(f"{v:.6g}" for v in frozen.values or [])
    log.info(f"Trial {frozen.number}: {frozen.state.name.lower()}" + (f" ({value})" if value else ""))
    return failure


def _save_results(study: Any, path: Path) -> None:
    """``optimization_results.yaml``: the best trial's parameters and value (each Pareto-optimal
    trial's, with several objectives)."""
    import optuna

    if not study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        return
    if len(study.directions) == 1:
        best = study.best_trial
        out = {"name": "optuna", "best_trial": best.number, "best_params": best.params,
               "best_value": best.value}
    else:
        out = {"name": "optuna", "solutions": [{"trial": t.number, "params": t.params, "values": t.values}
                                               for t in study.best_trials]}
    OmegaConf.save(OmegaConf.create(out), path)
