"""Two nodes × one process on this machine: two ``attnflow-train`` processes started as a user
starts one per machine without a scheduler (Lightning's NODE_RANK 0 and 1, MASTER_ADDR=127.0.0.1,
a free MASTER_PORT; gloo), into one pinned run folder. They train one run (one record, one
``metrics.json``, one W&B run, the lock gone) with the metrics of one node × two processes, and a
SIGTERM sent to both (as SLURM sends it) stops them with ``last.ckpt``, from which both resume to
the metrics of an uninterrupted run.

The settings are test_ddp.py's equal-by-construction ``REVERSE`` (a global batch of the whole
training set, sequences of one length, no dropout), so a world of two ranks gives the same
metrics however its processes are placed, and the metrics of one process training on the whole
training set as one batch (test_ddp.py checks one node of two processes against that run). That
one process is the reference here, trained in this one while the nodes start: through the console
script it would be two more interpreters importing torch and Lightning, seconds of CPU apiece.
Which process holds the run folder (global rank 0) is decided before a Trainer exists, as
Lightning's cluster environments rank processes.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from attnflow.training.run import train
from attnflow.training.runlock import first_rank
from support import ROOT, compose_cfg
from test_ddp import REVERSE, TRAIN, _assert_same_metrics

SETTINGS = [*REVERSE, "data.batch_size=32", "logger=[csv,wandb]"]  # 2 ranks × 32 = the 64 sequences
TWO_NODES = ["trainer=ddp", "trainer.devices=1", "trainer.num_nodes=2", "trainer.accelerator=cpu"]
LONG = "trainer.max_epochs=12"  # an epoch is one step: time to stop it within the run
TIMEOUT = 300


def _env(root: Path, **extra: str) -> dict:
    """This process's environment without a rank or rendezvous of its own, W&B offline in
    ``root`` (as tests/test_loggers.py's ``wandb_env``), other run folders under ``root/outputs``."""
    env = {k: v for k, v in os.environ.items() if k not in (
        "NODE_RANK", "GROUP_RANK", "LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "WANDB_MODE", "WANDB_API_KEY")}
    return {**env, "OMP_NUM_THREADS": "1", "HYDRA_FULL_ERROR": "0", "WANDB_SILENT": "true",
            "WANDB_CONFIG_DIR": str(root / "wandb_config"), "WANDB_CACHE_DIR": str(root / "wandb_cache"),
            "ATTNFLOW_OUTPUT_DIR": str(root / "outputs"), **extra}


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _start(root: Path, name: str, args: list, **env: str) -> subprocess.Popen:
    """The console script with ``args``, its console in ``root/<name>.log``."""
    with open(root / f"{name}.log", "w") as log:
        return subprocess.Popen([TRAIN, *args], cwd=ROOT, env=_env(root, **env), stdout=log,
                                stderr=subprocess.STDOUT)


def _nodes(root: Path, name: str, args: list) -> list:
    """Node 0 and node 1 of a 2-node run of ``args``, each a console script of its own."""
    port = _free_port()
    return [_start(root, f"{name}-node{rank}", args, NODE_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=port) for rank in (0, 1)]


def _wait(procs: list, grace: float = 30) -> list:
    """The exit statuses of ``procs``; one still running :data:`TIMEOUT` seconds on, or
    ``grace`` seconds after another failed (a node left alone waits for its peer), is killed."""
    deadline = time.time() + TIMEOUT
    while any(p.poll() is None for p in procs) and time.time() < deadline:
        if any(p.poll() not in (None, 0) for p in procs):
            deadline = min(deadline, time.time() + grace)
        time.sleep(0.1)
    for p in procs:
        if p.poll() is None:
            p.kill()
    return [p.wait() for p in procs]


def _logs(root: Path, name: str) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(root.glob(f"{name}*.log")))


def _metrics(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())


def _one_process(root: Path, *extra: str) -> dict:
    """The summary of ``REVERSE`` (with ``extra``) trained in this process on the whole training
    set as one batch: the metrics a world of two ranks of 32 sequences must give."""
    return train(compose_cfg([*REVERSE, "data.batch_size=64", "logger=none", *extra]), root / "one")


def _one_run(run: Path) -> None:
    """What one run writes, once: its record, CSV log, W&B run and checkpoints; no lock left, and
    no rank's Hydra log or record beside the first's."""
    assert sorted(p.name for p in run.iterdir()) == [
        ".hydra", "checkpoints", "config.yaml", "csv", "metrics.json", "train.log", "wandb"]
    assert [p.name for p in (run / "csv").iterdir()] == ["version_0"]
    assert len(list((run / "wandb").glob("offline-run-*"))) == 1
    assert sorted(p.name for p in (run / "checkpoints").glob("*.ckpt")) == sorted(
        [Path(_metrics(run)["best_checkpoint"]).name, "last.ckpt"])


@pytest.mark.slow
def test_two_nodes_train_one_run_with_the_metrics_of_one_node(tmp_path):
    two = tmp_path / "two"
    nodes = _nodes(tmp_path, "two", [*SETTINGS, *TWO_NODES, f"hydra.run.dir={two}"])
    one = _one_process(tmp_path)
    assert _wait(nodes) == [0, 0], _logs(tmp_path, "")
    assert not (tmp_path / "outputs").exists()  # node 1 trained in the pinned folder, as node 0
    _one_run(two)
    assert "cpu × 1 on each of 2 nodes" in (two / "train.log").read_text()
    _assert_same_metrics(_metrics(two), one)
    assert _metrics(two)["global_step"] == 2  # one step an epoch: the whole training set


def _stop_when_trained(procs: list, run: Path) -> list:
    """SIGTERM to each of ``procs`` once the run's first ``last.ckpt`` is written; their exit
    statuses."""
    deadline = time.time() + TIMEOUT
    while not (run / "checkpoints" / "last.ckpt").is_file() and time.time() < deadline:
        if any(p.poll() is not None for p in procs):
            break  # (ended before it was stopped: its status fails the test)
        time.sleep(0.02)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    return _wait(procs)


@pytest.mark.slow
def test_two_nodes_stopped_by_sigterm_resume_to_the_uninterrupted_metrics(tmp_path):
    run = tmp_path / "run"
    stopped = _stop_when_trained(_nodes(tmp_path, "run", [*SETTINGS, LONG, *TWO_NODES,
                                                          f"hydra.run.dir={run}"]), run)
    assert stopped == [128 + signal.SIGTERM] * 2, _logs(tmp_path, "run")
    assert f"attnflow-train resume={run}" in (tmp_path / "run-node0.log").read_text()
    assert (run / "checkpoints" / "last.ckpt").is_file() and not (run / ".lock").exists()
    assert not (run / "metrics.json").exists()
    resuming = _nodes(tmp_path, "resumed", [f"resume={run}"])
    one = _one_process(tmp_path, LONG)
    assert _wait(resuming) == [0, 0], _logs(tmp_path, "resumed")
    resumed = _metrics(run)
    _assert_same_metrics(resumed, one)
    assert resumed["global_step"] == 12 and not (run / ".lock").exists()
    assert [p.name for p in run.glob("resume-*.yaml")] == ["resume-1.yaml"]  # one record, node 0's
    assert 0 < yaml.safe_load((run / "resume-1.yaml").read_text())["from"]["global_step"] < 12
    first, second = sorted((run / "wandb").glob("offline-run-*"))  # the same W&B run, continued
    assert first.name.rsplit("-", 1)[1] == second.name.rsplit("-", 1)[1]


LAUNCHERS = ("NODE_RANK", "GROUP_RANK", "LOCAL_RANK", "RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID",
             "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE", "SLURM_JOB_NAME", "SLURM_PROCID", "LSB_JOBID")
SLURM = {"SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "2", "SLURM_JOB_NAME": "train"}
TORCHRUN = {"TORCHELASTIC_RUN_ID": "job", "WORLD_SIZE": "4"}


@pytest.mark.parametrize("env, first", [
    ({}, True),                                               # one process
    ({"NODE_RANK": "0", "MASTER_ADDR": "127.0.0.1"}, True),   # Lightning's variables: node 0
    ({"NODE_RANK": "1"}, False),                              # ... another node
    ({"GROUP_RANK": "1"}, False),
    ({"NODE_RANK": "0", "LOCAL_RANK": "1"}, False),           # a process Lightning started
    ({**TORCHRUN, "RANK": "0", "GROUP_RANK": "0", "LOCAL_RANK": "0"}, True),
    ({**TORCHRUN, "RANK": "2", "GROUP_RANK": "1", "LOCAL_RANK": "0"}, False),
    ({**SLURM, "SLURM_PROCID": "0", "NODE_RANK": "1"}, True),  # srun's ranks, not a stray variable
    ({**SLURM, "SLURM_PROCID": "2"}, False),
])
def test_the_first_rank_is_global_rank_0_of_all_nodes(env, first, monkeypatch):
    """Who holds the run folder, decided before a Trainer exists, as Lightning ranks processes."""
    for name in LAUNCHERS:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert first_rank() is first
