"""Sweeps beyond one process, end to end on a generated graph: a stopped parallel sweep stops its
trial processes and resumes them to an uninterrupted run's metrics; a sweep killed with kill -9
leaves no trial running; a trial that fails does not end the sweep; three workers fill one study
on a real PostgreSQL server while one of them is killed. (One GPU per trial process is checked by
test_sweep_optuna.py's sweep of two trials at once.)

What the study holds is checked against the processes (by pid) and each trial's run folder."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pg_server import postgres_url  # noqa: F401  (a fixture)
from support import train_cli
from test_sweep_optuna import SEARCH, TINY_GRAPH, _pids_alive, _study, _wait_for

optuna = pytest.importorskip("optuna")
from sqlalchemy.exc import SQLAlchemyError  # noqa: E402  (optuna's storage library)
TRAIN = str(Path(sys.executable).with_name("attnflow-train"))
ENV = dict(os.environ, OMP_NUM_THREADS="1")
# Long enough that both trials of an n_jobs=2 sweep train at once on a loaded machine: the test
# stops the sweep once both have a last.ckpt, which in four runs on 2 cores under a load of 10 to
# 25 found the first trial between its epochs 8 and 19 (the second between 3 and 13): 400 epochs
# leave 20 times that. Each epoch is trained three times (the trials, their resumes, the
# uninterrupted run).
EPOCHS = 400
LONG = [f"trainer.max_epochs={EPOCHS}", "callbacks.early_stopping=null", "callbacks.checkpoint.save_last=true"]


def _trials(sweep: Path, storage: str = None, name: str = "gat_cora_optuna"):
    """The study's trials, read only: the sweep makes the tables (a reader that made them too
    would race it: "table … already exists")."""
    url = storage or f"sqlite:///{sweep}/optuna.db"
    return optuna.load_study(study_name=name, storage=optuna.storages.RDBStorage(
        url, skip_table_creation=True)).trials


def _trials_yet(sweep: Path, storage: str = None, name: str = "gat_cora_optuna") -> list:
    """The study's trials, [] while the sweep has not made it."""
    if storage is None and not (sweep / "optuna.db").is_file():
        return []
    try:
        return _trials(sweep, storage, name)
    except (KeyError, SQLAlchemyError, optuna.exceptions.StorageInternalError):  # (not yet made)
        return []


def _training(sweep: Path, numbers, storage: str = None) -> bool:
    """Whether trials ``numbers`` run and wrote a last.ckpt. The study is read once their folders
    hold one: reading a SQLite study while the sweep creates its tables can end the sweep."""
    if storage is None and not all((sweep / str(n) / "checkpoints" / "last.ckpt").is_file() for n in numbers):
        return False
    trials = {t.number: t for t in _trials_yet(sweep, storage)}
    return all(n in trials and trials[n].state.name == "RUNNING" and "pid" in trials[n].user_attrs
               and (Path(trials[n].user_attrs["run_dir"]) / "checkpoints" / "last.ckpt").is_file()
               for n in numbers)


