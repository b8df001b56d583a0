"""One worker's part of a study: ask a trial, launch its job, tell the study what it returned,
``n_jobs`` at a time, until the study's counted trials reach ``n_trials``
(:func:`attnflow.sweep.study.counted`).

Any number of workers may fill one study at once. Each asks its own trials (the storage numbers
them); none starts one once the study's finished, running and queued trials reach ``n_trials``
(one asked in a race beyond it is marked ``surplus`` and never run). While other workers' trials
run, a worker with nothing left to start keeps watching their heartbeats, so that the trial of a
worker that died is failed and run again (:mod:`.liveness`).

A trial that raises is FAIL with its reason and the sweep goes on, until more than
``max_failure_rate`` of the study's finished trials failed. SIGINT, SIGTERM or SIGUSR1 stop every
running trial after its step (``last.ckpt`` saved), which is recorded FAIL ``interrupted`` and
queued again: the next run of the command resumes it.
"""

from __future__ import annotations

import logging
import math
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any, Dict, Optional

import optuna
from hydra.core.utils import JobStatus

from attnflow.io.console import command
from attnflow.sweep import liveness, study as studies
from attnflow.sweep.space import format_value
from attnflow.training.preemption import SIGNALS, Interrupted

log = logging.getLogger("attnflow.sweep.sweeper")


class Runner:
    """What runs a worker's trials: ``runner(number, overrides)`` → a future of the job's
    ``JobReturn``. ``running``: a trial runs in this process now; ``passes_signals``: the trials
    are processes of this one, which :meth:`signal` reaches."""

    running = False
    passes_signals = False

    def __call__(self, number: int, overrides: list) -> Future:
        raise NotImplementedError

    def signal(self, signum: int) -> None:
        """Pass ``signum`` on to the running trials (where :attr:`passes_signals`)."""

    def close(self) -> None:
        """Wait for the trials still running."""


