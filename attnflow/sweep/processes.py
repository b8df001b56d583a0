"""Trials in ``n_jobs`` processes of this machine: each runs its job through Hydra's basic launcher,
as this process would (job number = trial number), with ``cpu_count // n_jobs`` threads so that
the processes do not oversubscribe the cores. The processes are started fresh (``spawn``): neither torch's threads nor the parent's open files are forked.
Hydra's state (its config store, OmegaConf's resolvers) holds local functions: the jobs travel
through cloudpickle, as with Hydra's joblib launcher.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, Dict, List, Sequence


def _threads(n: int) -> None:
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)  # (before torch loads)


def _run_pickled(job: bytes) -> bytes:
    import cloudpickle

    return cloudpickle.dumps(_run_job(*cloudpickle.loads(job)))


def _run_job(number: int, overrides: Sequence[str], hydra_context: Any, config: Any,
             task_function: Any, singleton_state: Dict[Any, Any]) -> Any:
    """One trial's job in this process, by the sweep's own (basic) launcher: its config composed,
    run in ``<sweep dir>/<number>``."""
    from hydra.core.plugins import Plugins
    from hydra.core.singleton import Singleton

    Singleton.set_state(singleton_state)
    launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context,
                                                       task_function=task_function, config=config)
    return launcher.launch([list(overrides)], initial_job_idx=number)[0]


def _unpickle(running: Future, done: Future) -> None:
    import cloudpickle

    try:
        done.set_result(cloudpickle.loads(running.result()))
    except BaseException as err:  # noqa: BLE001  (the job's own exit, or the pool's)
        done.set_exception(err)


class JobProcesses:
    """``runner(number, overrides)`` → a future of the job's ``JobReturn``, run in one of ``n``
    processes."""

    def __init__(self, n: int, hydra_context: Any, config: Any, task_function: Any) -> None:
        from hydra.core.singleton import Singleton

        self.context, self.config, self.task_function = hydra_context, config, task_function
        self.state = Singleton.get_state()
        self.pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_threads, initargs=(max(1, (os.cpu_count() or 1) // n),))

    def __call__(self, number: int, overrides: List[str]) -> Future:
        import cloudpickle

        job = cloudpickle.dumps((number, overrides, self.context, self.config, self.task_function,
                                 self.state))
        done: Future = Future()
        running = self.pool.submit(_run_pickled, job)
        running.add_done_callback(lambda f: _unpickle(f, done))
        return done

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
