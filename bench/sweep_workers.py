"""Many workers on one Optuna study: attnflow's sweeper (``hparams_search=gat_cora_optuna`` on a
generated graph, no pruner, 150 epochs a trial) against a throwaway PostgreSQL server of its own.

Runs, each a fresh study on the same server, each process with ``OMP_NUM_THREADS=1`` and each
worker with its own ``hydra.sweep.dir``:

1. ``one worker``: one sweep command fills the study (``--trials`` trials);
2. ``three workers, one killed``: the same command three times at once; once worker 0's first
   trial wrote ``checkpoints/last.ckpt``, worker 0 gets SIGKILL; the other two finish the study;
3. ``n_jobs=2, SIGTERM`` (SQLite): one sweep with two trial processes, SIGTERM once both wrote
   last.ckpt; its exit status (goal 143) and the trial processes alive 5 s later (goal 0).

    python bench/sweep_workers.py                    # all three (~ 10 minutes on 4+ CPU cores)
    python bench/sweep_workers.py --trials 6 --epochs 60 --skip-sigterm   # a quicker look

Per run: wall time, trials by state, counted trials (not named by another's ``retry_of`` and
without ``surplus``), unique numbers, the killed worker's trials and their retries (with run
folders), and the recorded trial pids still alive at the end (goal 0). Writes
bench/results/sweep_workers.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import pg_server  # noqa: E402  (tests/pg_server.py: a throwaway PostgreSQL server)

TRAIN = str(Path(sys.executable).with_name("attnflow-train"))
ENV = dict(os.environ, OMP_NUM_THREADS="1")
BASE = ["hparams_search=gat_cora_optuna", "experiment=gat_synthetic", "data.num_nodes=120", "task.picture=false",
        "callbacks.attention_maps=null", "trainer.accelerator=cpu", "callbacks.progress_bar=none", "logger=csv",
        "hydra/sweeper/pruner=none", "callbacks.early_stopping=null", "callbacks.checkpoint.save_last=true"]


@contextmanager
def postgres():
    """(``database(name)`` → its URL, the server's major version): tests/pg_server.py's server."""
    try:
        with pg_server.server(max_connections=200) as database:
            yield database, pg_server.server_bindir().parent.name
    except pg_server.ServerUnavailable as why:
        sys.exit(str(why))


def alive(pids) -> list:
    """Those of ``pids`` still running (zombies count as gone)."""
    out = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        if "\nState:\tZ" not in state:
            out.append(pid)
    return out


def trials_yet(name: str, storage: str) -> list:
    import optuna
    try:
        return optuna.load_study(study_name=name, storage=storage).trials
    except Exception:  # (no study yet, or the SQLite file not there yet)
        return []


def wait_for(condition, timeout: float) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        if condition():
            return True
        time.sleep(0.5)
    return False


def worker(folder: Path, study: str, storage: str, trials: int, epochs: int, *extra: str) -> subprocess.Popen:
    cmd = [TRAIN, *BASE, f"trainer.max_epochs={epochs}", f"hydra.sweeper.n_trials={trials}",
           f"hydra.sweeper.study_name={study}", f"hydra.sweeper.storage={storage}",
           "hydra.sweeper.heartbeat_interval=2", "hydra.sweeper.grace_period=10",
           f"hydra.sweep.dir={folder}", *extra]
    return subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=open(folder.parent / f"{folder.name}.err", "w"))


def has_last(t) -> bool:
    run_dir = t.user_attrs.get("run_dir")
    return bool(run_dir) and (Path(run_dir) / "checkpoints" / "last.ckpt").is_file()


def summary(trials, wall: float, killed_folder: Path = None) -> dict:
    retried = {t.user_attrs.get("retry_of") for t in trials} - {None}
    counted = [t for t in trials if t.number not in retried and "surplus" not in t.user_attrs]
    out = {"wall_s": round(wall, 1), "trials": len(trials),
           "states": dict(collections.Counter(t.state.name for t in trials)),
           "counted": len(counted), "counted_complete": sum(t.state.name == "COMPLETE" for t in counted),
           "unique_numbers": len({t.number for t in trials}) == len(trials),
           "surplus": sum("surplus" in t.user_attrs for t in trials),
           "pids_alive": alive({t.user_attrs["pid"] for t in trials if "pid" in t.user_attrs})}
    if killed_folder is not None:
        mine = [t for t in trials if t.user_attrs.get("worker") == str(killed_folder)]
        out["killed"] = [{"number": t.number, "state": t.state.name, "run_dir": t.user_attrs.get("run_dir"),
                          "interrupted": t.user_attrs.get("interrupted"),
                          "retries": [{"number": r.number, "state": r.state.name, "run_dir": r.user_attrs.get("run_dir"),
                                       "same_run_dir": r.user_attrs.get("run_dir") == t.user_attrs.get("run_dir")}
                                      for r in trials if r.user_attrs.get("retry_of") == t.number]}
                         for t in mine]
    return out


def one_worker(root: Path, storage: str, args) -> dict:
    folder = (root / "one" / "w0").resolve()
    folder.mkdir(parents=True)
    start = time.time()
    code = worker(folder, "one", storage, args.trials, args.epochs).wait()
    found = summary(trials_yet("one", storage), time.time() - start)
    found["exit"] = [code]
    return found


def three_workers(root: Path, storage: str, args) -> dict:
    folders = [(root / "three" / f"w{i}").resolve() for i in range(3)]
    for f in folders:
        f.mkdir(parents=True)
    start = time.time()
    procs = [worker(f, "three", storage, args.trials, args.epochs) for f in folders]
    victim = str(folders[0])
    try:
        ok = wait_for(lambda: any(t.user_attrs.get("worker") == victim and t.state.name == "RUNNING" and has_last(t)
                                  for t in trials_yet("three", storage)), timeout=300)
        procs[0].kill()
        killed_at = round(time.time() - start, 1)
        procs[0].wait()
        codes = [-9] + [p.wait(timeout=args.timeout) for p in procs[1:]]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    wall = time.time() - start
    time.sleep(2)  # (the killed worker's orphaned trial process: its own exit)
    found = summary(trials_yet("three", storage), wall, folders[0])
    found.update(exit=codes, killed_at_s=killed_at, victim_had_last_ckpt=ok)
    return found


def sigterm(root: Path, args) -> dict:
    folder = (root / "sigterm").resolve()
    folder.mkdir(parents=True)
    storage = f"sqlite:///{folder}/optuna.db"
    cmd = [TRAIN, *BASE, "trainer.max_epochs=100000", "hydra.sweeper.n_jobs=2", "hydra.sweeper.n_trials=2",
           f"hydra.sweep.dir={folder}"]
    start = time.time()
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=open(root / "sigterm.err", "w"))
    name = "gat_cora_optuna"
    try:
        ok = wait_for(lambda: (lambda ts: len(ts) >= 2 and all(t.state.name == "RUNNING" and has_last(t)
                                                                for t in ts[:2]))(trials_yet(name, storage)), 300)
        pids = [t.user_attrs.get("pid") for t in trials_yet(name, storage)[:2]]
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    wall = time.time() - start
    time.sleep(5)
    trials = trials_yet(name, storage)
    found = summary(trials, wall)
    found.update(exit=[code], exit_143=code == 143, both_had_last_ckpt=ok, trial_pids=pids,
                 trial_pids_alive_after_5s=alive([p for p in pids if p]),
                 interrupted=[t.user_attrs.get("interrupted") for t in trials[:2]])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--epochs", type=int, default=150)
    parser.add_argument("--timeout", type=float, default=1800, help="seconds to wait for a worker")
    parser.add_argument("--skip-sigterm", action="store_true", help="leave out run 3")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "sweep_workers.json"))
    parser.add_argument("--keep", help="keep the sweep folders here (else a temporary folder)")
    args = parser.parse_args()
    found = {}
    with tempfile.TemporaryDirectory() as tmp, postgres() as (database, version):
        root = Path(args.keep or tmp)
        url = database("attnflow")
        found["one worker"] = one_worker(root, url, args)
        print("one worker:", json.dumps(found["one worker"]), flush=True)
        found["three workers, w0 killed"] = three_workers(root, url, args)
        print("three workers:", json.dumps(found["three workers, w0 killed"]), flush=True)
        if not args.skip_sigterm:
            found["n_jobs=2, SIGTERM (sqlite)"] = sigterm(root, args)
    print()
    print("| run | wall s | exit | states | counted (complete) | unique numbers | killed trial → retry (same run_dir) | recorded pids alive |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in found.items():
        killed = "; ".join(f"{k['number']} {k['state']} → " + (", ".join(f"{x['number']} {x['state']} ({x['same_run_dir']})"
                                                                     for x in k["retries"]) or "none")
                           for k in r.get("killed", [])) or "-"
        alive_n = len(r.get("trial_pids_alive_after_5s", r["pids_alive"]))
        states = ", ".join(f"{s} {n}" for s, n in sorted(r["states"].items()))
        print(f"| {name} | {r['wall_s']:.0f} | {','.join(map(str, r['exit']))} | {states} | "
              f"{r['counted']} ({r['counted_complete']}) | {r['unique_numbers']} | {killed} | {alive_n} |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({**found, "trials": args.trials, "epochs": args.epochs,
                                          "postgresql": version}, indent=2, default=str))


if __name__ == "__main__":
    main()
