"""Paths with spaces and accents: every command attnflow prints pastes into bash and works (a
resume of a run in ``runs/my runs/été 1``); an unquoted one is refused with a hint that quotes it."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from attnflow.io.console import command
from support import FAST, train_cli

TRAIN = str(Path(sys.executable).with_name("attnflow-train"))


@pytest.mark.parametrize("path", ["runs/my runs/été 1", "/tmp/it's here", 'a "b" c', "plain/path_1.x"])
def test_a_printed_override_reads_back_as_the_path(path):
    """bash splits the command into the words typed; Hydra reads the value back unchanged."""
    words = shlex.split(command("attnflow-train", resume=path))
    assert words[0] == "attnflow-train" and len(words) == 2
    assert OverridesParser.create().parse_overrides([words[1]])[0].value() == path


@pytest.mark.slow
def test_the_resume_command_of_a_run_in_an_accented_folder_pastes_into_bash(monkeypatch, tmp_path, capfd):
    run = tmp_path / "my runs" / "été 1"
    assert train_cli(monkeypatch, *FAST, "logger=csv", f"hydra.run.dir={run}") == 2  # unquoted
    err = capfd.readouterr().err
    quoted = shlex.quote(f'hydra.run.dir="{run}"')
    assert f"a value with spaces or accents is quoted: {quoted}" in err and not run.exists()
    assert train_cli(monkeypatch, *FAST, "logger=csv", f'hydra.run.dir="{run}"') == 0
    assert (run / "metrics.json").is_file()
    line = f"{command(TRAIN, resume=str(run))} trainer.max_epochs=2"
    done = subprocess.run(["bash", "-c", line], env=dict(os.environ, OMP_NUM_THREADS="1"),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (run / "resume-1.yaml").is_file()


def test_a_value_the_shell_split_is_refused_with_its_quoted_form_and_makes_no_folder(
        monkeypatch, tmp_path, capsys):
    """``hydra.run.dir=runs/my runs/été 1`` typed without quotes reaches attnflow as three words:
    one line with the quoted form, exit 2, no folder made (``runs/my`` was left behind)."""
    monkeypatch.chdir(tmp_path)
    assert train_cli(monkeypatch, *FAST, "hydra.run.dir=runs/my", "runs/été", "1") == 2
    err = capsys.readouterr().err.strip()
    quoted = shlex.quote('hydra.run.dir="runs/my runs/été 1"')
    assert err == (f"attnflow: 'runs/été' is not an override (key=value): the shell split the value "
                   f"of hydra.run.dir; a value with spaces is quoted: {quoted}")
    assert shlex.split(quoted) == ['hydra.run.dir="runs/my runs/été 1"']
    assert list(tmp_path.iterdir()) == []


def test_a_run_refused_in_its_job_leaves_no_folder_it_made(monkeypatch, tmp_path, capsys):
    """The pinned folder of a new run is made to be locked; refused later (by Lightning's check of
    a trainer field), the folders made for it go."""
    assert train_cli(monkeypatch, *FAST, f"hydra.run.dir={tmp_path / 'runs' / 'new' / 'x'}",
                     "trainer.max_epochs=-5") == 2
    assert "max_epochs" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
