"""Optuna sweeps with attnflow's sweeper, end to end on a generated graph: a study that continues,
one killed mid-trial and continued, pruning, trials at once, several objectives and a grid. What
the study holds is checked against each trial's own run folder (its config, ``metrics.json`` and
the CSV logger's epochs)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from support import train_cli
from test_loggers import _wandb_run, _wandb_summary, wandb_env  # noqa: F401  (a fixture)

optuna = pytest.importorskip("optuna")
TRAIN = str(Path(sys.executable).with_name("attnflow-train"))
# GAT on a generated graph of 120 nodes: one mini-batch per epoch
TINY_GRAPH = ["experiment=gat_synthetic", "data.num_nodes=120", "trainer.max_epochs=1", "task.picture=false",
              "callbacks.attention_maps=null", "trainer.accelerator=cpu", "callbacks.progress_bar=none",
              "logger=csv"]
SEARCH = ["hparams_search=gat_cora_optuna", *TINY_GRAPH, "hydra/sweeper/pruner=none"]


def _study(sweep: Path, name: str = "gat_cora_optuna"):
    return optuna.load_study(study_name=name, storage=f"sqlite:///{sweep}/optuna.db")


def _job(sweep: Path, n: int) -> tuple:
    """(resolved config, metrics.json) of trial ``n``'s run folder."""
    folder = sweep / str(n)
    return yaml.safe_load((folder / "config.yaml").read_text()), json.loads((folder / "metrics.json").read_text())


def _val_acc_per_epoch(run: Path) -> list:
    """val/acc of each training epoch, from the CSV logger's file (one row each)."""
    with open(next(run.glob("csv/**/metrics.csv"))) as f:
        rows = [r for r in csv.DictReader(f) if r.get("val/acc")]
    return [float(r["val/acc"]) for r in sorted(rows, key=lambda r: int(r["epoch"]))]


@pytest.mark.slow
def test_a_study_runs_and_continues_each_trial_its_own_job(monkeypatch, tmp_path):
    """2 trials, then the same command with n_trials=4 runs 2 more into the same study (jobs 2 and
    3; jobs 0 and 1 untouched); each job's config holds its trial's parameters, and the study the
    value its metrics.json reports."""
    sweep = tmp_path / "study"
    args = [*SEARCH, f"hydra.sweep.dir={sweep}"]
    assert train_cli(monkeypatch, *args, "hydra.sweeper.n_trials=2") == 0
    first = {p: p.read_bytes() for p in sweep.glob("[01]/**/*") if p.is_file()}
    assert train_cli(monkeypatch, *args, "hydra.sweeper.n_trials=4") == 0
    trials = _study(sweep).trials
    assert [t.number for t in trials] == [0, 1, 2, 3]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert {p: p.read_bytes() for p in first} == first  # the first jobs' files as they were
    for t in trials:  # job number = trial number
        cfg, metrics = _job(sweep, t.number)
        assert t.params["task.optim.lr"] == pytest.approx(cfg["task"]["optim"]["lr"])
        assert t.params["model.dropout"] == pytest.approx(cfg["model"]["dropout"])
        assert t.value == pytest.approx(metrics["metrics"]["best/val/acc"])  # the result
        assert metrics["trial"] == {"number": t.number, "state": "complete", "study": "gat_cora_optuna"}
        assert list(t.intermediate_values.values()) == pytest.approx(_val_acc_per_epoch(sweep / str(t.number)))
    assert len({t.params["task.optim.lr"] for t in trials}) == 4  # new points after the restart
    results = OmegaConf.load(sweep / "optimization_results.yaml")
    assert results.best_value == pytest.approx(max(t.value for t in trials))


def _wait_for(condition, timeout: float = 120.0) -> None:
    end = time.time() + timeout
    while not condition():
        assert time.time() < end, "timed out"
        time.sleep(0.2)


def _running(sweep: Path, number: int) -> bool:
    """Whether trial ``number`` is training (its CSV log exists)."""
    if not (sweep / "optuna.db").is_file() or not list((sweep / str(number)).glob("csv/**/metrics.csv")):
        return False
    try:
        return any(t.number == number and t.state.name == "RUNNING" for t in _study(sweep).trials)
    except (KeyError, optuna.exceptions.OptunaError):
        return False


