"""Trials in ``n_jobs`` processes of this machine, one fresh process per trial (``spawn``: neither
torch's threads nor the sweep's open files are forked), each running its job through Hydra's basic
launcher as the sweep would (job number = trial number), with ``cpu_count // n_jobs`` threads and,
where devices are visible, one GPU of its own (``CUDA_VISIBLE_DEVICES``, round-robin over them).

A trial process is the leader of its own process group, so a signal to the sweep's group (Ctrl-C,
SLURM) reaches the sweep, which passes it on once (:meth:`TrialProcesses.signal`): each trial
saves ``last.ckpt`` after its running step and exits ``128 + signal``. A trial process whose sweep
is gone (``kill -9``) notices within seconds, stops the same way and records itself interrupted.
Hydra's state (its config store, OmegaConf's resolvers) holds local functions: jobs travel through
cloudpickle, as with Hydra's joblib launcher.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import Future
from typing import Any, Dict, List, Optional, Sequence

import cloudpickle
import optuna
import torch
from hydra.core.plugins import Plugins
from hydra.core.singleton import Singleton

from attnflow.sweep.storage import open_storage
from attnflow.sweep import study as studies
from attnflow.sweep.loop import Runner
from attnflow.training.preemption import SIGNALS, Interrupted

ORPHAN_POLL_S, ORPHAN_KILL_S = 1.0, 50.0  # how often a trial looks for its sweep; when it gives up


class TrialProcessError(RuntimeError):
    """A trial process that ended without a result: killed, or exited with a status."""


def visible_devices() -> List[str]:
    """The GPUs trials may take: ``CUDA_VISIBLE_DEVICES``'s, else torch's count (none on a CPU)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip() and d.strip() != "-1"]
    return [str(i) for i in range(torch.cuda.device_count())]


def _watch_parent() -> None:
    """Stop this trial (SIGTERM: ``last.ckpt`` after the running step) once its sweep is gone;
    :func:`_trial_main` then records it interrupted."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(ORPHAN_POLL_S)
        _ORPHANED.set()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(ORPHAN_KILL_S)  # (a stop that hangs: end it within the minute)
        os._exit(128 + signal.SIGTERM)

    threading.Thread(target=watch, name="attnflow-orphan-watch", daemon=True).start()


_ORPHANED = threading.Event()


def _record_orphan(study: Optional[tuple]) -> None:
    """The trial of an ended sweep: failed as interrupted and queued again, for its next run."""
    if study is None:
        return
    spec, name, number = study
    storage = open_storage(spec)
    studies.interrupt(storage, optuna.load_study(study_name=name, storage=storage), number,
                      "its sweep was stopped (kill -9?)")


def _trial_main(job: bytes, env: Dict[str, str], study: Optional[tuple], conn: Any) -> None:
    """A trial process: its job run, its result (or exit status) sent to the sweep."""
    os.environ.update(env)  # (before torch loads)
    os.setpgrp()
    _watch_parent()
    try:
        out = ("done", _run_job(*cloudpickle.loads(job)))
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
        if _ORPHANED.is_set():
            _record_orphan(study)
        out = ("exit", code)
    except BaseException as err:  # noqa: BLE001  (sent to the sweep: it fails the trial)
        out = ("error", f"{type(err).__name__}: {err}")
    try:
        conn.send_bytes(cloudpickle.dumps(out))
    except (OSError, EOFError):  # (the sweep is gone)
        pass


def _run_job(number: int, overrides: Sequence[str], hydra_context: Any, config: Any,
             task_function: Any, singleton_state: Dict[Any, Any]) -> Any:
    """One trial's job in this process, by the sweep's own (basic) launcher: its config composed,
    run in ``<sweep dir>/<number>`` (or the run folder its overrides name)."""
    Singleton.set_state(singleton_state)
    launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context,
                                                       task_function=task_function, config=config)
    return launcher.launch([list(overrides)], initial_job_idx=number)[0]


def _outcome(kind: str, value: Any, exitcode: Optional[int]) -> Any:
    """What a trial process's future holds: its JobReturn, else the exception that ended it."""
    if kind == "done":
        return value
    if kind == "exit" and value - 128 in SIGNALS:
        return Interrupted(value - 128)
    if kind == "exit":
        return TrialProcessError(f"the trial exited with status {value}")
    if kind == "error":
        return TrialProcessError(value)
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        return (Interrupted(-exitcode) if -exitcode in SIGNALS
                else TrialProcessError(f"the trial process was killed ({name})"))
    return TrialProcessError(f"the trial process ended with status {exitcode} and no result")


class TrialProcesses(Runner):
    """``runner(number, overrides)`` → a future of the job's ``JobReturn``, run in a process of its
    own; at most ``n`` at once (the sweep asks no more)."""

    passes_signals = True

    def __init__(self, n: int, hydra_context: Any, config: Any, task_function: Any,
                 study: tuple) -> None:
        self.context, self.config, self.task_function = hydra_context, config, task_function
        self.state, self.study, self.n = Singleton.get_state(), study, n
        self.ctx = multiprocessing.get_context("spawn")
        self.devices = visible_devices()
        self.slots: Dict[int, Any] = {}  # slot → its running process
        self.threads = str(max(1, (os.cpu_count() or 1) // n))

    def _env(self, slot: int) -> Dict[str, str]:
        env = {"OMP_NUM_THREADS": self.threads, "MKL_NUM_THREADS": self.threads}
        if self.devices:
            env["CUDA_VISIBLE_DEVICES"] = self.devices[slot % len(self.devices)]
        return env

    def __call__(self, number: int, overrides: List[str]) -> Future:
        slot = next(s for s in range(self.n + 1) if s not in self.slots)
        job = cloudpickle.dumps((number, overrides, self.context, self.config, self.task_function,
                                 self.state))
        ours, theirs = self.ctx.Pipe(duplex=False)
        proc = self.ctx.Process(target=_trial_main, name=f"attnflow-trial-{number}",
                                args=(job, self._env(slot), (*self.study, number), theirs))
        proc.start()
        theirs.close()
        self.slots[slot] = proc
        done: Future = Future()
        threading.Thread(target=self._wait, args=(slot, proc, ours, done), daemon=True).start()
        return done

    def _wait(self, slot: int, proc: Any, conn: Any, done: Future) -> None:
        try:
            kind, value = cloudpickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            kind, value = "lost", None
        proc.join()
        self.slots.pop(slot, None)
        outcome = _outcome(kind, value, proc.exitcode)
        if isinstance(outcome, BaseException):
            done.set_exception(outcome)
        else:
            done.set_result(outcome)

    def signal(self, signum: int) -> None:
        """Pass ``signum`` on to every running trial process."""
        for proc in list(self.slots.values()):
            if proc.pid and proc.exitcode is None:
                try:
                    os.kill(proc.pid, signum)
                except ProcessLookupError:
                    pass

    def close(self) -> None:
        for proc in list(self.slots.values()):
            proc.join()
