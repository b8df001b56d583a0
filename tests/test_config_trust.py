"""Configs never run code: ``hydra.callbacks``, a ``_target_`` other than Hydra's or the shipped
plugins', a logging factory, or a group option that is a path are refused as Hydra composes the
config (before any callback is called, logging configured or anything written); in a sweep, as
Hydra composes each job's config, before the first job runs."""

from __future__ import annotations

import os

import pytest

from attnflow.config.trust import code_refusal
from support import CONF, compose_cfg, train_cli

EVIL = """# @package _global_
hydra:
  callbacks:
    evil:
      _target_: os.makedirs
      name: {marker}
"""


@pytest.fixture
def evil(tmp_path, monkeypatch):
    """An experiment file, in a folder added to Hydra's search path, whose callback makes a folder."""
    (tmp_path / "extra" / "experiment").mkdir(parents=True)
    (tmp_path / "extra" / "experiment" / "evil.yaml").write_text(EVIL.format(marker=tmp_path / "ran"))
    (tmp_path / "extra" / "experiment" / "factory.yaml").write_text(
        "# @package _global_\nhydra:\n  job_logging:\n    formatters:\n      x:\n        (): os.system\n")
    monkeypatch.setenv("ATTNFLOW_OUTPUT_DIR", str(tmp_path / "outputs"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _refusal(monkeypatch, capsys, *argv):
    """attnflow-train's one line for ``argv``, which it must refuse (exit status 2)."""
    assert train_cli(monkeypatch, *argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("attnflow: config error: ")
    return err[0]


def test_an_experiment_with_hydra_callbacks_is_refused_before_they_run(evil, monkeypatch, capsys):
    why = _refusal(monkeypatch, capsys, f"hydra.searchpath=[file://{evil / 'extra'}]", "experiment=evil")
    assert "hydra.callbacks (evil) would run code" in why
    assert not (evil / "ran").exists() and not (evil / "outputs").exists()


@pytest.mark.parametrize("override, says", [
    ("hydra.launcher._target_=os.makedirs", "hydra.launcher._target_=os.makedirs: a config names no code"),
    ("hydra.job_logging.handlers.console.class=os.system", "handlers.console.class=os.system: the logging"),
    ("+model.encoder._target_=os.system", "model.encoder._target_=os.system: a config names no code"),
])
def test_code_named_on_the_command_line_is_refused(evil, monkeypatch, capsys, override, says):
    assert says in _refusal(monkeypatch, capsys, override)
    assert not (evil / "outputs").exists()


def test_a_logging_factory_in_a_config_file_is_refused(evil, monkeypatch, capsys):
    why = _refusal(monkeypatch, capsys, f"hydra.searchpath=[file://{evil / 'extra'}]", "experiment=factory")
    assert "hydra.job_logging.formatters.x.()=os.system: the logging" in why


def test_a_group_option_that_is_a_path_is_refused_also_in_a_sweep(evil, monkeypatch, capsys):
    outside = os.path.relpath(evil / "extra" / "experiment" / "evil", CONF / "experiment")
    assert ".." in outside
    for argv in ([f"experiment={outside}"], ["-m", f"experiment=reverse_multihead,{outside}"]):
        assert f"experiment={outside}: a group option is a name in" in _refusal(monkeypatch, capsys, *argv)
    assert not (evil / "ran").exists()


def test_a_sweep_over_an_option_that_names_code_is_refused_before_its_first_job(evil, monkeypatch, capsys):
    """Hydra's sweeper composes every job's config before it launches the first: the second
    option's refusal comes before any job runs. Hydra has written the sweep's folder and its
    ``multirun.yaml`` (the sweep's own config) by then, nothing else."""
    why = _refusal(monkeypatch, capsys, "-m", f"hydra.searchpath=[file://{evil / 'extra'}]",
                   "experiment=reverse_multihead,evil")
    assert "hydra.callbacks (evil) would run code" in why
    assert not (evil / "ran").exists()
    assert {p.name for p in (evil / "outputs").rglob("*") if p.is_file()} == {"multirun.yaml"}


def test_hydras_and_the_shipped_plugins_are_trusted():
    common = ["hydra/launcher=joblib", "hydra/sweeper=optuna", "optimized_metric=val/loss"]
    for argv in ([], common + ["experiment=reverse_multihead"], common + ["experiment=gat_cora"],
                 ["hydra/launcher=slurm"]):
        assert code_refusal(compose_cfg(argv, return_hydra_config=True), CONF) is None
