"""Command-line overrides: what was typed (attnflow.config.overrides), which keys are rewritten for
Hydra (attnflow.config.groups.field_overrides), and a field the chosen setting leaves unread is
accepted, not refused."""

from __future__ import annotations

import pytest
from hydra.errors import ConfigCompositionException

from attnflow.config.groups import field_overrides
from attnflow.config.overrides import typed_fields
from attnflow.config.registry import ConfigError
from attnflow.training.validate import resolve_config
from support import CONF, compose_cfg

GRAPH = ["experiment=gat_synthetic", "trainer.max_epochs=1", "callbacks.progress_bar=none"]


def test_typed_fields_are_the_assignments_as_typed():
    typed = typed_fields(["++data.batch_size=8", "scorer=dot", "~data.seed", "hydra/launcher=basic",
                          "+trainer.gradient_clip_val=1", "data.num_neighbors=[5,5]",
                          "+callbacks.average={last:2,mode:max}"])
    average = "callbacks.average={last:2,mode:max}"
    assert typed == {"data.batch_size": "data.batch_size=8", "scorer": "scorer=dot",
                     "trainer.gradient_clip_val": "trainer.gradient_clip_val=1",
                     "data.num_neighbors": "data.num_neighbors=[5,5]", "callbacks.average": average,
                     "callbacks.average.last": average, "callbacks.average.mode": average}


def test_only_block_trainer_and_callback_fields_are_made_add_or_override():
    argv = ["scorer=dot", "attention.heads=4", "trainer.gradient_clip_algorithm=value",
            "callbacks.ema={decay:0.9}", "paths.output_root=x", "+seed=3", "hydra.run.dir=out", "seed=2"]
    assert field_overrides(argv, CONF) == [
        "scorer=dot", "++attention.heads=4", "++trainer.gradient_clip_algorithm=value",
        "++callbacks.ema={decay:0.9}", "paths.output_root=x", "+seed=3", "hydra.run.dir=out", "seed=2"]


def test_a_key_no_block_has_is_refused_with_the_nearest_field():
    with pytest.raises(ConfigError, match=r"no block has a field 'hiden_dim' \(at "
                                          r"'model.encoder.hiden_dim'\).*Did you mean 'hidden_dim'"):
        field_overrides(["model.encoder.hiden_dim=8"], CONF)


def test_a_key_the_config_files_know_elsewhere_is_left_to_hydras_strict_check():
    # 'output_root' is a field of paths/, not of run/: Hydra refuses it, as it refuses any such key
    assert field_overrides(["run.output_root=x"], CONF) == ["run.output_root=x"]
    with pytest.raises(ConfigCompositionException):
        compose_cfg(["run.output_root=x"])


@pytest.mark.parametrize("overrides", [
    ["data.loader=full", "data.batch_size=8"],  # the whole graph is one batch
    ["task.optim.scheduler=none", "task.optim.warmup_steps=30"],  # no warm-up
    ["trainer.gradient_clip_val=0", "trainer.gradient_clip_algorithm=value"],  # nothing clipped
    ["test=false", "trainer.limit_test_batches=3"],  # nothing tested
    ["model.layers=1", "model.heads=4"],  # no hidden layer
    ["trainer.min_epochs=1"],  # nothing stops the run early
])
def test_a_field_the_chosen_setting_leaves_unread_is_accepted_as_typed(overrides):
    resolved = resolve_config(compose_cfg([*GRAPH, *overrides], return_hydra_config=True))
    for item in overrides:
        key, value = item.split("=")
        node = resolved
        for part in key.split("."):
            node = node[part]
        assert str(node).lower() == value.lower()
