"""The Optuna sweeper's search space and settings, without training: Hydra's override syntax as
Optuna distributions (built by hand here), the samplers and pruners its configs name, and the
settings refused before any work."""

from __future__ import annotations

import pytest

optuna = pytest.importorskip("optuna")
from hydra.core.override_parser.overrides_parser import OverridesParser  # noqa: E402
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution  # noqa: E402

from attnflow.config.registry import ConfigError  # noqa: E402
from attnflow.io.console import AttnflowWarning  # noqa: E402
from attnflow.sweep.checks import check_sweep, metric_directions  # noqa: E402
from attnflow.sweep.config import build  # noqa: E402
from attnflow.sweep.space import format_value, parse_space  # noqa: E402
from support import compose_cfg  # noqa: E402


@pytest.mark.parametrize("value, expected", [
    ("interval(0.2, 0.8)", FloatDistribution(0.2, 0.8)),
    ("tag(log, interval(1e-4, 1e-1))", FloatDistribution(1e-4, 1e-1, log=True)),
    ("tag(int, interval(1, 8))", IntDistribution(1, 8)),
    ("tag(log, int, interval(2, 64))", IntDistribution(2, 64, log=True)),
    ("range(1, 5)", IntDistribution(1, 4)),  # Python's range: 5 excluded
    ("range(2, 11, 3)", IntDistribution(2, 8, step=3)),  # 2, 5, 8
    ("range(0.1, 0.45, 0.1)", FloatDistribution(0.1, 0.4, step=0.1)),
    ("choice(25, 50, 100)", CategoricalDistribution([25, 50, 100])),
    ("dot,general", CategoricalDistribution(["dot", "general"])),
])
def test_each_sweep_syntax_is_its_optuna_distribution(value, expected):
    space = parse_space({"++model.x": value}, [])
    got = space.distributions["model.x"]
    assert type(got) is type(expected) and got == expected
    assert space.keys == {"model.x": "++model.x"} and space.fixed == []


def test_the_command_line_replaces_a_saved_key_and_fixed_values_pass_through():
    space = parse_space({"++task.optim.lr": "interval(0.1, 0.2)", "model.heads": 8},
                        ["task.optim.lr=choice(0.5, 0.25)", "trainer.max_epochs=3"])
    assert space.distributions == {"task.optim.lr": CategoricalDistribution([0.5, 0.25])}
    assert sorted(space.fixed) == ["model.heads=8", "trainer.max_epochs=3"]
    assert space.overrides({"task.optim.lr": 0.25}) == [*space.fixed, "task.optim.lr=0.25"]


@pytest.mark.parametrize("value", [0.003, 1e-05, 7, True, False, "dot", "a b", "it's", "null", "x=y"])
def test_a_trial_value_reads_back_as_itself(value):
    override = OverridesParser.create().parse_overrides([f"k={format_value(value)}"])[0]
    assert override.value() == value and type(override.value()) is type(value)


def test_the_grid_is_every_choice_and_range_point():
    space = parse_space({"scorer": "choice(dot, general)", "n": "range(1, 4)", "f": "range(0.5, 1.6, 0.5)"}, [])
    assert space.grid() == {"scorer": ["dot", "general"], "n": [1, 2, 3], "f": [0.5, 1.0, 1.5]}
    with pytest.raises(ConfigError, match="grid sampler needs choice"):
        parse_space({"lr": "interval(0.1, 0.2)"}, []).grid()


@pytest.mark.parametrize("value, says", [
    ("tag(log, interval(0, 1))", "hydra.sweeper.params.x"),  # Optuna: log needs low > 0
    ("interval(0.8, 0.2)", "hydra.sweeper.params.x"),
    ("range(5, 1)", "holds no value"),
    ("tag(fancy, interval(1, 2))", "unknown tag 'fancy'"),
])
def test_a_space_optuna_cannot_sample_is_refused_naming_its_key(value, says):
    with pytest.raises(ConfigError, match=says):
        parse_space({"x": value}, [])


@pytest.mark.parametrize("sampler, cls", [("tpe", "TPESampler"), ("random", "RandomSampler"),
                                          ("cmaes", "CmaEsSampler"), ("nsgaii", "NSGAIISampler")])
def test_every_sampler_config_builds_its_optuna_sampler(sampler, cls, recwarn):
    """The saved search's ``n_startup_trials`` reaches the samplers that take it; for the others
    it is one warning line."""
    cfg = compose_cfg(["hparams_search=gat_cora_optuna", f"hydra/sweeper/sampler={sampler}"],
                      return_hydra_config=True)
    built = build(cfg.hydra.sweeper.sampler, "hydra.sweeper.sampler", seed=3)
    assert type(built).__name__ == cls
    unread = [str(w.message) for w in recwarn if issubclass(w.category, AttnflowWarning)]
    takes = sampler in ("tpe", "cmaes")
    assert unread == ([] if takes else [f"hydra.sweeper.sampler.n_startup_trials is unread: {cls} takes no "
                                        f"n_startup_trials"])


@pytest.mark.parametrize("pruner, cls", [("none", "NopPruner"), ("median", "MedianPruner"),
                                         ("hyperband", "HyperbandPruner")])
def test_every_pruner_config_builds_its_optuna_pruner(pruner, cls):
    cfg = compose_cfg(["hparams_search=gat_cora_optuna", f"hydra/sweeper/pruner={pruner}"],
                      return_hydra_config=True)
    assert type(build(cfg.hydra.sweeper.pruner, "hydra.sweeper.pruner")).__name__ == cls


def test_directions_follow_the_metrics_unless_given():
    cfg = compose_cfg(["hparams_search=gat_cora_optuna", "optimized_metric=[val/acc,val/loss]",
                       "hydra/sweeper/pruner=none"], return_hydra_config=True)
    assert metric_directions(cfg) == ["maximize", "minimize"]  # node classification: acc up, loss down
    check_sweep(cfg)


@pytest.mark.parametrize("overrides, says", [
    (["optimized_metric=val/loss", "hydra.sweeper.direction=maximize"],
     "optimized_metric=val/loss is better lower (task 'node_classification'), but "
     "hydra.sweeper.direction=maximize would seek the worst runs: set it to minimize, or leave it null"),
    (["optimized_metric=[val/acc,val/loss]", "hydra.sweeper.direction=[maximize]"],
     "hydra.sweeper.direction has 1 entries for 2 optimized_metric"),
    (["optimized_metric=null"], "an Optuna sweep needs optimized_metric"),
    (["optimized_metric=test/acc"], "hydra.sweeper.pruner=MedianPruner watches one validation metric, "
                                    "but optimized_metric=test/acc"),
    (["optimized_metric=[val/acc,val/loss]"], "but optimized_metric=['val/acc', 'val/loss']"),
])
def test_a_sweep_that_cannot_work_is_refused_before_any_work(overrides, says):
    cfg = compose_cfg(["hparams_search=gat_cora_optuna", *overrides], return_hydra_config=True)
    with pytest.raises(ConfigError) as err:
        check_sweep(cfg)
    assert says in str(err.value)
