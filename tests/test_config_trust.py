"""Configs never run code: ``hydra.callbacks``, a ``_target_`` other than Hydra's or the shipped
plugins', a logging factory, or a group option that is a path are refused before Hydra starts
(before any callback is called or anything is written)."""

from __future__ import annotations

import os

import pytest

from attnflow.config.trust import code_refusal as refusal, composed
from support import CONF, train_cli

EVIL = """# @package _global_
hydra:
  callbacks:
    evil:
      _target_: os.makedirs
      name: {marker}
"""


@pytest.fixture
def evil(tmp_path):
    """An experiment file, in a folder added to Hydra's search path, whose callback makes a folder."""
    (tmp_path / "extra" / "experiment").mkdir(parents=True)
    (tmp_path / "extra" / "experiment" / "evil.yaml").write_text(EVIL.format(marker=tmp_path / "ran"))
    (tmp_path / "extra" / "experiment" / "factory.yaml").write_text(
        "# @package _global_\nhydra:\n  job_logging:\n    formatters:\n      x:\n        (): os.system\n")
    return tmp_path


def _refusal(argv):
    """The first refusal of the command line's composed configs (as attnflow-train checks them)."""
    return next(filter(None, (refusal(cfg, CONF) for cfg in composed(argv, CONF))), None)


def test_an_experiment_with_hydra_callbacks_is_refused_before_they_run(evil, monkeypatch, capsys):
    monkeypatch.setenv("ATTNFLOW_OUTPUT_DIR", str(evil / "outputs"))
    assert train_cli(monkeypatch, f"hydra.searchpath=[file://{evil / 'extra'}]", "experiment=evil") == 2
    assert "attnflow: config error: hydra.callbacks (evil) would run code" in capsys.readouterr().err
    assert not (evil / "ran").exists() and not (evil / "outputs").exists()


@pytest.mark.parametrize("override, says", [
    ("hydra.launcher._target_=os.makedirs", "hydra.launcher._target_=os.makedirs: a config names no code"),
    ("hydra.job_logging.handlers.console.class=os.system", "handlers.console.class=os.system: the logging"),
    ("+model.encoder._target_=os.system", "model.encoder._target_=os.system: a config names no code"),
])
def test_code_named_on_the_command_line_is_refused(override, says):
    assert says in (_refusal([override]) or "")


def test_a_logging_factory_in_a_config_file_is_refused(evil):
    argv = [f"hydra.searchpath=[file://{evil / 'extra'}]", "experiment=factory"]
    assert "hydra.job_logging.formatters.x.()=os.system: the logging" in (_refusal(argv) or "")


def test_a_group_option_that_is_a_path_is_refused_also_in_a_sweep(evil):
    outside = os.path.relpath(evil / "extra" / "experiment" / "evil", CONF / "experiment")
    assert ".." in outside
    for argv in ([f"experiment={outside}"], ["-m", f"experiment=reverse_multihead,{outside}"]):
        assert f"experiment={outside}: a group option is a name in" in (_refusal(argv) or "")


def test_hydras_and_the_shipped_plugins_are_trusted():
    assert _refusal([]) is None
    assert _refusal(["-m", "hydra/launcher=joblib", "hydra/sweeper=optuna", "optimized_metric=val/loss",
                     "experiment=reverse_multihead,gat_cora"]) is None
    assert _refusal(["hydra/launcher=slurm"]) is None
