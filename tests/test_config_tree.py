"""The Hydra config tree: every experiment composes and runs a step; one override swaps blocks."""

from __future__ import annotations

import json

import pytest

from attnflow.blocks.scorers import AdditiveScorer, DotScorer
from attnflow.registry import MODELS, SCORERS
from attnflow.run import train
from support import FAST, compose_cfg, experiments


def test_there_are_experiments():
    assert {"reverse_bahdanau", "reverse_multihead"} <= set(experiments())


@pytest.mark.parametrize("experiment", experiments())
def test_every_experiment_runs_one_step(experiment, tmp_path):
    cfg = compose_cfg([f"experiment={experiment}", *FAST, "trainer.fast_dev_run=true"])
    summary = train(cfg, tmp_path)
    assert summary["global_step"] == 1
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert {"val/loss", "val/seq_acc", "test/seq_acc"} <= set(saved["metrics"])
    assert (tmp_path / "config.yaml").is_file()


def _decoder_scorer(cfg):
    model = MODELS.build(cfg.model, src_vocab=10, tgt_vocab=10, pad_id=0)
    return model.decoder.attention.scorer


def test_default_scorer_is_additive_and_one_override_swaps_it():
    assert isinstance(_decoder_scorer(compose_cfg()), AdditiveScorer)
    assert isinstance(_decoder_scorer(compose_cfg(["scorer=dot"])), DotScorer)


@pytest.mark.parametrize("scorer", SCORERS.names())
def test_every_scorer_trains_a_step_in_the_default_experiment(scorer, tmp_path):
    cfg = compose_cfg([f"scorer={scorer}", *FAST, "trainer.fast_dev_run=true", "logger=none"])
    assert cfg.model.decoder.attention.scorer.name == scorer
    assert train(cfg, tmp_path)["global_step"] == 1


@pytest.mark.parametrize("aggregator", ["mean", "concat", "concat_proj"])
def test_multihead_with_each_aggregator_and_norm(aggregator, tmp_path):
    cfg = compose_cfg(["attention=multihead", f"aggregator={aggregator}", "normalizer=norm",
                       "task.penalty_weight=0.1", *FAST, "trainer.fast_dev_run=true", "logger=none"])
    summary = train(cfg, tmp_path)
    assert summary["global_step"] == 1


def test_penalty_is_logged_when_weighted(tmp_path):
    cfg = compose_cfg(["experiment=reverse_multihead", *FAST, "trainer.limit_train_batches=2",
                       "trainer.log_every_n_steps=1", "test=false"])
    train(cfg, tmp_path)
    header = (tmp_path / "csv" / "version_0" / "metrics.csv").read_text().splitlines()[0]
    assert "train/penalty" in header