@pytest.mark.slow
def test_a_stopped_parallel_sweep_stops_its_trials_which_resume_exactly(tmp_path, monkeypatch, capsys):
    """n_jobs=2, SIGTERM to the sweep: it exits 143, both trial processes are gone, each saved
    last.ckpt and is FAIL ``interrupted``; the command the sweep printed resumes each in its folder
    (retry_of, reports carried over), to the metrics of the same trial run without a stop. The
    report and that uninterrupted run are made in this process (no interpreter to start)."""
    from attnflow.cli.report import main as report
    sweep = tmp_path / "study"
    cmd = [TRAIN, *SEARCH, *LONG, "hydra.sweeper.n_jobs=2", "hydra.sweeper.n_trials=2",
           f"hydra.sweep.dir={sweep}"]
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: _training(sweep, (0, 1)), timeout=400)
    finally:
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=120)[1]
    assert proc.returncode == 143, err[-2000:]
    stopped = _trials(sweep)
    assert not _pids_alive([t.user_attrs["pid"] for t in stopped[:2]])
    assert [(t.state.name, t.user_attrs["interrupted"]) for t in stopped[:2]] == [("FAIL", "stopped by SIGTERM")] * 2
    assert [t.state.name for t in stopped[2:]] == ["WAITING"] * 2
    command = re.findall(r"continue the study with:\n  (.+)", err)[-1]
    assert command == stopped[0].user_attrs["command"]
    resumed = subprocess.run(command, shell=True, env=ENV, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    trials = _trials(sweep)
    taken_up = {t.user_attrs.get("retry_of"): t for t in trials[2:]}
    assert sorted(taken_up) == [0, 1]
    for first, again in ((trials[0], taken_up[0]), (trials[1], taken_up[1])):
        assert again.state.name == "COMPLETE"
        assert again.user_attrs["run_dir"] == first.user_attrs["run_dir"]
        assert sorted(again.intermediate_values) == list(range(1, EPOCHS + 1))
        done = {s: v for s, v in first.intermediate_values.items() if s in again.intermediate_values}
        assert {s: again.intermediate_values[s] for s in done} == pytest.approx(done)
    assert not (sweep / "2").exists() and not (sweep / "3").exists()
    report([str(sweep), "--out", str(tmp_path / "report")])
    md = (tmp_path / "report" / "report.md").read_text()
    assert f"trial {taken_up[0].number} resumed trial 0, which was interrupted" in md, capsys.readouterr().err[-2000:]
    assert [line.split("|")[2].strip() for line in md.splitlines() if re.match(r"\| [0-3] \|", line)] == ["ok", "ok"]
    # trial 0 once more, uninterrupted: the same parameters as a run of its own
    params = [f"++{k}={v!r}" for k, v in trials[0].params.items()]
    alone = tmp_path / "alone"
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the trials (OMP_NUM_THREADS=1): the same sums in the same order
    try:
        assert train_cli(monkeypatch, "experiment=gat_synthetic", *TINY_GRAPH[1:], *LONG, *params,
                         f"hydra.run.dir={alone}") == 0, capsys.readouterr().err[-2000:]
    finally:
        torch.set_num_threads(threads)
    want = json.loads((alone / "metrics.json").read_text())["metrics"]
    got = json.loads((sweep / "0" / "metrics.json").read_text())["metrics"]
    assert got == pytest.approx(want, rel=1e-6)


@pytest.mark.slow
def test_trial_processes_of_a_killed_sweep_stop_within_a_minute(tmp_path):
    """kill -9 of the sweep: its trial processes notice, save last.ckpt, record themselves
    interrupted and end within a minute."""
    sweep = tmp_path / "study"
    proc = subprocess.Popen([TRAIN, *SEARCH, *LONG, "trainer.max_epochs=100000", "hydra.sweeper.n_jobs=2",
                             "hydra.sweeper.n_trials=2", f"hydra.sweep.dir={sweep}"],
                            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: _training(sweep, (0, 1)), timeout=240)
    finally:
        proc.kill()
        proc.wait()
    pids = [t.user_attrs["pid"] for t in _trials(sweep)[:2]]  # (their retries may be queued already)
    killed = time.time()
    _wait_for(lambda: not _pids_alive(pids), timeout=60)
    assert time.time() - killed < 60
    trials = _trials(sweep)
    assert [(t.state.name, t.user_attrs.get("interrupted")) for t in trials[:2]] == [
        ("FAIL", "its sweep was stopped (kill -9?)")] * 2, [t.user_attrs for t in trials]
    assert sorted(t.user_attrs.get("retry_of") for t in trials[2:]) == [0, 1]


@pytest.mark.slow
def test_a_failing_trial_is_recorded_and_the_sweep_goes_on(monkeypatch, tmp_path):
    """A trial whose sampled settings its run refuses (0 heads) is FAIL with the run's reason, in
    the study and its metrics.json; the sweep runs the others."""
    sweep = tmp_path / "study"
    assert train_cli(monkeypatch, *SEARCH, "hydra/sweeper/sampler=grid", "hydra.sweeper.params=null",
                     "model.heads=choice(0,2)", f"hydra.sweep.dir={sweep}") == 0
    trials = {t.params["model.heads"]: t for t in _study(sweep).trials}
    assert trials[2].state.name == "COMPLETE" and trials[0].state.name == "FAIL"
    reason = trials[0].user_attrs["fail_reason"]
    assert "heads" in reason
    metrics = json.loads((sweep / str(trials[0].number) / "metrics.json").read_text())
    assert metrics["failed"] in reason and metrics["trial"]["state"] == "fail"


def _worker(sweep: Path, url: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([TRAIN, *SEARCH, "hydra.sweeper.study_name=shared", f"hydra.sweeper.storage={url}",
                             "hydra.sweeper.heartbeat_interval=1", "hydra.sweeper.grace_period=5",
                             f"hydra.sweep.dir={sweep}", *extra],
                            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_three_workers_fill_one_study_on_postgresql(tmp_path, postgres_url):  # noqa: F811
    """Three sweep commands on one PostgreSQL study, each with its own folder; one is killed with
    kill -9 mid-trial. The other two finish the study: n_trials counted trials, unique numbers,
    every run folder where the study says, the killed worker's trial failed and taken up."""
    n_trials = 6
    args = [*LONG, "trainer.max_epochs=60", f"hydra.sweeper.n_trials={n_trials}"]
    workers = [_worker(tmp_path / f"w{i}", postgres_url, *args) for i in range(3)]
    victim = tmp_path / "w0"
    try:
        _wait_for(lambda: any(t.user_attrs.get("worker") == str(victim) and t.state.name == "RUNNING"
                              and (victim / str(t.number) / "checkpoints" / "last.ckpt").is_file()
                              for t in _trials_yet(victim, postgres_url, "shared")), timeout=240)
        workers[0].kill()
        for w in workers[1:]:
            assert w.wait(timeout=600) == 0, w.stderr.read()[-2000:]
    finally:
        for w in workers:
            w.kill()
    trials = _trials(victim, postgres_url, "shared")
    lost = [t for t in trials if t.user_attrs.get("worker") == str(victim) and t.state.name == "FAIL"]
    assert lost and all(t.number in {r.user_attrs.get("retry_of") for r in trials} for t in lost)
    counted = [t for t in trials if t.number not in {r.user_attrs.get("retry_of") for r in trials}
               and "surplus" not in t.user_attrs]
    assert len(counted) == n_trials and all(t.state.name == "COMPLETE" for t in counted)
    for t in counted:
        metrics = json.loads((Path(t.user_attrs["run_dir"]) / "metrics.json").read_text())
        assert t.value == pytest.approx(metrics["metrics"]["best/val/acc"])


def test_a_journal_lease_tells_a_lost_trial_from_a_live_one(tmp_path):
    """On a journal file the lease is the time of a trial's last beat: one silent for longer than
    the grace period is failed as lost and queued again, once; one that beats is left running."""
    from attnflow.sweep.storage import open_storage
    from attnflow.sweep import liveness

    storage = open_storage(str(tmp_path / "study.journal"))
    study = optuna.create_study(study_name="s", storage=storage)
    lost, live = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)}), study.ask()
    liveness.beat(storage, lost._trial_id)
    time.sleep(1.5)
    beating = liveness.Beating(storage, live._trial_id, 0.2)
    try:
        failed = liveness.reap(storage, study, grace=1.0)
        assert [t.number for t in failed] == [lost.number]
        assert liveness.reap(storage, study, grace=1.0) == []  # (once)
    finally:
        beating.stop()
    trials = study.trials
    assert trials[lost.number].state.name == "FAIL" and trials[live.number].state.name == "RUNNING"
    assert trials[lost.number].user_attrs["interrupted"].startswith("no heartbeat for 1 s")
    (retry,) = [t for t in trials if t.state.name == "WAITING"]
    assert retry.user_attrs == {"retry_of": lost.number}
    taken = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})  # (the queued one first)
    assert taken.number == retry.number and taken.params == trials[lost.number].params
