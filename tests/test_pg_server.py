"""The tests' PostgreSQL server (tests/pg_server.py) does what the sweeps need of an Optuna storage:
workers in other processes ask for trials of one study at the same time and get distinct trial
numbers, and a trial whose worker stopped beating is failed once its grace period is over."""

import subprocess
import sys
import time
import warnings

import pytest

from pg_server import postgres_url  # noqa: F401  (the fixture)

optuna = pytest.importorskip("optuna")

# a sweep worker: waits on stdin for the go, then asks for trials and prints their numbers
WORKER = """
import sys, warnings
warnings.simplefilter("ignore")
import optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
url, name, n = sys.argv[1:]
storage = optuna.storages.RDBStorage(url, heartbeat_interval=1, grace_period=2)
study = optuna.load_study(study_name=name, storage=storage)
print("ready", flush=True)
sys.stdin.readline()
for _ in range(int(n)):
    trial = study.ask()
    study.tell(trial, 0.0)
    print(trial.number, flush=True)
"""


def _storage(url):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # heartbeat_interval is an experimental argument
        return optuna.storages.RDBStorage(url, heartbeat_interval=1, grace_period=2)


@pytest.mark.slow
def test_concurrent_workers_get_distinct_trial_numbers(postgres_url):
    # the study (and Optuna's tables) made here, before the workers start: two workers creating
    # the tables of an empty database at the same time would race each other
    optuna.create_study(storage=_storage(postgres_url), study_name="pg-server-ask")
    n = 25
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, postgres_url, "pg-server-ask", str(n)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for _ in range(2)]
    try:
        for worker in workers:  # both have connected and loaded the study ...
            assert worker.stdout.readline().strip() == "ready", worker.stderr.read()
        for worker in workers:  # ... before either asks
            worker.stdin.write("go\n")
            worker.stdin.flush()
        outputs = [worker.communicate(timeout=120) for worker in workers]
    finally:
        for worker in workers:
            worker.kill()
    numbers = []
    for worker, (out, err) in zip(workers, outputs):
        assert worker.returncode == 0, err
        numbers.append([int(line) for line in out.split()])
        assert len(numbers[-1]) == n
    assert sorted(numbers[0] + numbers[1]) == list(range(2 * n))
    study = optuna.load_study(study_name="pg-server-ask", storage=_storage(postgres_url))
    assert len(study.get_trials(states=[optuna.trial.TrialState.COMPLETE])) == 2 * n


@pytest.mark.slow
def test_stale_trial_failed_after_grace_period(postgres_url):
    storage = _storage(postgres_url)
    study = optuna.create_study(storage=storage, study_name="pg-server-heartbeat")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # heartbeats outside optimize(); fail_stale_trials is experimental
        stopped, alive = study.ask(), study.ask()
        for trial in (stopped, alive):
            storage.record_heartbeat(trial._trial_id)

        def states():
            return [storage.get_trial(t._trial_id).state for t in (stopped, alive)]

        optuna.storages.fail_stale_trials(study)  # within the grace period: neither is stale
        assert states() == [optuna.trial.TrialState.RUNNING] * 2
        end = time.monotonic() + 3.5  # past the grace period of 2 s; only `alive` keeps beating
        while time.monotonic() < end:
            storage.record_heartbeat(alive._trial_id)
            time.sleep(0.5)
        optuna.storages.fail_stale_trials(study)
        assert states() == [optuna.trial.TrialState.FAIL, optuna.trial.TrialState.RUNNING]
