"""The default experiment, shortened, learns the reversal, and its attention is the anti-diagonal."""

from __future__ import annotations

import json

import pytest
import torch

from attnflow.data.synthetic import ReverseDataModule
from attnflow.training.run import train
from support import compose_cfg

SHORT = ["data.train_size=4000", "data.val_size=100", "data.test_size=100", "data.max_len=10",
         "trainer.max_epochs=2", "trainer.accelerator=cpu", "callbacks.progress_bar=none",
         "logger=csv", "callbacks.attention_maps.examples=2"]


@pytest.mark.slow
def test_default_experiment_learns_reversal(tmp_path):
    summary = train(compose_cfg(SHORT), tmp_path)
    m = summary["metrics"]
    # chance of an exact 4..10-token sequence over 20 symbols is < 1e-5; of a token, 1/20
    assert m["best/val/token_acc"] > 0.9, m
    assert m["best/val/seq_acc"] > 0.5, m
    assert m["test/seq_acc"] > 0.5, m
    assert json.loads((tmp_path / "metrics.json").read_text())["metrics"] == m

    # Rebuild from the checkpoint's stored config and check α on held-out reversals: output token
    # t attends most to source position S-1-t (the anti-diagonal), or, after this short training
    # while the bidirectional states still blur neighbours, to its neighbour.
    from attnflow.config.registry import MODELS, TASKS

    ckpt = torch.load(summary["best_checkpoint"], map_location="cpu", weights_only=False)
    cfg = ckpt["attnflow_config"]
    dm = ReverseDataModule(**{k: v for k, v in cfg["data"].items() if k != "name"})
    model = MODELS.build(cfg["model"], **dm.model_context())
    task = TASKS.build(cfg["task"], model, **dm.task_context())
    task.load_state_dict(ckpt["state_dict"])
    exact = near = total = 0
    for ex in task.attention_examples(dm.example_batch(16)):
        w, S = ex["weights"], len(ex["source"])
        for t in range(min(S, w.shape[0])):
            offset = int(w[t].argmax()) - (S - 1 - t)
            exact += offset == 0
            near += abs(offset) <= 1
            total += 1
    assert near / total > 0.9, (near, total)
    assert exact / total > 0.4, (exact, total)  # a uniform α would hit 1/S ≈ 0.15
    assert len(list((tmp_path / "attention").glob("*.png"))) == 2
