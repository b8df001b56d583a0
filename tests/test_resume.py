"""Resume: ``attnflow-train resume=<run dir>`` continues a stopped run in its own directory with
its own config, and a run killed (SIGKILL) or interrupted (Ctrl-C) and resumed ends with exactly
the metrics and weights of an uninterrupted run; refused resumes name what is wrong and leave the
run directory as it was; checkpoints are written atomically and read with weights_only=True."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml

from attnflow.training.resume import ResumeError, from_hydra, prepare_argv, resume_config
from attnflow.training.run import train
from attnflow.training.runlock import RunInUseError
from attnflow.io.weights import atomic_torch_save
from attnflow.training.state import SafeCheckpointIO
from support import FAST, ROOT, compose_cfg, train_cli

# The default experiment, small: 16 steps an epoch, 2 epochs, dropout on (so that the random
# stream matters, not only the shuffle), best checkpoint by val/loss (the last epoch: its
# metrics are those of the resumed part).
STEPS = 16
ARGS = ["data.train_size=512", "data.val_size=32", "data.test_size=32", "data.batch_size=32",
        "model.dropout=0.2", "trainer.accelerator=cpu", "trainer.max_epochs=2",
        "trainer.deterministic=true", "trainer.enable_model_summary=false",
        "callbacks.progress_bar=none", "callbacks.attention_maps.examples=0",
        "callbacks.checkpoint.monitor=val/loss"]
TIMEOUT = 240


def _env(root: Path) -> dict:
    # the children compute with this process's thread count; W&B offline; outputs under root
    return {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads()), "WANDB_MODE": "offline",
            "ATTNFLOW_OUTPUT_DIR": str(root / "outputs"), "PYTHONPATH": str(ROOT)}


def _start(root: Path, name: str, args) -> subprocess.Popen:
    log = open(root / f"{name}.log", "w")
    return subprocess.Popen([sys.executable, "-m", "attnflow.cli.train", *args], cwd=root,
                            env=_env(root), stdout=log, stderr=subprocess.STDOUT)


def _log(root: Path, name: str) -> str:
    return (root / f"{name}.log").read_text()


def _tree(run: Path) -> dict:
    """Every file of a run directory: its bytes' digest and mtime."""
    return {str(p.relative_to(run)): (hashlib.sha1(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(run.rglob("*")) if p.is_file()}


def _ckpt(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """A run 'k' SIGKILLed just after its first epoch's checkpoint (so, early in the second) and
    a run 's' interrupted there with SIGINT (W&B offline too), each a new interpreter running
    ``python -m attnflow.cli.train`` (not a fork of this process: a fork after OpenMP's thread pool
    started can hang in the child); 'k' resumed with ``attnflow-train resume=<dir>`` (its
    ``main()`` in this process), 's' from Python (``resume_config``);
    the uninterrupted reference 'u' trains in this process meanwhile (with this process's thread
    count, which the children get too)."""
    root = tmp_path_factory.mktemp("resume")
    procs = {"k": _start(root, "k", [*ARGS, f"hydra.run.dir={root / 'k'}"]),
             "s": _start(root, "s", [*ARGS, "logger=[csv,wandb]", f"hydra.run.dir={root / 's'}"])}
    out = {"root": root}

    abort = threading.Event()

    def stop_both():  # in a thread, while the reference trains here
        pending, deadline = {"k", "s"}, time.time() + TIMEOUT
        while pending and time.time() < deadline and not abort.is_set():
            for name in list(pending):
                proc, last = procs[name], root / name / "checkpoints" / "last.ckpt"
                if proc.poll() is not None:
                    out[f"{name}_rc"] = proc.poll()  # ended before it was stopped: fails below
                    pending.discard(name)
                elif last.is_file():  # the end of the first epoch (written atomically: whole)
                    time.sleep(0.05)
                    os.kill(proc.pid, signal.SIGKILL if name == "k" else signal.SIGINT)
                    out[f"{name}_rc"] = proc.wait(TIMEOUT)
                    out[f"{name}_last"] = _ckpt(last)
                    out[f"{name}_tree"] = _tree(root / name)
                    pending.discard(name)
            time.sleep(0.02)

    stopper = threading.Thread(target=stop_both)
    stopper.start()
    before = torch.are_deterministic_algorithms_enabled()
    try:
        train(compose_cfg(ARGS), root / "u")
        stopper.join()
        for name in ("k", "s"):
            assert f"{name}_last" in out, f"run {name} was not stopped:\n{_log(root, name)[-3000:]}"
        with pytest.MonkeyPatch.context() as mp:  # the console script's main(), in this process
            mp.setenv("WANDB_MODE", "offline")
            mp.setenv("ATTNFLOW_OUTPUT_DIR", str(root / "outputs"))
            out["k2_rc"] = train_cli(mp, f"resume={root / 'k'}")
        train(resume_config(root / "s"), root / "s")
    finally:
        torch.use_deterministic_algorithms(before)
        abort.set()
        stopper.join(TIMEOUT)
        for proc in procs.values():
            if proc.poll() is None:  # a failure above: leave no run behind
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(TIMEOUT)
    return out


def _metrics(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())


def _same_result(resumed: Path, reference: Path) -> None:
    ref, got = _metrics(reference), _metrics(resumed)
    # the best checkpoint is the last epoch's, so its metrics are those of the resumed part
    assert Path(ref["best_checkpoint"]).name == f"epoch1-step{2 * STEPS}.ckpt", ref
    assert Path(got["best_checkpoint"]).name == Path(ref["best_checkpoint"]).name
    assert got["metrics"] == ref["metrics"]  # exactly
    assert got["global_step"] == ref["global_step"] == 2 * STEPS
    a, b = _ckpt(resumed / "checkpoints" / "last.ckpt"), _ckpt(reference / "checkpoints" / "last.ckpt")
    assert a["state_dict"].keys() == b["state_dict"].keys()
    for key in a["state_dict"]:
        assert torch.equal(a["state_dict"][key], b["state_dict"][key]), key


@pytest.mark.slow
def test_sigkill_then_resume_gives_the_uninterrupted_metrics(stopped):
    root = stopped["root"]
    assert stopped["k_rc"] == -signal.SIGKILL
    assert stopped["k_last"]["global_step"] == STEPS  # killed in the second epoch
    assert "metrics.json" not in stopped["k_tree"]
    assert ".lock" in stopped["k_tree"]  # the killed run's, stale: the resume takes it over
    assert stopped["k2_rc"] == 0
    assert not (root / "k" / ".lock").exists()
    _same_result(root / "k", root / "u")
    # the run's record is kept: config.yaml and .hydra/ as they were, the killed run's log too
    after = _tree(root / "k")
    for name in ("config.yaml", ".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml",
                 "csv/version_0/hparams.yaml"):
        assert after[name] == stopped["k_tree"][name], name
    assert (root / "k" / "csv" / "version_1" / "metrics.csv").is_file()
    record = yaml.safe_load((root / "k" / "resume-1.yaml").read_text())
    assert record["from"]["global_step"] == STEPS and record["changed"] == {}
    assert "resume=" in record["command"]


@pytest.mark.slow
def test_ctrl_c_saves_a_resumable_checkpoint_mid_epoch_and_finishes_wandb(stopped):
    root, run = stopped["root"], stopped["root"] / "s"
    assert stopped["s_rc"] == 128 + signal.SIGINT
    log = _log(root, "s")
    assert f"attnflow-train resume={run}" in log, log[-3000:]
    last = stopped["s_last"]
    assert STEPS < last["global_step"] < 2 * STEPS  # within the second epoch
    position = last["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
    assert position["trained"] == last["global_step"] - STEPS
    # the W&B run was finished (exit code 1: interrupted); the resumed run is the same W&B run
    first, second = sorted((run / "wandb").glob("offline-run-*"))
    debug = (first / "logs" / "debug.log").read_text()
    assert "finishing run" in debug and "got exitcode: 1" in debug
    assert first.name.rsplit("-", 1)[1] == second.name.rsplit("-", 1)[1] == last["attnflow_wandb_run_id"]
    _same_result(run, root / "u")  # resumed at the batch after the last trained one


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1])
def test_a_preemption_signal_mid_epoch_saves_exits_128_plus_it_and_resumes_exactly(
        stopped, signum, monkeypatch, capsys):
    """SIGTERM (a scheduler's, ``timeout``'s) and SIGUSR1 (SLURM's warning) sent to a run in its
    second epoch: last.ckpt after the running step, the resume command, exit 128 + signal; the
    resumed run equals the uninterrupted one."""
    run = stopped["root"] / signal.Signals(signum).name
    last = run / "checkpoints" / "last.ckpt"
    code = _signalled(signum, run, monkeypatch, *ARGS, "logger=csv", f"hydra.run.dir={run}")
    assert code == 128 + signum
    assert f"attnflow-train resume={run}" in capsys.readouterr().err
    assert STEPS < _ckpt(last)["global_step"] < 2 * STEPS and not (run / "metrics.json").exists()
    train(resume_config(run), run)
    _same_result(run, stopped["root"] / "u")


def _signalled(signum: int, under: Path, monkeypatch, *args: str) -> int:
    """attnflow-train's exit status with ``args``, sent ``signum`` once a ``last.ckpt`` is under
    ``under`` (the first epoch's end)."""
    sent = threading.Event()

    def send():
        deadline = time.time() + TIMEOUT
        while not list(under.glob("**/checkpoints/last.ckpt")) and time.time() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signum)
        sent.set()

    sender = threading.Thread(target=send)
    sender.start()
    try:
        code = train_cli(monkeypatch, *args)
    finally:
        sender.join(TIMEOUT)
    assert sent.is_set()
    return code


@pytest.mark.slow
def test_a_slurm_job_warned_with_sigusr1_is_requeued_and_continues_its_run(stopped, tmp_path, monkeypatch,
                                                                           capsys):
    """In a SLURM batch job (its variables set, ``scontrol`` a script recording its arguments),
    SIGUSR1 saves last.ckpt, requeues the job and leaves a note naming the run; the requeued job
    runs the same command (here: a new time-stamped folder each time) and continues that run to
    the uninterrupted run's metrics."""
    calls, scontrol = tmp_path / "calls", tmp_path / "bin" / "scontrol"
    scontrol.parent.mkdir()
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    scontrol.chmod(0o755)
    monkeypatch.setenv("PATH", f"{scontrol.parent}:{os.environ['PATH']}")
    for name, value in {"SLURM_JOB_ID": "4242", "SLURM_NTASKS": "1", "SLURM_JOB_NAME": "train",
                        "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
                        "SLURM_RESTART_COUNT": "0", "ATTNFLOW_OUTPUT_DIR": str(tmp_path / "out")}.items():
        monkeypatch.setenv(name, value)
    args = [*ARGS, "logger=csv"]
    assert _signalled(signal.SIGUSR1, tmp_path / "out", monkeypatch, *args) == 128 + signal.SIGUSR1
    assert "SLURM job 4242 requeued: it continues this run" in capsys.readouterr().err
    assert calls.read_text() == "requeue 4242\n"
    note = tmp_path / "out" / ".requeued" / "4242"
    run = Path(note.read_text().strip())
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert train_cli(monkeypatch, *args) == 0
    assert f"a requeued SLURM job: attnflow-train resume={run}" in capsys.readouterr().err
    assert not note.exists() and [p.parent for p in (tmp_path / "out").glob("*/*/config.yaml")] == [run]
    _same_result(run, stopped["root"] / "u")


def test_a_signal_outside_the_training_loop_stops_at_once_with_its_status():
    from attnflow.training.preemption import Interrupted, StopOnSignal

    stop = StopOnSignal("run")
    with pytest.raises(Interrupted) as err:  # not training: validation or test after the fit
        stop._handler(signal.SIGTERM, None)
    assert err.value.code == 143
    stop.training = True
    stop._handler(signal.SIGUSR1, None)  # the first, while training: a stop after this step
    assert stop.requested == signal.SIGUSR1
    with pytest.raises(Interrupted) as err:  # the second: at once
        stop._handler(signal.SIGINT, None)
    assert err.value.code == 130


@pytest.mark.slow
def test_one_writer_per_run_folder(tmp_path, monkeypatch, capsys):
    """Two runs started at once in one folder: one trains, the other is refused before it writes;
    a resume of the live run and a Python ``train`` there are refused too, changing nothing; the
    lock goes with the run."""
    run = tmp_path / "run"
    args = [*ARGS, "trainer.max_epochs=50", "logger=csv", f"hydra.run.dir={run}"]
    procs = [_start(tmp_path, name, [*args, f"seed={seed}"]) for seed, name in ((1, "a"), (2, "b"))]
    try:
        _poll_until(lambda: any(p.poll() is not None for p in procs))
        loser = next(p for p in procs if p.poll() is not None)
        live = next(p for p in procs if p is not loser)
        name = "a" if loser is procs[0] else "b"
        assert loser.returncode == 2, _log(tmp_path, name)
        assert re.search(rf"{run} (is in use by pid {live.pid} on {socket.gethostname()}|already holds a run)",
                         _log(tmp_path, name)), _log(tmp_path, name)
        _poll_until(lambda: (run / "checkpoints" / "last.ckpt").is_file() or live.poll() is not None)
        assert live.poll() is None and f"pid {live.pid} on" in (run / ".lock").read_text()
        record = {p: (run / p).read_bytes() for p in ("config.yaml", ".hydra/config.yaml")}
        assert train_cli(monkeypatch, f"resume={run}") == 2
        assert f"{run} is in use by pid {live.pid}" in capsys.readouterr().err
        with pytest.raises(RunInUseError):
            train(compose_cfg(ARGS), run)
        assert {p: (run / p).read_bytes() for p in record} == record
        assert not list(run.glob("resume-*.yaml"))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
    assert live.wait(TIMEOUT) == 128 + signal.SIGTERM and not (run / ".lock").exists()


def _poll_until(done, timeout=TIMEOUT):
    deadline = time.time() + timeout
    while not done() and time.time() < deadline:
        time.sleep(0.05)


# -- the same seed twice -------------------------------------------------------------------------------
@pytest.fixture
def deterministic_off_after():
    before = torch.are_deterministic_algorithms_enabled()
    yield
    torch.use_deterministic_algorithms(before)


@pytest.mark.slow
def test_the_same_seed_gives_the_same_metrics_twice(tmp_path, deterministic_off_after):
    args = [*FAST, "data.train_size=96", "data.val_size=32", "test=false", "model.dropout=0.2",
            "trainer.deterministic=true", "logger=none", "callbacks.attention_maps.examples=0"]
    first = train(compose_cfg(args), tmp_path / "a")
    second = train(compose_cfg(args), tmp_path / "b")
    assert first["metrics"] == second["metrics"]
    other = train(compose_cfg([*args, "seed=7"]), tmp_path / "c")  # the check can tell seeds apart
    assert other["metrics"] != first["metrics"]


# -- resume from Python, extension, records ------------------------------------------------------------------
TINY = [*FAST, "data.train_size=128", "trainer.max_epochs=1", "logger=csv",
        "callbacks.attention_maps.examples=0"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished one-epoch run of the default experiment and one of reverse_transformer."""
    root = tmp_path_factory.mktemp("finished")
    train(compose_cfg([*TINY, "trainer.limit_val_batches=1"]), root / "default")
    train(compose_cfg([*TINY, "experiment=reverse_transformer", "trainer.limit_train_batches=1",
                       "trainer.limit_val_batches=1", "test=false"]), root / "transformer")
    return root


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


@pytest.mark.slow
def test_a_finished_run_is_extended_in_place_and_keeps_its_record(finished, tmp_path):
    run = _copy(finished / "default", tmp_path / "run")
    csv0 = (run / "csv" / "version_0" / "metrics.csv").read_text()
    config = (run / "config.yaml").read_text()
    steps = _ckpt(run / "checkpoints" / "last.ckpt")["global_step"]
    with pytest.raises(ResumeError, match="already finished.*trainer.max_epochs=<more>"):
        resume_config(run)
    cfg = resume_config(run, {"trainer.max_epochs": 2})
    assert cfg["trainer"]["max_epochs"] == 2 and cfg["resume"] == str(run.resolve())
    second = train(cfg, run)
    assert second["global_step"] == 2 * steps
    assert (run / "config.yaml").read_text() == config
    assert (run / "csv" / "version_0" / "metrics.csv").read_text() == csv0
    assert (run / "csv" / "version_1" / "metrics.csv").is_file()
    record = yaml.safe_load((run / "resume-1.yaml").read_text())
    assert record["changed"] == {"trainer.max_epochs": {"from": 1, "to": 2}}
    assert record["from"]["global_step"] == steps and "previous_metrics" in record


@pytest.mark.slow
@pytest.mark.parametrize("how", ["moved", "copied"])
def test_a_moved_or_copied_run_resumes_from_and_evaluates_its_own_checkpoints(finished, tmp_path,
                                                                             how):
    """The checkpoint callback's state names the best checkpoint by its absolute path: a resumed
    run moved since failed (after training) on the old folder's file, and a copy evaluated the
    original's best checkpoint and recorded it as its own. One epoch of 4 steps, validated at its
    end (the best checkpoint), then one more step without a validation: it stays the best."""
    run = tmp_path / "second"
    if how == "moved":  # (a run of its own: the folder its checkpoints name is gone)
        first = tmp_path / "first"
        train(compose_cfg([*TINY, "trainer.limit_val_batches=1"]), first)
        shutil.move(first, run)
    else:
        _copy(finished / "default", run)
    summary = train(resume_config(run, {"trainer.max_epochs": 3, "trainer.max_steps": 5}), run)
    assert summary["global_step"] == 5
    best = Path(summary["best_checkpoint"])
    assert best.name == "epoch0-step4.ckpt"
    assert best.parent == (run / "checkpoints").resolve() and best.is_file(), best
    assert json.loads((run / "metrics.json").read_text())["best_checkpoint"] == str(best)
    assert summary["metrics"]["test/loss"] > 0  # evaluated from it


@pytest.mark.parametrize("epochs, steps, trained", [(2, 5, None), (2, -1, 8), (-1, 6, 6), (3, 6, 6),
                                                    (3, 12, None), (3, 8, 8)])
@pytest.mark.slow
def test_a_step_limited_resume_from_an_epoch_end_trains_what_it_asks(finished, tmp_path, epochs,
                                                                      steps, trained):
    """From a checkpoint saved at the end of its one epoch (4 steps), a resume under
    trainer.max_steps whose max_epochs would end it first is refused (Lightning stopped such a run
    an epoch early: max_epochs=2, max_steps=5 trained nothing and exited 0); where max_steps ends
    it, or where one limit alone is set, it trains exactly to that limit."""
    run = _copy(finished / "default", tmp_path / "run")
    change = {"trainer.max_epochs": epochs, "trainer.max_steps": steps}
    if trained is None:
        with pytest.raises(ResumeError, match=r"saved at the end of epoch 1.*an epoch early; set one"):
            resume_config(run, change)
        return
    assert train(resume_config(run, change), run)["global_step"] == trained


@pytest.mark.slow
def test_a_resume_may_change_the_precision(finished, tmp_path):
    """E.g. a run continued on a CPU that emulates bf16: recorded, and a later resume still passes."""
    run = _copy(finished / "default", tmp_path / "run")
    cfg = resume_config(run, {"trainer.max_epochs": 2, "trainer.precision": "bf16-mixed"})
    assert cfg["trainer"]["precision"] == "bf16-mixed"
    second = train(cfg, run)
    assert second["precision"] == "bf16-mixed" and second["global_step"] > 0
    record = yaml.safe_load((run / "resume-1.yaml").read_text())
    assert record["changed"]["trainer.precision"] == {"from": "32-true", "to": "bf16-mixed"}
    third = resume_config(run, {"trainer.max_epochs": 3, "trainer.precision": "32-true"})  # config.yaml
    assert third["trainer"]["precision"] == "32-true"  # says 32-true, last.ckpt bf16-mixed: allowed


@pytest.mark.slow
def test_train_refuses_a_resume_whose_config_is_not_the_runs(finished, tmp_path):
    run = _copy(finished / "default", tmp_path / "run")
    cfg = resume_config(run, {"trainer.max_epochs": 2})
    cfg["model"]["encoder"]["hidden_dim"] = 32  # e.g. resume= with a composed config
    before = _tree(run)
    with pytest.raises(ResumeError, match="'model.encoder.hidden_dim' would change the resumed run"):
        train(cfg, run)
    assert _tree(run) == before
    cfg = resume_config(run, {"trainer.max_epochs": 2})
    with pytest.raises(ResumeError, match="in its own directory"):
        train(cfg, tmp_path / "elsewhere")


# -- refused resumes (the console script's checks, before Hydra) ---------------------------------------------
def _main(monkeypatch, capsys, *args) -> str:
    """attnflow-train's main() with ``args``, which must be refused (exit 2); its message."""
    assert train_cli(monkeypatch, *args) == 2
    return capsys.readouterr().err


@pytest.mark.slow
def test_refused_resumes_name_the_problem_and_change_nothing(finished, tmp_path, monkeypatch, capsys):
    run = _copy(finished / "default", tmp_path / "run")
    before = _tree(run)
    cases = [
        ([f"resume={tmp_path / 'missing'}"], "not an attnflow run directory"),
        ([f"resume={run / 'config.yaml'}"], "not an attnflow run directory"),
        ([f"resume={tmp_path}"], "not an attnflow run directory"),
        ([f"resume={run}", "trainer.max_epochs=3", "model.encoder.hidden_dim=32"],
         "'model.encoder.hidden_dim' would change the resumed run"),
        ([f"resume={run}", "scorer=dot", "trainer.max_epochs=3"], "'scorer' would change"),
        ([f"resume={run}", "experiment=reverse_transformer", "trainer.max_epochs=3"],
         "the run is experiment 'default', the command line names experiment=reverse_transformer"),
        ([f"resume={run}"], "already finished"),
        ([f"resume={run}", "trainer.max_epochs=0"], "give trainer.max_epochs more than 0"),
        ([f"resume={run}", "trainer.max_epochs=3", "trainer.max_steps=1"], "trainer.max_steps=1, so nothing"),
        ([f"resume={run}", "-m", "trainer.max_epochs=3"], "it takes no -m"),
        ([f"resume={run}", "trainer.max_epochs=3", f"hydra.run.dir={tmp_path / 'x'}"], "names another"),
        ([f"hydra.run.dir={run}"], "already holds a run (config.yaml); a new run there would overwrite"),
    ]
    for args, message in cases:
        err = _main(monkeypatch, capsys, *args)
        assert message in err, (args, err)
        assert err.startswith("attnflow: ") and "Traceback" not in err
    assert _tree(run) == before


@pytest.mark.slow
def test_a_finished_run_resumed_with_only_max_time_trains_on_or_is_refused(finished, tmp_path, monkeypatch,
                                                                          capsys):
    """trainer.max_time is a length too, but it skipped the check that the run's own epoch and
    step limits leave something to train: a run that had reached its max_steps, resumed with only
    trainer.max_time, trained no step and rewrote its metrics.json (epochs 1 -> 0) with exit 0.
    Refused before anything is written, naming the limit reached; a run that its max_time stopped
    trains on under a larger one."""
    run = tmp_path / "steps"
    train(compose_cfg([*TINY, "trainer.max_steps=3", "test=false"]), run)  # 4 steps an epoch
    before = _tree(run)
    err = _main(monkeypatch, capsys, f"resume={run}", "trainer.max_time=00:00:10:00")
    assert err == (f"attnflow: resume={run}: the run has trained 3 steps already and "
                   f"trainer.max_steps=3 (the run's own limit), so nothing would be trained; give "
                   f"trainer.max_steps more than 3 (or -1: no limit)\n"), err
    with pytest.raises(ResumeError, match=r"trainer\.max_steps=3 \(the run's own limit\)"):
        resume_config(run, {"trainer.max_time": "00:00:10:00"})
    assert _tree(run) == before
    timed = tmp_path / "timed"
    steps = 100_000  # out of reach: both parts end by their time, whatever the machine's speed
    first = train(compose_cfg([*TINY, "trainer.max_epochs=-1", f"trainer.max_steps={steps}",
                               "trainer.max_time=00:00:00:01", "trainer.limit_val_batches=1",
                               "test=false"]), timed)
    assert 0 < first["global_step"] < steps  # stopped by its time
    cfg = resume_config(timed, {"trainer.max_time": "00:00:00:03"})  # the restored clock goes on
    assert first["global_step"] < train(cfg, timed)["global_step"] < steps  # trained on


@pytest.mark.slow
def test_a_new_run_in_a_folder_that_holds_one_is_refused_and_changes_nothing(finished, tmp_path):
    """E.g. a sweep job whose folder an earlier sweep used (the CLI refuses most such sweeps
    before they start; this is the last guard, before anything is written)."""
    run = _copy(finished / "default", tmp_path / "run")
    before = _tree(run)
    with pytest.raises(ResumeError, match=r"already holds a run \(config.yaml\); a new run there would "
                                          r"overwrite its record, metrics and checkpoints"):
        train(compose_cfg([*TINY, "trainer.limit_val_batches=1"]), run)
    assert _tree(run) == before


@pytest.mark.slow
def test_a_run_without_last_ckpt_or_with_a_truncated_one(finished, tmp_path):
    run = _copy(finished / "default", tmp_path / "run")
    last = run / "checkpoints" / "last.ckpt"
    data = last.read_bytes()
    last.unlink()
    with pytest.raises(ResumeError, match=r"no checkpoints/last.ckpt\. Its checkpoints: epoch0"):
        prepare_argv([f"resume={run}", "trainer.max_epochs=2"])
    kept = {p: p.read_bytes() for p in (run / "checkpoints").glob("*.ckpt")}
    for p in kept:
        p.unlink()
    with pytest.raises(ResumeError, match=r"no checkpoints/last.ckpt: nothing to continue"):
        prepare_argv([f"resume={run}", "trainer.max_epochs=2"])
    last.write_bytes(data[: len(data) // 2])  # a kill while writing, without atomic saves
    with pytest.raises(ResumeError, match="last.ckpt: its bytes do not match its digest.*no other"):
        prepare_argv([f"resume={run}", "trainer.max_epochs=2"])
    last.with_name("last.ckpt.sha256").unlink()  # (as an older run's, without a digest)
    with pytest.raises(ResumeError, match="corrupt or truncated"):
        prepare_argv([f"resume={run}", "trainer.max_epochs=2"])
    # with the other checkpoints back, a resume falls back to the newest intact one
    # (tests/test_checkpoint_digests.py)


@pytest.mark.slow
def test_ckpt_path_of_another_model_is_refused_naming_fields(finished, tmp_path):
    other = finished / "transformer" / "checkpoints" / "last.ckpt"
    with pytest.raises(ResumeError, match=r"ckpt_path=.* another model.*model\.name: 'transformer'"):
        train(compose_cfg([*TINY, f"ckpt_path={other}"]), tmp_path / "new")
    assert not (tmp_path / "new" / "config.yaml").exists()
    own = finished / "default" / "checkpoints" / "last.ckpt"
    with pytest.raises(ResumeError, match="this run's own directory.*resume="):
        train(compose_cfg([*TINY, f"ckpt_path={own}"]), finished / "default")
    # weights alone (as callbacks.average keeps its snapshots): Lightning failed with a KeyError
    # for its version key after the data and the model were made
    ckpt = torch.load(own, weights_only=True)
    snapshot = tmp_path / "epoch0.pt"
    torch.save({"state_dict": ckpt["state_dict"], "epoch": 0, "step": 4}, snapshot)
    with pytest.raises(ResumeError, match=r"ckpt_path=.*epoch0.pt holds weights only \(keys: epoch, "
                                          r"state_dict, step\), not a training state"):
        train(compose_cfg([*TINY, f"ckpt_path={snapshot}"]), tmp_path / "weights")
    assert not (tmp_path / "weights" / "config.yaml").exists()


@pytest.mark.slow
def test_ckpt_path_of_another_run_chooses_the_new_runs_own_best_and_checks_its_length(finished, tmp_path):
    """The source run's best checkpoint was mapped into the new run's folder, where no such file
    is: wherever the new epochs did not beat its score, the final validation failed after training
    (CheckpointError, no metrics.json). And a length the checkpoint had reached trained nothing,
    then failed alike, leaving config.yaml and logs; resume= refused that before any work."""
    source = _copy(finished / "default", tmp_path / "source")
    before = _tree(source)
    last = source / "checkpoints" / "last.ckpt"
    with pytest.raises(ResumeError, match=rf"ckpt_path={last}: the checkpoint was saved after 4 "
                                          rf"steps, and trainer.max_steps=4, so nothing would "
                                          rf"be trained; give trainer.max_steps more than 4"):
        train(compose_cfg([*TINY, "trainer.limit_val_batches=1", "trainer.max_steps=4",
                           f"ckpt_path={last}"]), tmp_path / "same")
    assert not (tmp_path / "same" / "config.yaml").exists()
    new = tmp_path / "new"
    # the source's best score, made unbeatable: the new run's epoch is never better
    state = _ckpt(last)
    for key, value in state["callbacks"].items():
        if key.startswith("ModelCheckpoint{'monitor': 'val/"):
            score = torch.tensor(-1.0 if "'mode': 'min'" in key else 2.0)
            value["best_model_score"] = score
            value["best_k_models"] = {value["best_model_path"]: score}
    torch.save(state, tmp_path / "unbeatable.ckpt")
    summary = train(compose_cfg([*TINY, "trainer.limit_val_batches=1", "trainer.max_epochs=2",
                                 f"ckpt_path={tmp_path / 'unbeatable.ckpt'}"]), new)
    best = Path(summary["best_checkpoint"])
    assert best.parent == (new / "checkpoints").resolve() and best.is_file(), best
    assert json.loads((new / "metrics.json").read_text())["best_checkpoint"] == str(best)
    assert _tree(source) == before  # nothing of the other run deleted or rewritten


@pytest.mark.slow
def test_resume_last_takes_the_newest_run_of_the_experiment(finished, tmp_path):
    root = tmp_path / "outputs"
    runs = {}
    for i, (src, exp) in enumerate([("default", None), ("default", None), ("transformer", "reverse_transformer")]):
        run = _copy(finished / src, root / "2025-01-01" / f"run{i}")
        (run / ".hydra").mkdir()
        (run / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump(
            {"hydra": {"runtime": {"choices": {"experiment": exp}}}}))
        (run / "metrics.json").unlink()  # stopped runs (at their length: resumed with more epochs)
        os.utime(run / "checkpoints" / "last.ckpt", (1e9 + i, 1e9 + i))
        runs[i] = run.resolve()
    argv = prepare_argv(["resume=last", f"paths.output_root={root}", "trainer.max_epochs=3"])
    assert f"resume={runs[1]}" in argv and f"hydra.run.dir={runs[1]}" in argv
    assert "hydra.output_subdir=null" in argv
    os.utime(runs[0] / "checkpoints" / "last.ckpt", (2e9, 2e9))
    assert f"resume={runs[0]}" in prepare_argv(["resume=last", f"paths.output_root={root}", "trainer.max_epochs=3"])
    argv = prepare_argv(["experiment=reverse_transformer", "resume=last", f"paths.output_root={root}",
                         "trainer.max_epochs=3", "logger=[csv,wandb]"])
    assert f"resume={runs[2]}" in argv and "trainer.max_epochs=3" in argv
    assert not any(a.startswith("experiment=") for a in argv)
    with pytest.raises(ResumeError, match="no run of experiment 'gat_cora'"):
        prepare_argv(["experiment=gat_cora", "resume=last", f"paths.output_root={root}"])


def test_resume_null_is_a_new_run_not_the_current_directory(tmp_path, monkeypatch):
    # resume=null is conf/train.yaml's default (a new run), also when typed, e.g. in a sweep;
    # it used to be read as resume=<cwd> and refused as "not an attnflow run directory"
    monkeypatch.chdir(tmp_path)
    for args in (["resume=null", "trainer.max_epochs=3"], ["resume=", "scorer=dot"],
                 ["-m", "resume=null", "scorer=dot,general"]):
        assert prepare_argv(args) == args
    cfg = compose_cfg([*FAST, "resume=null"])
    assert cfg.resume is None and from_hydra(cfg) is cfg


# -- checkpoint files ------------------------------------------------------------------------------------------
def test_a_failure_while_saving_leaves_the_previous_checkpoint_whole(tmp_path, monkeypatch):
    io = SafeCheckpointIO()
    path = tmp_path / "checkpoints" / "last.ckpt"
    io.save_checkpoint({"state_dict": {"w": torch.ones(3)}, "epoch": 1}, path)

    def save_half_then_die(obj, f, *args, **kwargs):  # a kill (or a full disk) mid-write
        f.write(b"x" * 100)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", save_half_then_die)
    with pytest.raises(OSError, match=f"No space left on device: '{path}'"):
        io.save_checkpoint({"state_dict": {"w": torch.zeros(3)}, "epoch": 2}, path)
    monkeypatch.undo()
    kept = io.load_checkpoint(path)
    assert kept["epoch"] == 1 and torch.equal(kept["state_dict"]["w"], torch.ones(3))
    # (no temporary left)
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.ckpt", "last.ckpt.sha256"]


def test_the_random_streams_survive_a_weights_only_checkpoint(tmp_path):
    import random

    import numpy as np

    from attnflow.data.resumable import rng_state, set_rng_state

    torch.manual_seed(3), np.random.seed(3), random.seed(3)
    np.random.normal()  # a cached Gaussian in numpy's state
    path = tmp_path / "state.ckpt"
    SafeCheckpointIO().save_checkpoint({"state_dict": {}, "rng": rng_state()}, path)

    def draws():
        return torch.rand(4).tolist(), np.random.normal(size=3).tolist(), [random.random() for _ in range(3)]

    expected = draws()
    torch.manual_seed(9), np.random.seed(9), random.seed(9)
    set_rng_state(SafeCheckpointIO().load_checkpoint(path)["rng"])  # read with weights_only=True
    assert draws() == expected


class _Payload:
    def __reduce__(self):
        return (Path.touch, (Path(os.environ["ATTNFLOW_TEST_MARKER"]),))


@pytest.mark.slow
def test_checkpoints_are_read_weights_only_also_on_resume(finished, tmp_path, monkeypatch):
    run = _copy(finished / "default", tmp_path / "run")
    marker = tmp_path / "unpickled"
    monkeypatch.setenv("ATTNFLOW_TEST_MARKER", str(marker))
    last = run / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, weights_only=True)
    ckpt["payload"] = _Payload()
    atomic_torch_save(ckpt, last)  # (its digest matches: torch's reading refuses it)
    for other in (run / "checkpoints").glob("epoch*.ckpt"):  # (no intact one to fall back to)
        other.unlink()
    with pytest.raises(ResumeError, match=r"not unpickled \(weights_only=True\)"):
        prepare_argv([f"resume={run}", "trainer.max_epochs=2"])
    from attnflow.io.checkpoints import CheckpointError

    with pytest.raises(CheckpointError, match="weights_only"):  # Lightning's load goes through this
        SafeCheckpointIO().load_checkpoint(last)
    assert not marker.exists()


def test_last_ckpt_is_the_state_after_the_last_epoch_whatever_the_metric_did(tmp_path):
    cfg = compose_cfg([*FAST, "data.train_size=64", "data.val_size=32", "data.test_size=32",
                       "callbacks.attention_maps.examples=0",
                       "trainer.max_epochs=2", "task.optim.lr=1e-6", "logger=none"])  # ~no progress
    summary = train(cfg, tmp_path)
    last = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert last["epoch"] == 1 and last["global_step"] == summary["global_step"]
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("*.ckpt")) == sorted(
        {"last.ckpt", summary["best_checkpoint"].split("/")[-1]})


@pytest.mark.slow
def test_a_run_stopped_between_validations_saves_its_final_state_in_last_ckpt(tmp_path):
    """max_steps in the middle of an epoch, before any validation: last.ckpt holds the weights
    after the last step, as a state within that epoch, so that a resumed run continues at the
    next batch and ends where the uninterrupted run does (the checkpoint Lightning wrote at the
    cut epoch's end made the resumed run count the rest of that epoch as the next one)."""
    args = [*FAST, "data.train_size=256", "callbacks.attention_maps.examples=0", "test=false",
            "logger=none", "trainer.max_epochs=2", "task.optim.scheduler=none"]
    summary = train(compose_cfg([*args, "trainer.max_steps=5"]), tmp_path / "cut")
    assert summary["global_step"] == 5  # 8 batches an epoch: stopped mid-epoch, never validated
    last = torch.load(tmp_path / "cut" / "checkpoints" / "last.ckpt", map_location="cpu",
                      weights_only=True)
    assert last["global_step"] == 5 and last["epoch"] == 0
    resumed = train(compose_cfg([*args, "trainer.max_steps=12", f"resume={tmp_path / 'cut'}"]),
                    tmp_path / "cut")
    whole = train(compose_cfg([*args, "trainer.max_steps=12"]), tmp_path / "whole")
    assert resumed["global_step"] == whole["global_step"] == 12  # 8 + 4: into the second epoch
    assert resumed["metrics"] == whole["metrics"]  # exactly: the same batches in the same order


def _validations(run: Path) -> tuple:
    """({checkpoint file name: val/loss} of every validation in fit that the run's CSV logs hold,
    over all their versions (the first part and each resume), named as the top-k files are
    (Lightning logs a validation in fit at the step count before its batch's step is counted:
    CSV step s is global step s + 1); [val/loss of the validation of the best checkpoint after
    each part's fit] (logged as best/val/loss: attnflow.training.run.train validates it then)."""
    import csv

    fit, best = {}, []
    for log in sorted(run.glob("csv/version_*/metrics.csv")):
        rows = list(csv.DictReader(log.open()))
        fit.update({f"epoch{r['epoch']}-step{int(r['step']) + 1}.ckpt": float(r["val/loss"])
                    for r in rows if r.get("val/loss")})
        best += [float(r["best/val/loss"]) for r in rows if r.get("best/val/loss")]
    return fit, best


@pytest.mark.parametrize("extra, stops", [
    ([], (5, 9)),  # 2 steps an epoch, validated at its end: cut after epoch 2's and 4's first batch
    (["data.train_size=128", "+trainer.val_check_interval=0.5"], (6, 10))])  # 4 an epoch, validated
@pytest.mark.slow
def test_top_k_holds_the_best_validated_checkpoints_across_max_steps_stops_and_resumes(  # every 2nd
        tmp_path, extra, stops):
    """save_top_k=2 and max_steps within an epoch. Cut between validations, Lightning wrote a
    top-k checkpoint at the cut epoch's end scored with the previous validation's loss; cut at a
    validation within the epoch, the top-k checkpoint of that validation. Both came after
    last.ckpt, so its state lacked them (and the file each evicted): a resume never deleted them,
    and the run ended with three top-k files. The top-k files are the 2 best validations by the
    CSV logs, also after a resume, last.ckpt's checkpoint state names exactly them, and the best
    is the one validated after the fit."""
    run = tmp_path / "run"
    args = [*FAST, "data.train_size=64", "data.val_size=32", "callbacks.attention_maps.examples=0",
            "test=false", "logger=csv", "trainer.max_epochs=10", "task.optim.scheduler=none",
            "callbacks.checkpoint.save_top_k=2", "callbacks.checkpoint.monitor=val/loss", *extra]
    for steps in stops:
        cfg = (compose_cfg([*args, f"trainer.max_steps={steps}"]) if steps == stops[0]
               else resume_config(run, {"trainer.max_steps": steps}))
        summary = train(cfg, run)
        assert summary["global_step"] == steps
        scores, best = _validations(run)
        assert len(scores) == steps // 2  # every second step, none at a cut between validations
        top = sorted(scores, key=scores.get)[:2]
        files = {p.name for p in (run / "checkpoints").glob("*.ckpt")} - {"last.ckpt"}
        assert files == set(top), scores
        assert Path(summary["best_checkpoint"]).name == top[0]
        assert best[-1] == scores[top[0]]  # the final validation was of the best checkpoint
        state = next(v for k, v in _ckpt(run / "checkpoints" / "last.ckpt")["callbacks"].items()
                     if "'monitor': 'val/loss'" in k)
        assert {Path(p).name for p in state["best_k_models"]} == set(top)


@pytest.mark.slow
def test_a_step_limited_resume_from_an_unvalidated_epoch_end_trains_the_uninterrupted_batches(tmp_path):
    """A one-epoch run of 4 steps without validation (limit_val_batches=0), resumed with
    max_steps=6: Lightning 2.6 read its epoch-end checkpoint as 'epoch 0 not finished' and trained
    a fifth batch of epoch 0 (a new pass over its loader), then epoch 1's first. The resumed run
    trains epoch 1's first two batches and ends with the uninterrupted run's weights."""
    args = [*FAST, "data.train_size=128", "callbacks.attention_maps.examples=0", "test=false",
            "logger=none", "trainer.limit_val_batches=0", "task.optim.scheduler=none",
            "model.dropout=0.2"]
    train(compose_cfg(args), tmp_path / "cut")
    train(resume_config(tmp_path / "cut", {"trainer.max_epochs": -1, "trainer.max_steps": 6}),
          tmp_path / "cut")
    train(compose_cfg([*args, "trainer.max_epochs=-1", "trainer.max_steps=6"]), tmp_path / "whole")
    got, ref = (_ckpt(tmp_path / run / "checkpoints" / "last.ckpt") for run in ("cut", "whole"))
    batches = got["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]["completed"]
    # (last.ckpt is written at the last batch's end, before Lightning counts it: epoch 1's second
    # batch is batch 1 completed in the uninterrupted run; the extra batch made it epoch 1's first)
    assert (got["epoch"], got["global_step"], batches) == (ref["epoch"], ref["global_step"], 1)
    for key in ref["state_dict"]:
        assert torch.equal(got["state_dict"][key], ref["state_dict"][key]), key


@pytest.mark.slow
def test_a_finished_run_whose_last_epoch_was_not_validated_extends_by_steps_as_one_run(tmp_path):
    """check_val_every_n_epoch=2, 3 epochs of 4 steps: Lightning saves nothing at the unvalidated
    third epoch's end, so last.ckpt is the end of training's, with the epoch counted and its batch
    counters kept. Extended with max_steps=18, the resumed run ran an empty epoch 3, then trained
    epochs 4 and 5 with their shuffles where the uninterrupted run trained epochs 3 and 4: other
    weights. Now it equals the uninterrupted 18-step run, epoch counter and weights."""
    args = [*FAST, "data.train_size=128", "callbacks.attention_maps.examples=0", "test=false",
            "logger=none", "trainer.check_val_every_n_epoch=2", "trainer.limit_val_batches=1",
            "task.optim.scheduler=none", "model.dropout=0.2", "trainer.max_epochs=3"]
    train(compose_cfg(args), tmp_path / "cut")
    train(resume_config(tmp_path / "cut", {"trainer.max_epochs": -1, "trainer.max_steps": 18}),
          tmp_path / "cut")
    train(compose_cfg([*args, "trainer.max_epochs=-1", "trainer.max_steps=18"]), tmp_path / "whole")
    got, ref = (_ckpt(tmp_path / run / "checkpoints" / "last.ckpt") for run in ("cut", "whole"))
    assert (got["epoch"], got["global_step"]) == (ref["epoch"], ref["global_step"]) == (4, 18)
    for key in ref["state_dict"]:
        assert torch.equal(got["state_dict"][key], ref["state_dict"][key]), key


@pytest.mark.slow
def test_a_run_saved_without_its_block_defaults_resumes_changing_only_what_is_typed(tmp_path):
    """A run's config is now saved with every block default filled in; a run saved before held
    only what YAML and the command line set, so every filled-in field read as a change the resume
    refused. Such a run resumes, and its record names only what the command changed."""
    run = tmp_path / "run"
    train(compose_cfg([*FAST, "data.train_size=64", "test=false", "logger=none"]), run)
    last = run / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, weights_only=False)
    cfg = ckpt["attnflow_config"]  # as an older attnflow saved it: the defaults left out
    del cfg["task"]["optim"], cfg["model"]["embed_dim"]
    cfg["scorer"] = {"name": cfg["scorer"]["name"]}
    cfg["model"]["decoder"]["attention"]["scorer"] = dict(cfg["scorer"])
    torch.save(ckpt, last)
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    train(resume_config(run, {"trainer.max_epochs": 2}), run)
    record = yaml.safe_load((run / "resume-1.yaml").read_text())
    assert list(record["changed"]) == ["trainer.max_epochs"]
    assert _ckpt(last)["epoch"] == 1
