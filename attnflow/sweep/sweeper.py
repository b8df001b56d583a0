"""attnflow's Optuna sweeper: the study opened (made if new) in its storage with its sampler,
pruner, directions and metric names, then filled by this worker's :class:`~.loop.TrialLoop`.

``n_jobs`` trials run at once: with Hydra's basic launcher each in a fresh process of this machine
(:mod:`.processes`; one trial runs in this process), with another launcher (SLURM through submitit)
one launch per trial from ``n_jobs`` threads, each trial a cluster job writing the same storage.
Job number = trial number, so ``<sweep dir>/<n>/`` is trial ``n``'s run folder (a trial that
resumes an interrupted one runs in that one's folder: the study's ``run_dir`` says where).
"""

from __future__ import annotations

import logging
import math
import shlex
import sys
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, List, Optional

import optuna
from hydra.core.plugins import Plugins
from omegaconf import OmegaConf
from optuna.exceptions import ExperimentalWarning

from attnflow.config.hydra_internals import BASIC_LAUNCHER
from attnflow.config.registry import ConfigError
from attnflow.config.secrets import mask_url
from attnflow.io.console import hydra_value
from attnflow.sweep import liveness, study as studies
from attnflow.sweep.checks import metric_directions
from attnflow.sweep.config import build
from attnflow.sweep.loop import Runner, TrialLoop
from attnflow.sweep.space import parse_space
from attnflow.sweep.storage import open_storage, storage_spec
from attnflow.training import runlock
from attnflow.training.preemption import Interrupted

log = logging.getLogger(__name__)


class OptunaSearch:
    """What ``hydra/sweeper=optuna`` does (its fields: :mod:`attnflow.sweep.config`)."""

    def __init__(self, sampler: Any, pruner: Any, direction: Any, storage: Optional[str],
                 study_name: Optional[str], n_trials: int, n_jobs: int, params: Any,
                 max_failure_rate: float = 1.0, heartbeat_interval: int = 60,
                 grace_period: int = 180, search_space: Any = None,
                 custom_search_space: Any = None) -> None:
        self.sampler_cfg, self.pruner_cfg, self.params = sampler, pruner, params
        self.storage = storage  # (direction: read beside optimized_metric, checks.metric_directions)
        self.study_name, self.n_trials, self.n_jobs = study_name, n_trials, n_jobs
        self.max_failure_rate = max_failure_rate  # (search_space, custom_search_space: refused
        self.heartbeat_interval, self.grace_period = heartbeat_interval, grace_period  # by checks)

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: List[str]) -> None:
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        try:
            runlock.hold(sweep_dir, "one sweep runs in a folder at a time; wait for it to end (the "
                                    "same command continues a stopped sweep), or give this one "
                                    "a hydra.sweep.dir of its own")  # (attnflow-train: held already)
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
        self.sweep_dir, self.worker = sweep_dir, str(sweep_dir.resolve())
        self.command = continue_command(self.config, sweep_dir)
        study = self.open_study(space, sweep_dir)
        for t in studies.own_leftovers(self.storage_obj, study, self.worker):
            log.info(f"Trial {t.number} was cut off when this sweep stopped: it runs again")
        wanted = min(self.n_trials, self.grid_points or self.n_trials)
        trials = study.get_trials(deepcopy=False)
        done = sum(t.state.is_finished() for t in studies.counted(trials))
        log.info(f"Study {study.study_name!r} in {mask_url(self.spec)}: {done} of {wanted} trials "
                 f"finished ({self.n_jobs} at a time here)")
        loop = TrialLoop(self, study, self.storage_obj, space, self._runner(study), wanted)
        try:
            loop.run()
        except Interrupted:
            _save_results(study, sweep_dir / "optimization_results.yaml")
            print(f"attnflow: the sweep stopped; continue the study with:\n  {self.command}",
                  file=sys.stderr, flush=True)
            raise
        _save_results(study, sweep_dir / "optimization_results.yaml")
        if loop.over_budget:
            print(f"attnflow: {loop.over_budget}", file=sys.stderr, flush=True)
            sys.exit(1)

    def open_study(self, space: Any, sweep_dir: Path) -> Any:
        """The study in its storage (made if new), with its sampler and pruner."""
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.spec = storage_spec(self.storage, sweep_dir)
        _quiet_optuna_notes()
        self.storage_obj = storage = open_storage(
            self.spec, (self.heartbeat_interval, self.grace_period), liveness.on_stale)
        name = studies.study_name(self.study_name, self.config.hydra)
        known = {s.study_name: s for s in optuna.get_all_study_summaries(storage)}
        kept = [d.name.lower() for d in known[name].directions] if name in known else None
        if kept and kept != self.directions:
            raise ConfigError(f"study {name!r} in {mask_url(self.spec)} seeks {', '.join(kept)}, but "
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
        study = optuna.create_study(storage=storage, sampler=sampler, pruner=pruner, study_name=name,
                                    directions=self.directions, load_if_exists=True)
        metrics = self.config.optimized_metric
        study.set_metric_names(list(metrics) if OmegaConf.is_list(metrics) else [str(metrics)])
        return study

    def _runner(self, study: Any) -> Any:
        """(trial number, overrides) → a future of the job's ``JobReturn``."""
        if self.n_jobs > 1 and self.config.hydra.launcher._target_ == BASIC_LAUNCHER:
            from attnflow.sweep.processes import TrialProcesses

            return TrialProcesses(self.n_jobs, self.hydra_context, self.config, self.task_function,
                                  (self.spec, study.study_name))
        return Launches(self.launcher, self.n_jobs)


def _quiet_optuna_notes() -> None:
    """Optuna's notes that the heartbeat and metric names are used as documented, outside its
    own ``optimize`` loop: not for the user."""
    warnings.filterwarnings("ignore", category=ExperimentalWarning,
                            message=r".*(set_metric_names|fail_stale_trials|heartbeat_interval|grace_period)")
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")


def continue_command(config: Any, sweep_dir: Path) -> str:
    """The command that continues this worker's part of the study: the sweep's own overrides,
    its folder named, pasteable into a shell."""
    hydra = [o for o in config.hydra.overrides.hydra if not str(o).startswith("hydra.sweep.dir=")]
    return shlex.join(["attnflow-train", "-m", *map(str, hydra), *map(str, config.hydra.overrides.task),
                       f"hydra.sweep.dir={hydra_value(str(sweep_dir))}"])



class Launches(Runner):
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
        self.running = True
        try:
            future.set_result(self.launch(number, overrides))
        except (Exception, Interrupted) as err:  # noqa: BLE001  (told as the trial's end)
            future.set_exception(err)
        finally:
            self.running = False
        return future

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def _save_results(study: Any, path: Path) -> None:
    """``optimization_results.yaml``: the best trial's parameters and value (each Pareto-optimal
    trial's, with several objectives)."""
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