class TrialLoop:
    """The loop of one worker (:class:`attnflow.sweep.sweeper.OptunaSearch` builds it)."""

    def __init__(self, search: Any, study: Any, storage: Any, space: Any, runner: Runner,
                 wanted: int) -> None:
        self.search, self.study, self.storage, self.space = search, study, storage, space
        self.runner, self.wanted = runner, wanted
        self.pending: Dict[Future, Any] = {}
        self.beats: Dict[int, liveness.Beating] = {}
        self.stopped: Optional[int] = None  # the signal that stopped the sweep
        self.over_budget: Optional[str] = None
        self.poll = max(0.5, min(5.0, search.heartbeat_interval))

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> None:
        """Trials until the study is full (or a stop, or the failure budget): then returns, or
        raises :class:`Interrupted` once every running trial is told."""
        previous = self._install()
        next_reap = 0.0
        try:
            while True:
                if time.time() >= next_reap:
                    self._reap()
                    next_reap = time.time() + self.search.heartbeat_interval
                while self._may_start() and self._start():
                    pass
                if not self.pending and not self._wait_for_others():
                    break
                self._collect()
        finally:
            self._restore(previous)
            for beating in self.beats.values():
                beating.stop()
            self.runner.close()
        if self.stopped is not None:
            raise Interrupted(self.stopped)

    def _may_start(self) -> bool:
        if self.stopped is not None or self.over_budget or len(self.pending) >= self.search.n_jobs:
            return False
        trials = self.study.get_trials(deepcopy=False)
        return (any(t.state.name == "WAITING" for t in trials)
                or len(studies.counted(trials)) < self.wanted)

    def _wait_for_others(self) -> bool:
        """Whether to go on with nothing of ours running: other workers' trials run or wait
        (one of theirs may need taking up)."""
        if self.stopped is not None or self.over_budget:
            return False
        trials = self.study.get_trials(deepcopy=False)
        return any(t.state.name in ("RUNNING", "WAITING") for t in trials)

    def _collect(self) -> None:
        if not self.pending:
            time.sleep(self.poll)
            return
        finished, _ = wait(self.pending, timeout=self.poll, return_when=FIRST_COMPLETED)
        for future in finished:
            trial = self.pending.pop(future)
            self.beats.pop(trial.number).stop()
            self._tell(trial, future)
        if finished:
            self._check_budget()

    def _reap(self) -> None:
        for t in liveness.reap(self.storage, self.study, self.search.grace_period):
            log.info(f"Trial {t.number} lost its worker (no heartbeat for "
                     f"{self.search.grace_period} s): it runs again")

    # -- one trial -----------------------------------------------------------------------------
    def _start(self) -> bool:
        """Ask and launch one trial; False where the study filled up meanwhile."""
        trial = self.study.ask(self.space.distributions)
        trials = self.study.get_trials(deepcopy=False)
        if studies.is_surplus(trials, trial.number, self.wanted):
            studies.end(self.storage, self.study.study_name, trial.number,
                        _state("FAIL"), **{studies.SURPLUS: True})
            return False
        trial.set_user_attr(studies.WORKER, self.search.worker)
        trial.set_user_attr(studies.COMMAND, self.search.command)
        run = studies.resumable(trials, trial.number)
        overrides = self.space.overrides(trial.params)
        if run:
            log.info(f"Trial {trial.number} takes up trial {trial.user_attrs[studies.RETRY_OF]}: "
                     f"it resumes {run}")
            overrides = [*self.space.fixed, *resume_overrides(run)]
        tid = studies.trial_id(self.storage, self.study.study_name, trial.number)
        self.beats[trial.number] = liveness.Beating(self.storage, tid, self.search.heartbeat_interval)
        self.pending[self.runner(trial.number, overrides)] = trial
        return True

    def _tell(self, trial: Any, future: Future) -> None:
        """Tell the study how trial's job ended."""
        try:
            ret = future.result()
        except Interrupted as stop:
            why = f"stopped by {signal.Signals(stop.signum).name}"
            if studies.interrupt(self.storage, self.study, trial.number, why):
                log.info(f"Trial {trial.number}: interrupted ({why}); it is queued to resume")
            return
        except Exception as err:  # noqa: BLE001  (the launcher's or the process's)
            return self._fail(trial, _reason(err))
        if ret.status != JobStatus.COMPLETED:
            try:
                ret.return_value  # (raises what failed the job)
            except Exception as err:  # noqa: BLE001  (the job's, whatever it was)
                return self._fail(trial, _reason(err))
        value = ret.return_value
        values = [float(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
        if any(math.isnan(v) for v in values):
            return self._fail(trial, "its metric is NaN (the loss diverged)")
        try:
            self.study.tell(trial, values, skip_if_finished=True)
        except RuntimeError:  # a grid sampler's last point: its study.stop() works in optimize() only
            sampler = self.study.sampler
            if not (isinstance(sampler, optuna.samplers.GridSampler) and sampler.is_exhausted(self.study)):
                raise  # (the trial is stored either way: Optuna's tell stores it in a finally)
        self._said(trial.number)

    def _fail(self, trial: Any, why: str) -> None:
        studies.end(self.storage, self.study.study_name, trial.number, _state("FAIL"),
                    **{studies.FAIL_REASON: why})
        self._said(trial.number, why)

    def _said(self, number: int, why: str = "") -> None:
        frozen = self.study.get_trials(deepcopy=False)[number]
        value = ", ".join(f"{v:.6g}" for v in frozen.values or [])
        log.info(f"Trial {number}: {frozen.state.name.lower()}" + (f" ({value})" if value else "")
                 + (f": {why}" if why else ""))

    def _check_budget(self) -> None:
        failed, finished = studies.failure_rate(self.study.get_trials(deepcopy=False))
        rate = self.search.max_failure_rate
        if finished and (failed / finished > rate or self.over_budget):  # (the line: final counts)
            self.over_budget = (f"{failed} of the study's {finished} finished trials failed, more "
                                f"than hydra.sweeper.max_failure_rate={rate}: the sweep stops "
                                f"(the trials' fail_reason: "
                                f"{command('attnflow-report', str(self.search.sweep_dir))})")

    # -- signals -------------------------------------------------------------------------------
    def _install(self) -> dict:
        if threading.current_thread() is not threading.main_thread():
            return {}
        return {s: signal.signal(s, self._on_signal) for s in SIGNALS}

    @staticmethod
    def _restore(previous: dict) -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    def _on_signal(self, signum: int, frame: Any) -> None:
        first = self.stopped is None
        self.stopped = signum
        if first:
            running = len(self.pending)
            print(f"\nattnflow: {signal.Signals(signum).name}: the sweep stops; "
                  + (f"its {running} running trial(s) stop after their step and save last.ckpt "
                     f"(send it again to stop them at once)" if running else "no trial is running"),
                  file=sys.stderr, flush=True)
        if self.runner.passes_signals:  # trial processes: passed on, once per signal
            self.runner.signal(signum)
        elif self.runner.running or not first:
            raise Interrupted(signum)  # (this process's trial, outside its training loop)


def resume_overrides(run: str) -> list:
    """A job's overrides that continue the run folder ``run`` in place (no new ``.hydra/``)."""
    return [f"resume={format_value(run)}", f"hydra.sweep.subdir={format_value(run)}",
            "hydra.output_subdir=null"]


def _reason(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": ")


def _state(name: str) -> Any:
    return optuna.trial.TrialState[name]
