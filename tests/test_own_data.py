"""A preset's facts about its own data set (classes, epoch count, warm-up) hold for that data set
only. On its own data every experiment preset composes as Hydra composes it; given other files,
the classes come from the training file and the run stops on validation; a warm-up longer than
the run is cut to a tenth of it; an HF checkpoint bounds the input length. The slow tests train
each family's main preset, paths only, on a made-up set (``bench/own_data.py``) and compare it
with the same model trained to convergence there."""

from __future__ import annotations

import copy
import json
import warnings

import pytest
from omegaconf import OmegaConf

from attnflow.config.own_data import MAX_EPOCHS, PATIENCE, fit_to_given_data
from attnflow.config.overrides import typed_fields
from attnflow.io.console import AttnflowWarning
from attnflow.tasks.optim import fitted_warmup, lr_factor
from support import compose_cfg, experiments, load_bench, train_cli

own_data = load_bench("own_data")


def _composed(overrides):
    return OmegaConf.to_container(compose_cfg(overrides), resolve=True)


@pytest.mark.parametrize("experiment", experiments())
def test_a_preset_on_its_own_data_is_as_composed(experiment):
    """No field naming the data typed: nothing changes, and no line is printed."""
    cfg = _composed([f"experiment={experiment}"])
    kept = copy.deepcopy(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AttnflowWarning)
        assert fit_to_given_data(cfg, typed_fields([f"experiment={experiment}"])) == []
    assert cfg == kept


def test_other_files_take_their_classes_and_stop_on_validation():
    typed = ["experiment=han_imdb", "data.train_path=my/train.csv"]
    cfg = _composed(typed)
    assert (cfg["data"]["labels"], cfg["trainer"]["max_epochs"]) == ([0, 1], 3)  # the preset's
    with pytest.warns(AttnflowWarning, match=r"data.train_path: not the preset's data set.*"
                                             r"data.labels=null.*trainer.max_epochs=100"):
        fit_to_given_data(cfg, typed_fields(typed))
    assert cfg["data"]["labels"] is None
    assert cfg["callbacks"]["early_stopping"] == {"patience": PATIENCE}
    assert cfg["trainer"]["max_epochs"] == MAX_EPOCHS


def test_a_typed_field_keeps_its_value():
    typed = ["experiment=han_imdb", "data.train_path=my/train.csv", "data.labels=[neg,pos]",
             "trainer.max_epochs=7", "callbacks.early_stopping=null"]
    cfg = _composed(typed)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AttnflowWarning)
        assert fit_to_given_data(cfg, typed_fields(typed)) == []
    assert (cfg["data"]["labels"], cfg["trainer"]["max_epochs"]) == (["neg", "pos"], 7)
    assert cfg["callbacks"]["early_stopping"] is None


def test_a_preset_with_its_own_early_stopping_keeps_it_and_multitask_labels_give_way():
    typed = ["experiment=gat_cora", "data.dataset=CiteSeer"]
    cfg = _composed(typed)
    kept = copy.deepcopy(cfg)
    assert fit_to_given_data(cfg, typed_fields(typed)) == [] and cfg == kept
    typed = ["experiment=bert_imdb_multitask", "data.common.train_path=my/train.csv"]
    cfg = _composed(typed)
    with pytest.warns(AttnflowWarning):
        fit_to_given_data(cfg, typed_fields(typed))
    assert all(t["labels"] is None for t in cfg["data"]["tasks"].values())


@pytest.mark.parametrize("scheduler,warmup,steps,expected", [
    ("noam", 4000, 640, 64), ("linear", 300, 250, 25), ("constant_with_warmup", 9, 5, 1),
    ("noam", 4000, 9070, 4000), ("noam", 4000, float("inf"), 4000), ("cosine", 4000, 640, 4000)])
def test_a_warmup_longer_than_the_run_is_a_tenth_of_it(scheduler, warmup, steps, expected):
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        got = fitted_warmup(scheduler, warmup, steps)
    assert got == expected
    assert len(said) == (expected != warmup)
    if expected != warmup:  # the peak, 1 × lr, is reached at that step and not before
        factor = lr_factor(scheduler, int(steps), got)
        assert factor(got) == pytest.approx(1.0)
        assert got == 1 or factor(got - 1) < 1.0


def test_an_hf_checkpoint_sets_the_input_length(tmp_path):
    """model.init_from=hf:<dir> with 40 positions: data.max_len 40 (the preset's 256 would not
    fit), a typed shorter one kept."""
    pytest.importorskip("transformers")
    from test_hf_import import save_checkpoint

    from attnflow.training.validate import resolve_config

    save_checkpoint(tmp_path / "bert")
    base = ["experiment=bert_imdb", f"model.init_from=hf:{tmp_path / 'bert'}"]
    positions = json.loads((tmp_path / "bert" / "config.json").read_text())["max_position_embeddings"]
    assert resolve_config(compose_cfg(base, return_hydra_config=True))["data"]["max_len"] == positions
    typed = resolve_config(compose_cfg([*base, "data.max_len=16"], return_hydra_config=True))
    assert typed["data"]["max_len"] == 16


def _best(run_dir, metric):
    return own_data.best_metric(run_dir, metric)["value"]


@pytest.mark.slow
@pytest.mark.parametrize("family", own_data.QUICK)
def test_a_preset_given_paths_only_learns_the_users_data(family, tmp_path, monkeypatch):
    """Within 0.03 of the same model trained to convergence on the made-up set."""
    folder, metric = own_data.make_data(family, tmp_path / "data"), own_data.FAMILIES[family].metric
    got = {}
    for kind in ("converged", "paths only"):
        run = tmp_path / kind.replace(" ", "_")
        args = own_data.overrides(family, folder, kind == "converged")
        assert train_cli(monkeypatch, *args, f"hydra.run.dir={run}") == 0
        got[kind] = _best(run, metric)
    assert got["paths only"] >= got["converged"] - 0.03, got


@pytest.mark.parametrize("scheduler,warmup", [("noam", 1), ("noam", 8), ("cosine", 8)])
def test_early_stopping_counts_from_the_warmup_peak(scheduler, warmup):
    """A validation metric that never improves, patience 1, 2 steps an epoch: Lightning stops
    after epoch 1; with a warm-up of w steps, counting starts at the epoch of step w + 1, the
    first whose rate is not above the one before (a cosine's: the first)."""
    import pytorch_lightning as pl
    import torch

    from attnflow.training.callbacks import WarmEarlyStopping

    class Flat(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Linear(2, 1)

        def training_step(self, batch, _):
            return self.w(batch).pow(2).mean()

        def validation_step(self, batch, _):
            self.log("val/loss", torch.tensor(1.0))

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            ramp = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(scheduler, 40, warmup))
            return {"optimizer": opt, "lr_scheduler": {"scheduler": ramp, "interval": "step"}}

    loader = lambda: torch.utils.data.DataLoader(torch.randn(4, 2), batch_size=2)  # noqa: E731
    trainer = pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu", max_epochs=20,
                         callbacks=[WarmEarlyStopping(monitor="val/loss", patience=1)])
    trainer.fit(Flat(), loader(), loader())
    warm_epoch = warmup // 2 if scheduler == "noam" else 0  # (steps 2e + 1 and 2e + 2)
    assert trainer.current_epoch == warm_epoch + 2
