"""Trial processes (attnflow/sweep/processes.py) without starting one: the GPUs a sweep hands out
and what a trial process's end becomes in its future. The sweeps that start them run in
test_sweep_workers.py and test_sweep_optuna.py (slow)."""

from __future__ import annotations

import signal

import pytest

pytest.importorskip("optuna")  # (trial processes: the sweep extra's, with cloudpickle)
pytest.importorskip("cloudpickle")
from attnflow.sweep.processes import TrialProcessError, _outcome, visible_devices  # noqa: E402
from attnflow.training.preemption import Interrupted  # noqa: E402


@pytest.mark.parametrize("listed, devices", [("3,5", ["3", "5"]), (" 0 , 2,", ["0", "2"]),
                                             ("-1", []), ("", [])])
def test_trials_take_the_gpus_cuda_visible_devices_lists(monkeypatch, listed, devices):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", listed)
    assert visible_devices() == devices


def test_a_trial_process_end_becomes_its_result_an_interruption_or_an_error():
    result = object()
    assert _outcome("done", result, 0) is result
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
        for stopped in (_outcome("exit", 128 + signum, 128 + signum), _outcome("gone", None, -signum)):
            assert isinstance(stopped, Interrupted) and stopped.signum == signum and stopped.code == 128 + signum
    errors = {"exit 3": _outcome("exit", 3, 3), "error": _outcome("error", "Traceback: boom", 1),
              "SIGKILL": _outcome("gone", None, -signal.SIGKILL), "no result": _outcome("gone", None, 0)}
    assert all(isinstance(e, TrialProcessError) for e in errors.values())
    assert [str(e) for e in errors.values()] == [
        "the trial exited with status 3", "Traceback: boom", "the trial process was killed (SIGKILL)",
        "the trial process ended with status 0 and no result"]
