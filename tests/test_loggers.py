"""Loggers: CSV (default), TensorBoard, W&B offline — config, metrics and attention maps logged;
one W&B run per training run, finished even when training fails."""

from __future__ import annotations

import os

import pytest
import yaml

from attnflow.run import train
from support import FAST, compose_cfg

SHORT = [*FAST, "trainer.limit_train_batches=2", "trainer.limit_val_batches=1",
         "trainer.limit_test_batches=1", "trainer.log_every_n_steps=1"]


def test_csv_logger_writes_metrics_and_config(tmp_path):
    train(compose_cfg(["logger=csv", *SHORT]), tmp_path)
    metrics = (tmp_path / "csv" / "version_0" / "metrics.csv").read_text()
    assert "train/loss" in metrics.splitlines()[0] and "val/seq_acc" in metrics.splitlines()[0]
    hparams = yaml.safe_load((tmp_path / "csv" / "version_0" / "hparams.yaml").read_text())
    assert hparams["model"]["decoder"]["attention"]["scorer"]["name"] == "additive"
    assert sorted(p.name for p in (tmp_path / "attention").iterdir()) == [
        "val_example_0.png", "val_example_1.png"]


def test_tensorboard_logger_writes_events_with_images(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train(compose_cfg(["logger=tensorboard", *SHORT]), tmp_path)
    acc = EventAccumulator(str(tmp_path / "tensorboard" / "version_0"), size_guidance={"images": 0})
    acc.Reload()
    assert "train/loss" in acc.Tags()["scalars"]
    assert "val/attention/0" in acc.Tags()["images"]


@pytest.fixture
def wandb_env(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb_config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb_cache"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)


def test_wandb_runs_offline_by_default_and_logs_config_metrics_images(tmp_path, wandb_env):
    import wandb

    train(compose_cfg(["logger=wandb", *SHORT]), tmp_path / "run")
    assert wandb.run is None  # finished
    runs = list((tmp_path / "run" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, runs
    # the offline run's transaction log holds the config records and the metric history
    log = b"".join(p.read_bytes() for p in runs[0].glob("*.wandb"))
    for text in [b"rnn_attention", b"additive", b"val/seq_acc", b"train/loss", b"val/attention"]:
        assert text in log, text
    media = list((runs[0] / "files" / "media" / "images").rglob("*.png"))
    assert len(media) >= 2, "attention heat maps were not logged as images"


def test_wandb_run_is_finished_when_training_fails(tmp_path, wandb_env, monkeypatch):
    import wandb

    from attnflow.tasks.seq2seq import Seq2SeqTask

    def boom(self, batch, batch_idx):
        raise RuntimeError("boom in training_step")

    monkeypatch.setattr(Seq2SeqTask, "training_step", boom)
    with pytest.raises(RuntimeError, match="boom"):
        train(compose_cfg(["logger=wandb", *SHORT]), tmp_path / "run")
    assert wandb.run is None
    assert not (tmp_path / "run" / "metrics.json").exists()
    assert len(list((tmp_path / "run" / "wandb").glob("offline-run-*"))) == 1
