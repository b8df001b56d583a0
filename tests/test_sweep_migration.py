"""A search saved for hydra-optuna-sweeper (as lightning-hydra-template writes one, with the
plugin's ``_target_``) runs attnflow's sweeper with one warning line; the plugin's keys attnflow's
sweeper does not take are refused in one line naming what to use, before any work."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

optuna = pytest.importorskip("optuna")
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution  # noqa: E402

from attnflow.config.registry import ConfigError  # noqa: E402
from attnflow.io.console import AttnflowWarning  # noqa: E402
from attnflow.sweep.checks import check_sweep  # noqa: E402
from attnflow.sweep.config import build  # noqa: E402
from attnflow.sweep.migration import check_sampler, translated  # noqa: E402
from attnflow.sweep.space import parse_space  # noqa: E402
from support import compose_cfg, train_cli  # noqa: E402
from test_sweep_optuna import TINY_GRAPH  # noqa: E402

PLUGIN = "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"


def _search(folder: Path, **sweeper) -> list:
    """``hparams_search=plugin_search`` written for hydra-optuna-sweeper in ``folder``, and the
    command line that runs it on the tiny graph."""
    search = {
        "defaults": [{"override /hydra/sweeper": "optuna"}],
        "optimized_metric": "val/acc",
        "hydra": {"mode": "MULTIRUN", "sweeper": {
            "_target_": PLUGIN, "direction": "maximize", "n_trials": 2, "storage": None,
            "study_name": None, "n_jobs": 1,
            "sampler": {"_target_": "optuna.samplers.TPESampler", "seed": 123},
            "params": {"task.optim.lr": "interval(0.001, 0.05)", "seed": "range(1, 3)"}, **sweeper}},
    }
    (folder / "hparams_search").mkdir(parents=True)
    (folder / "hparams_search" / "plugin_search.yaml").write_text(
        "# @package _global_\n" + yaml.safe_dump(search, sort_keys=False))
    return [f"hydra.searchpath=[file://{folder}]", "hparams_search=plugin_search", *TINY_GRAPH,
            f"hydra.sweep.dir={folder / 'sweep'}"]


def _lines(text: str) -> list:
    return [line for line in text.splitlines() if line.startswith("attnflow: ")]


@pytest.mark.slow
def test_the_plugins_target_runs_attnflows_sweeper_with_one_warning(monkeypatch, tmp_path, capfd):
    args = _search(tmp_path, max_failure_rate=0.5)
    assert train_cli(monkeypatch, *args) == 0
    assert _lines(capfd.readouterr().err) == [
        "attnflow: warning: hydra.sweeper._target_ is hydra-optuna-sweeper's OptunaSweeper: attnflow's "
        "Optuna sweeper (hydra/sweeper=optuna) runs this search; n_trials=2 counts the study's trials "
        "(a continued study's finished ones too), the plugin's counted one command's; "
        "max_failure_rate=0.5 is failed over finished trials of the study, checked after each trial; "
        "range(a, b) leaves b out here, the plugin drew b too (seed)"]
    study = optuna.load_study(study_name="plugin_search", storage=f"sqlite:///{tmp_path}/sweep/optuna.db")
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"]
    assert {t.params["seed"] for t in study.trials} <= {1, 2}  # range(1, 3): 3 left out
    assert all((tmp_path / "sweep" / str(t.number) / "metrics.json").is_file() for t in study.trials)


@pytest.mark.parametrize("key, value, line", [
    ("search_space", {"lr": {"type": "float", "low": 0.001, "high": 0.1, "log": True},
                      "batch": {"type": "categorical", "choices": [32, 64]}},
     "hydra.sweeper.search_space (hydra-optuna-sweeper's old form) is not read here: use "
     "hydra.sweeper.params: key: interval(a,b)|choice(…)|range(…); yours: lr: tag(log, "
     "interval(0.001, 0.1)), batch: choice(32, 64)"),
    ("custom_search_space", "my_project.space.extend",
     "hydra.sweeper.custom_search_space=my_project.space.extend: attnflow's sweeper calls no "
     "function from config; use hydra.sweeper.params with choice(…)|interval(…)|range(…), and a "
     "conditional space as separate searches"),
    ("max_failure_rate", 2,
     "hydra.sweeper.max_failure_rate=2.0: failed over finished trials of the study, between 0 and "
     "1 (1: failures never end the sweep)"),
])
def test_the_plugins_keys_not_taken_are_refused_in_one_line(monkeypatch, tmp_path, capfd, key, value, line):
    args = _search(tmp_path, **{key: value})
    assert train_cli(monkeypatch, *args) == 2
    assert capfd.readouterr().err.strip() == f"attnflow: config error: {line}"
    assert not (tmp_path / "sweep").exists()  # before any work


@pytest.mark.parametrize("spec, expected", [  # what the plugin drew for each entry
    ({"type": "float", "low": 1e-4, "high": 0.1, "log": True}, FloatDistribution(1e-4, 0.1, log=True)),
    ({"type": "float", "low": 0.2, "high": 0.8}, FloatDistribution(0.2, 0.8)),
    ({"type": "float", "low": 0.1, "high": 0.5, "step": 0.1}, FloatDistribution(0.1, 0.5, step=0.1)),
    ({"type": "int", "low": 2, "high": 64, "log": True}, IntDistribution(2, 64, log=True)),
    ({"type": "int", "low": 1, "high": 9, "step": 2}, IntDistribution(1, 9, step=2)),
    ({"type": "int", "low": 1, "high": 5}, IntDistribution(1, 5)),
    ({"type": "categorical", "choices": ["dot", "general", 3]},
     CategoricalDistribution(["dot", "general", 3])),
])
def test_a_search_space_entry_translates_to_params_drawing_the_same_values(spec, expected):
    got = parse_space({"x": translated(spec)}, []).distributions["x"]
    assert type(got) is type(expected) and got == expected


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_the_plugins_sampler_configs():
    """qmc builds Optuna's QMCSampler; motpe (gone from Optuna 4) and a GridSampler named without
    hydra/sweeper/sampler=grid are refused naming what to use."""
    cfg = compose_cfg(["hparams_search=gat_cora_optuna", "hydra/sweeper/sampler=qmc"],
                      return_hydra_config=True)
    with pytest.warns(AttnflowWarning, match="QMCSampler takes no n_startup_trials"):  # (the saved search's)
        built = build(cfg.hydra.sweeper.sampler, "hydra.sweeper.sampler", seed=3)
    assert type(built).__name__ == "QMCSampler"
    cfg = compose_cfg(["hparams_search=gat_cora_optuna", "hydra/sweeper/sampler=motpe",
                       "hydra/sweeper/pruner=none"], return_hydra_config=True)
    with pytest.raises(ConfigError, match="MOTPESampler is gone from Optuna 4: use "
                                          "hydra/sweeper/sampler=tpe"):
        check_sweep(cfg)
    with pytest.raises(ConfigError, match="use hydra/sweeper/sampler=grid"):
        check_sampler({"_target_": "optuna.samplers.GridSampler", "seed": None})
    check_sampler({"_target_": "optuna.samplers.GridSampler", "search_space": None})
