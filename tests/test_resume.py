"""Resuming from a checkpoint continues training in the same run directory and keeps what the
first run wrote."""

from __future__ import annotations

import torch

from attnflow.run import train
from support import FAST, compose_cfg

TINY = [*FAST, "data.train_size=128", "trainer.log_every_n_steps=1"]


def test_resume_continues_and_keeps_earlier_files(tmp_path):
    first = train(compose_cfg([*TINY, "trainer.max_epochs=1"]), tmp_path)
    steps = first["global_step"]
    assert steps == 4  # 128 / 32
    csv0 = (tmp_path / "csv" / "version_0" / "metrics.csv").read_text()
    ckpt0 = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())

    last = tmp_path / "checkpoints" / "last.ckpt"
    state = torch.load(last, map_location="cpu", weights_only=False)
    assert state["attnflow_config"]["model"]["name"] == "seq2seq"  # rebuildable from the registry

    second = train(compose_cfg([*TINY, "trainer.max_epochs=2", f"ckpt_path={last}"]), tmp_path)
    assert second["global_step"] == 2 * steps
    assert (tmp_path / "csv" / "version_0" / "metrics.csv").read_text() == csv0
    assert (tmp_path / "csv" / "version_1" / "metrics.csv").is_file()
    assert set(ckpt0) <= {p.name for p in (tmp_path / "checkpoints").iterdir()}


def test_last_ckpt_is_the_state_after_the_last_epoch_whatever_the_metric_did(tmp_path):
    import torch

    cfg = compose_cfg([*FAST, "trainer.max_epochs=3", "task.optim.lr=1e-6", "logger=none"])  # ~no progress
    summary = train(cfg, tmp_path)
    last = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert last["epoch"] == 2 and last["global_step"] == summary["global_step"]
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("*.ckpt")) == sorted(
        {"last.ckpt", summary["best_checkpoint"].split("/")[-1]})