def _pids_alive(pids) -> list:
    """The processes of ``pids`` that still run (a zombie, ended but not yet reaped, does not)."""
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def _has_last(sweep: Path, number: int) -> bool:
    return (sweep / str(number) / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.slow
def test_a_killed_sweep_continues_and_resumes_the_cut_off_trial(tmp_path, monkeypatch):
    """kill -9 while trial 1 trains (its last.ckpt written); the same command finishes the study:
    trial 1 is FAIL, interrupted, and taken up by trial 2 with its parameters, which resumes it in
    its own folder, its reports carried over; 3 trials count towards n_trials=3. While a sweep
    holds the folder, a second one on it is refused. The killed sweep and the refused one are
    processes of their own (the kill and the lock another process holds are what they test); the
    sweep that finishes the study runs in this process (its trials too: n_jobs=1)."""
    from attnflow.training import runlock

    sweep = tmp_path / "study"
    cmd = [TRAIN, *SEARCH, "trainer.max_epochs=60", "callbacks.early_stopping=null",
           "callbacks.checkpoint.save_last=true", "hydra.sweeper.n_trials=3", f"hydra.sweep.dir={sweep}"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    runlock.hold(sweep)  # another sweep's
    try:
        busy = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    finally:
        runlock.release(sweep)
    assert busy.returncode == 2 and "one sweep runs in a folder at a time" in busy.stderr, busy.stderr[-2000:]
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: _running(sweep, 1) and _has_last(sweep, 1), timeout=300)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    cut = _study(sweep).trials[1]
    assert train_cli(monkeypatch, *cmd[1:]) == 0
    trials = _study(sweep).trials
    assert [(t.number, t.state.name) for t in trials] == [(0, "COMPLETE"), (1, "FAIL"), (2, "COMPLETE"),
                                                          (3, "COMPLETE")]
    assert trials[1].user_attrs["interrupted"] == "its sweep was stopped"
    assert trials[2].params == cut.params and trials[2].user_attrs["retry_of"] == 1
    assert trials[2].user_attrs["run_dir"] == str(sweep / "1") and not (sweep / "2").exists()
    metrics = json.loads((sweep / "1" / "metrics.json").read_text())
    assert metrics["trial"]["number"] == 2 and metrics["trial"]["retry_of"] == 1
    assert trials[2].value == pytest.approx(metrics["metrics"]["best/val/acc"])
    reports = list(trials[2].intermediate_values.items())
    assert [s for s, _ in reports] == list(range(1, 61))  # carried over, then on: none twice
    assert [v for _, v in reports][:len(cut.intermediate_values)] == pytest.approx(
        [v for _, v in sorted(cut.intermediate_values.items())][:len(reports)])


@pytest.mark.slow
def test_a_pruned_trial_stops_keeps_its_folder_and_says_so_in_wandb(monkeypatch, tmp_path, wandb_env):
    """A pruner that prunes every trial at its third validation (Optuna's ThresholdPruner, val/acc
    below 2, 3 warm-up steps): each trial trains 3 of its 10 epochs, is PRUNED in the study with its last report as
    its value, and its run folder, metrics.json and offline W&B run say ``pruned``."""
    sweep = tmp_path / "study"
    pruner = ["hydra.sweeper.pruner._target_=optuna.pruners.ThresholdPruner", "++hydra.sweeper.pruner.lower=2.0",
              "hydra.sweeper.pruner.n_warmup_steps=3"]  # reports before step 3 are never pruned
    assert train_cli(monkeypatch, *SEARCH, "trainer.max_epochs=10", "callbacks.early_stopping=null",
                     "logger=[csv,wandb]", *pruner, "hydra.sweeper.n_trials=2",
                     f"hydra.sweep.dir={sweep}") == 0
    for t in _study(sweep).trials:
        run = sweep / str(t.number)
        metrics = json.loads((run / "metrics.json").read_text())
        assert t.state == optuna.trial.TrialState.PRUNED and metrics["epochs"] == 3
        assert metrics["trial"] == {"number": t.number, "state": "pruned", "pruned_at": 3,
                                    "study": "gat_cora_optuna"}
        reports = _val_acc_per_epoch(run)
        assert list(t.intermediate_values) == [1, 2, 3] and list(t.intermediate_values.values()) == pytest.approx(reports)
        assert t.value == pytest.approx(reports[-1])
        summary = _wandb_summary(_wandb_run(run))
        assert summary["trial"]["state"] == "pruned"  # val/acc: the last epoch's, in W&B and metrics.json
        assert summary["val/acc"] == pytest.approx(metrics["metrics"]["val/acc"]) == pytest.approx(reports[-1])


@pytest.mark.slow
def test_two_trials_at_once_and_two_objectives(monkeypatch, tmp_path):
    """n_jobs=2: the two trials run at the same time, in two processes, each seeing one of the
    two visible devices (the two at once distinct: the environment each trial recorded); with
    optimized_metric a list each trial returns both values, the study seeks each one's better end,
    and the results file lists the trials no other trial dominates."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")  # (the trials train on the CPU)
    sweep = tmp_path / "study"
    assert train_cli(monkeypatch, *SEARCH, "trainer.max_epochs=60", "optimized_metric=[val/acc,val/loss]",
                     "hydra.sweeper.n_jobs=2", "hydra.sweeper.n_trials=3", f"hydra.sweep.dir={sweep}") == 0
    study = _study(sweep)
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    trials = study.trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    def window(n):  # a job's start (Hydra writes .hydra/ first) and end (metrics.json last)
        run = sweep / str(n)
        return (run / ".hydra" / "config.yaml").stat().st_mtime, (run / "metrics.json").stat().st_mtime
    (start0, end0), (start1, end1) = window(0), window(1)
    assert start0 < end1 and start1 < end0  # the first two jobs ran at the same time
    seen = [t.user_attrs["cuda_visible_devices"] for t in trials]
    assert sorted(seen[:2]) == ["3", "5"] and seen[2] in ("3", "5")
    for t in trials:
        m = _job(sweep, t.number)[1]["metrics"]
        assert t.values == pytest.approx([m["best/val/acc"], m["best/val/loss"]])

    def dominated(t):
        return any(o.values[0] >= t.values[0] and o.values[1] <= t.values[1] and o.values != t.values
                   for o in trials)
    solutions = OmegaConf.load(sweep / "optimization_results.yaml").solutions
    assert sorted(s.trial for s in solutions) == [t.number for t in trials if not dominated(t)]


@pytest.mark.slow
def test_the_grid_sampler_runs_every_point_once(monkeypatch, tmp_path):
    """hydra/sweeper/sampler=grid over the command line's choices: n_trials=24 stops at the 4
    points of the grid, each run once."""
    sweep = tmp_path / "study"
    assert train_cli(monkeypatch, *SEARCH, "hydra/sweeper/sampler=grid", "hydra.sweeper.params=null",
                     "model.dropout=choice(0.2,0.5)", "task.optim.lr=choice(0.01,0.005)",
                     f"hydra.sweep.dir={sweep}") == 0
    points = sorted((t.params["model.dropout"], t.params["task.optim.lr"]) for t in _study(sweep).trials)
    assert points == [(0.2, 0.005), (0.2, 0.01), (0.5, 0.005), (0.5, 0.01)]
    assert sorted((c["model"]["dropout"], c["task"]["optim"]["lr"]) for c in (_job(sweep, n)[0] for n in range(4))) == points


@pytest.mark.slow
def test_on_slurm_each_trial_is_a_cluster_job_of_the_same_study(monkeypatch, tmp_path, capfd):
    """The submitit launcher up to ``sbatch`` (a stand-in that keeps nothing and fails: there is no
    cluster here): with n_jobs=2 both trials are submitted, each as its own job numbered as its
    trial, with its trial's parameters and the sweep folder that holds the study; the refused
    submissions fail their trials in the study."""
    import pickle

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text('#!/bin/sh\necho "sbatch: error: no cluster" >&2\nexit 1\n')
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")  # submitit checks that srun exists
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "study"
    assert train_cli(monkeypatch, *SEARCH, "hydra/launcher=slurm", "hydra.sweeper.n_jobs=2",
                     "hydra.sweeper.n_trials=4", "hydra.sweeper.max_failure_rate=0.5",
                     f"hydra.sweep.dir={sweep}") == 1
    err = capfd.readouterr().err
    assert "sbatch: error: no cluster" in err
    assert "2 of the study's 2 finished trials failed, more than hydra.sweeper.max_failure_rate=0.5" in err
    trials = _study(sweep).trials
    assert [t.state.name for t in trials] == ["FAIL", "FAIL"]  # (no third trial: over the budget)
    assert all("sbatch" in t.user_attrs["fail_reason"] for t in trials)
    calls = [pickle.loads(p.read_bytes()) for p in (sweep / ".submitit").glob("**/*.pkl")]
    jobs = {c.args[2]: c.args[0] for c in calls}  # job number → its overrides
    assert sorted(jobs) == [0, 1]
    for t in trials:
        assert f"task.optim.lr={t.params['task.optim.lr']!r}" in jobs[t.number]  # (as typed: no ++)
    from attnflow.sweep.storage import storage_spec

    for call in calls:  # the config each job composes its own from: the study's storage
        hydra = call.function.config.hydra
        assert storage_spec(hydra.sweeper.storage, hydra.sweep.dir) == f"sqlite:///{sweep}/optuna.db"


def test_a_study_in_a_journal_file(monkeypatch, tmp_path):
    """``storage: <path>.journal``: the study lives in Optuna's journal file (no sqlite)."""
    from optuna.storages.journal import JournalFileBackend

    sweep, journal = tmp_path / "study", tmp_path / "shared" / "study.journal"
    assert train_cli(monkeypatch, *SEARCH, "hydra.sweeper.n_trials=1", f"hydra.sweeper.storage={journal}",
                     f"hydra.sweep.dir={sweep}") == 0
    study = optuna.load_study(study_name="gat_cora_optuna",
                              storage=optuna.storages.JournalStorage(JournalFileBackend(str(journal))))
    (trial,) = study.trials
    assert trial.state.name == "COMPLETE" and not (sweep / "optuna.db").exists()
    assert trial.value == pytest.approx(_job(sweep, 0)[1]["metrics"]["best/val/acc"])
