"""A sweep refused for a live sweep's folder changes no byte of it: the folder is locked before
Hydra writes ``multirun.yaml`` or a job's ``.hydra/``, with the basic sweeper and Optuna's."""

from __future__ import annotations

import subprocess
import sys

import pytest

from attnflow.training import runlock
from support import FAST, train_cli
from test_sweep_optuna import SEARCH


HOLDER = ("import sys, time; from attnflow.training import runlock; runlock.hold(sys.argv[1]); "
          "print('held', flush=True); time.sleep(600)")  # the live sweep's process


def _files(folder):
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and p.name != runlock.NAME}


@pytest.mark.parametrize("sweep", [["-m", *FAST, "scorer=dot,general"], SEARCH], ids=["basic", "optuna"])
def test_a_second_sweep_on_a_live_sweeps_folder_changes_nothing(monkeypatch, tmp_path, capfd, sweep):
    folder = tmp_path / "sweep"
    (folder / "0" / ".hydra").mkdir(parents=True)
    (folder / "multirun.yaml").write_text("the first sweep's\n")
    (folder / "0" / ".hydra" / "config.yaml").write_text("job 0 of the first sweep\n")
    before = _files(folder)
    live = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, text=True)
    try:
        assert live.stdout.readline().strip() == "held"
        assert train_cli(monkeypatch, *sweep, f"hydra.sweep.dir={folder}") == 2
    finally:
        live.kill()
        live.wait()
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "one sweep runs in a folder at a time" in err[0], err
    assert _files(folder) == before
