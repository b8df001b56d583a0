"""What attnflow reads of its libraries' internals (attnflow/training/lightning_internals.py,
attnflow/training/wandb_internals.py, attnflow/config/hydra_internals.py) is there, with the
shape attnflow reads, on the installed versions: each read on real objects (a small fit, a
logger, a composed config), so that a version that changes one fails here, naming it."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from hydra import compose, initialize_config_dir
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from pytorch_lightning.callbacks import EMAWeightAveraging, ModelCheckpoint

from attnflow.config.hydra_internals import (BASIC_LAUNCHER, CORE_PLUGINS, CheckedConfigLoader,
                                             checked_compositions, record_as_typed)
from attnflow.data.resumable import ResumableDataLoader
from attnflow.training.lightning_internals import (epoch_counts, finish_epoch, fit_loop_state,
                                                   last_average_step, last_saved_step, mark_saved,
                                                   restore_fit_progress)
from attnflow.training.wandb_internals import without_anonymous

CONF = Path(__file__).resolve().parent.parent / "conf"
BATCHES = 4  # an epoch
COUNTERS = {"ready", "started", "processed", "completed"}


class Tiny(pl.LightningModule):
    """A linear model on 8 points, 2 a batch (4 batches an epoch), its loader resumable."""

    def __init__(self, reads_steps: bool = False) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.reads_steps = reads_steps  # configure_optimizers reads estimated_stepping_batches

    def training_step(self, batch, batch_idx):
        return self.layer(batch).pow(2).mean()

    def configure_optimizers(self):
        if self.reads_steps:
            assert self.trainer.estimated_stepping_batches > 0
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return Loads(torch.arange(16.0).view(8, 2), batch_size=2, shuffle=True)


class Loads(ResumableDataLoader):
    """A resumable loader that records the states Lightning hands to it."""

    loaded: list = []

    def load_state_dict(self, state):
        Loads.loaded.append(state)
        super().load_state_dict(state)


class Saves(pl.Callback):
    """Writes ``mid.ckpt`` after global step 6 (within the second epoch) and ``end.ckpt`` at the
    first epoch's end; at that end also marks the step saved for ``checkpoint``."""

    def __init__(self, folder: Path, checkpoint: ModelCheckpoint) -> None:
        self.folder, self.checkpoint = folder, checkpoint

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        trainer.train_dataloader.trained = batch_idx + 1  # (attnflow's TrainingState does this)
        if trainer.global_step == 6:
            trainer.save_checkpoint(self.folder / "mid.ckpt")

    def on_train_epoch_end(self, trainer, pl_module):
        if trainer.current_epoch == 0:
            trainer.save_checkpoint(self.folder / "end.ckpt")
            mark_saved(self.checkpoint, trainer.global_step)


def _trainer(root: Path, callbacks=(), **limits) -> pl.Trainer:
    return pl.Trainer(default_root_dir=root, accelerator="cpu", logger=False,
                      enable_progress_bar=False, enable_model_summary=False,
                      callbacks=list(callbacks), **{"max_epochs": 2, **limits})


