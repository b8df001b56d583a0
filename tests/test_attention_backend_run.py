"""``attention.backend`` from the config to the blocks: the same run on SDPA and on the explicit
path gives the same losses (cosine, whose dot-product form SDPA now takes); flex refused before
training on the CPU, where FlexAttention has no backward."""

from __future__ import annotations

import json

import pytest

from attnflow.config.registry import ConfigError
from attnflow.training.run import train
from support import compose_cfg

RUN = ["experiment=reverse_transformer", "model.d_model=32",
       "model.ffn_dim=64", "attention.heads=2", "model.dropout=0.0", "data.train_size=64",
       "data.val_size=16", "data.test_size=16", "data.batch_size=16", "trainer.max_steps=4",
       "trainer.max_epochs=1", "logger=none", "callbacks.progress_bar=none"]


@pytest.mark.slow
def test_sdpa_and_explicit_runs_give_the_same_losses(tmp_path):
    losses = {}
    for backend in ("auto", "explicit"):
        train(compose_cfg([*RUN, "scorer=cosine", "scorer.scale=4.0", f"attention.backend={backend}"]),
              tmp_path / backend)
        rows = (tmp_path / backend / "metrics.json").read_text()
        losses[backend] = json.loads(rows)["metrics"]
    assert losses["auto"]["val/loss"] == pytest.approx(losses["explicit"]["val/loss"], rel=1e-4)


def test_flex_is_refused_before_training_on_the_cpu(tmp_path):
    with pytest.raises(ConfigError, match="flex trains only on a GPU"):
        train(compose_cfg([*RUN, "scorer=gat", "attention.backend=flex"]), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_maps_are_drawn_from_the_examples_alone_while_training_stays_fused(tmp_path, monkeypatch):
    """With attention maps on, every training call takes SDPA; the explicit path (for α) sees
    only the few examples drawn, without gradients."""
    import torch

    from attnflow.blocks.attention import functional

    calls, choose = [], functional.choose_path

    def recorded(backend, scorer, normalizer, query, *args, **kwargs):
        path = choose(backend, scorer, normalizer, query, *args, **kwargs)
        calls.append((path, query.shape[0], torch.is_grad_enabled()))
        return path

    monkeypatch.setattr(functional, "choose_path", recorded)
    train(compose_cfg([*RUN, "callbacks.attention_maps.examples=3"]), tmp_path / "run")
    assert list((tmp_path / "run").rglob("*.png"))  # the maps were drawn
    trained = {path for path, _, grad in calls if grad}
    explicit = {(batch, grad) for path, batch, grad in calls if path == "explicit"}
    assert trained == {"sdpa"} and explicit == {(3, False)}, (trained, explicit)