def _ckpt(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """Two epochs of :class:`Tiny` with a ModelCheckpoint (a file every epoch), an EMA and
    :class:`Saves` (before the ModelCheckpoint: callbacks run in their order)."""
    root = tmp_path_factory.mktemp("fit")
    checkpoint = ModelCheckpoint(dirpath=root / "checkpoints", save_top_k=-1, monitor=None)
    ema = EMAWeightAveraging()
    out = {"root": root, "checkpoint": checkpoint, "ema": ema,
           "before": (last_saved_step(checkpoint), last_average_step(ema))}
    trainer = _trainer(root, [Saves(root, checkpoint), checkpoint, ema])
    trainer.fit(Tiny())
    out["trainer"] = trainer
    return out


# -- Lightning -----------------------------------------------------------------------------------
def test_model_checkpoint_keeps_the_step_it_saved_at_and_saves_none_again_there(fitted):
    checkpoint, trainer = fitted["checkpoint"], fitted["trainer"]
    assert fitted["before"][0] == 0
    assert last_saved_step(checkpoint) == trainer.global_step == 2 * BATCHES
    # the first epoch's step was marked saved before the checkpoint's hook: it wrote no file
    names = sorted(p.name for p in (fitted["root"] / "checkpoints").glob("*.ckpt"))
    assert names == [f"epoch=1-step={2 * BATCHES}.ckpt"]


def test_a_checkpoint_holds_the_fit_loop_counters_attnflow_reads(fitted):
    mid = _ckpt(fitted["root"] / "mid.ckpt")  # after step 6: 2 batches into the second epoch
    fit = fit_loop_state(mid)
    assert set(fit["epoch_progress"]) == {"current", "total"}
    for counts in (*fit["epoch_progress"].values(), fit["epoch_loop.batch_progress"]["current"],
                   fit["epoch_loop.val_loop.batch_progress"]["total"]):
        assert set(counts) == COUNTERS and all(isinstance(v, int) for v in counts.values())
    optim = fit["epoch_loop.automatic_optimization.optim_progress"]["optimizer"]
    for counts in (fit["epoch_loop.scheduler_progress"]["current"], optim["step"]["current"],
                   optim["zero_grad"]["current"]):
        assert {"ready", "completed"} <= set(counts) <= COUNTERS
    assert isinstance(fit["epoch_loop.batch_progress"]["is_last_batch"], bool)
    assert epoch_counts(mid) == {"ready": 2, "started": 2, "processed": 1, "completed": 1}
    # Lightning's state of a stateful train loader: what ResumableDataLoader.state_dict gave
    (loader,) = fit["state_dict"]["combined_loader"]
    assert loader["trained"] == 2 and loader["epoch_rng"].dtype == torch.uint8


def test_an_epoch_end_checkpoint_reads_as_one_and_is_finished_in_place(fitted):
    end = _ckpt(fitted["root"] / "end.ckpt")  # in on_train_epoch_end of the first epoch
    assert epoch_counts(end) == {"ready": 1, "started": 1, "processed": 1, "completed": 0}
    fit = fit_loop_state(end)
    assert fit["epoch_loop.batch_progress"]["current"]["completed"] == BATCHES
    finish_epoch(fit, BATCHES)  # in place: the checkpoint's own dictionary
    assert epoch_counts(end)["completed"] == 1
    assert set(fit["epoch_loop.batch_progress"]["current"].values()) == {0}
    assert fit_loop_state({"state_dict": {}}) is None and epoch_counts({}) == {}


def test_a_fit_loop_state_restores_a_fresh_trainers_progress(fitted, tmp_path):
    mid = _ckpt(fitted["root"] / "mid.ckpt")
    trainer = _trainer(tmp_path)
    restore_fit_progress(trainer, mid)
    assert trainer.global_step == mid["global_step"] == 6
    assert trainer.current_epoch == mid["epoch"] == 1
    restore_fit_progress(trainer, {"state_dict": {}})  # none: nothing changes
    assert trainer.global_step == 6


def test_weight_averaging_keeps_the_step_of_its_last_update(fitted):
    assert fitted["before"][1] == 0
    assert last_average_step(fitted["ema"]) == fitted["trainer"].global_step


@pytest.mark.parametrize("reads_steps", [False, True])
def test_lightning_restores_a_train_loaders_state_only_when_it_makes_the_loader_after_the_loops(
        fitted, tmp_path, reads_steps):
    """Lightning hands the saved state to a loader made after it restored the loops, not to one
    made before (configure_optimizers reading estimated_stepping_batches makes it there):
    attnflow's TrainingState restores the position in that case (it would do no harm were
    Lightning to restore it too)."""
    Loads.loaded = []
    trainer = _trainer(tmp_path, max_epochs=2)
    trainer.fit(Tiny(reads_steps), ckpt_path=fitted["root"] / "mid.ckpt")
    assert isinstance(trainer.train_dataloader, Loads)  # the loader Lightning iterated
    assert [s["trained"] for s in Loads.loaded] == ([] if reads_steps else [2])


# -- W&B -----------------------------------------------------------------------------------------
def test_wandb_loggers_init_arguments_pass_anonymous_which_attnflow_leaves_out(tmp_path):
    import wandb
    from pytorch_lightning.loggers import WandbLogger

    logger = WandbLogger(project="p", save_dir=str(tmp_path), mode="offline")
    init = logger._wandb_init  # (read here to check it: attnflow reads it in wandb_internals)
    assert isinstance(init, dict) and "anonymous" in init and init["anonymous"] is None
    assert without_anonymous(logger) is logger
    assert "anonymous" not in init and init["project"] == "p" and init["mode"] == "offline"
    assert set(init) <= set(inspect.signature(wandb.init).parameters)  # wandb.init's arguments


# -- Hydra ---------------------------------------------------------------------------------------
def test_hydra_main_composes_with_the_checked_loader_once_to_learn_the_mode(tmp_path, monkeypatch):
    """``hydra.main`` builds its Hydra with the loader :func:`checked_compositions` names: each
    composition is checked as it is made, the first one with no logging configured yet."""
    import logging
    import sys

    import hydra
    from hydra.core.global_hydra import GlobalHydra
    from hydra.utils import get_class

    seen, ran = [], []

    def check(cfg, first):
        seen.append((first, cfg.seed, cfg.hydra.launcher._target_, len(logging.root.handlers)))

    monkeypatch.setattr(sys, "argv", ["app", "seed=3", f"hydra.run.dir={tmp_path}", "hydra.output_subdir=null"])
    handlers = logging.root.handlers[:]
    try:
        with checked_compositions(check):
            hydra.main(version_base="1.3", config_path=str(CONF), config_name="train")(ran.append)()
    finally:
        GlobalHydra.instance().clear()
        for h in set(logging.root.handlers) - set(handlers):
            logging.root.removeHandler(h)
            h.close()
    assert [s[:3] for s in seen] == [(True, 3, BASIC_LAUNCHER), (False, 3, BASIC_LAUNCHER)]
    assert seen[0][3] == len(handlers)  # the first check came before Hydra's logging
    assert len(ran) == 1 and ran[0].seed == 3
    assert get_class(BASIC_LAUNCHER).__name__ == "BasicLauncher"
    assert CORE_PLUGINS in BASIC_LAUNCHER
    from hydra._internal import hydra as hydra_module

    assert hydra_module.ConfigLoaderImpl.__name__ == "ConfigLoaderImpl"  # put back
    assert issubclass(CheckedConfigLoader, hydra_module.ConfigLoaderImpl)


def test_a_composition_records_its_overrides_as_typed_as_hydra_would():
    """The loader's ``load_configuration`` takes Hydra's arguments; a config composed with
    ``++seed=3`` for the typed ``seed=3`` records, once :func:`record_as_typed`, what Hydra itself
    records of a composition with ``seed=3`` (a key the config has): the task overrides and the
    job's ``override_dirname``."""
    mine = inspect.signature(CheckedConfigLoader.load_configuration).parameters
    assert list(mine) == list(inspect.signature(ConfigLoaderImpl.load_configuration).parameters)
    typed = ["seed=3", "scorer=dot", "hydra.job.config.override_dirname.kv_sep=:"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        forced = compose("train", overrides=["++seed=3", *typed[1:]], return_hydra_config=True)
        plain = compose("train", overrides=typed, return_hydra_config=True)
    assert list(forced.hydra.overrides.task) == ["++seed=3", "scorer=dot"]
    record_as_typed(forced, {"++seed=3": "seed=3"})
    assert list(forced.hydra.overrides.task) == list(plain.hydra.overrides.task) == typed[:2]
    assert forced.hydra.job.override_dirname == plain.hydra.job.override_dirname == "scorer:dot,seed:3"
