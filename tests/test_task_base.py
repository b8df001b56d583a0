"""The task base: one typed ``optim`` child config, inherited fields in the registry, the
checkpoint metric from the task, and data + model + task compositions that fit or are refused."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint
from torch import nn

from attnflow.config.registry import TASKS, ConfigError, Registry
from attnflow.viz.panels import AttentionMaps
from attnflow.training.run import build_callbacks, train
from attnflow.training.validate import resolve_config
from attnflow.tasks.base import Task
from attnflow.tasks.optim import OptimConfig
from support import DATA_DIR, compose_cfg

QUIET = ["callbacks.progress_bar=none", "trainer.accelerator=cpu"]
# the runs that train: nothing recorded that the tests do not read
CHEAP = [*QUIET, "logger=none", "trainer.enable_model_summary=false",
         "callbacks.attention_maps.examples=0"]
# two batches of the reversal, one of validation and of test
TINY = [*CHEAP, "data.train_size=64", "data.val_size=16", "data.test_size=16", "data.batch_size=32",
        "trainer.max_epochs=1"]
CORA_RAW = DATA_DIR / "planetoid" / "Cora" / "raw"


# -- the optim child config ----------------------------------------------------------------------
@pytest.mark.parametrize("optim, expect", [
    ({"lrr": 0.1}, ["'task.optim.lrr'", "optimizer, lr, weight_decay, scheduler, warmup_steps, decay_bias_and_norm",
                    "Did you mean 'lr'?"]),
    ({"lr": "fast"}, ["'task.optim.lr'", "must be float", "'fast'"]),
    ({"warmup_steps": 1.5}, ["'task.optim.warmup_steps'", "must be int"]),
    ({"scheduler": "step"}, ["'task.optim.scheduler'", "'none', 'cosine', 'noam', 'linear'", "'step'"]),
    ({"optimizer": "adagrad"}, ["'task.optim.optimizer'", "'adam', 'adamw', 'sgd'"]),
    ({"cooldown": 1.0}, ["'task.optim.cooldown'", "[0, 1)"]),
    (3, ["'task.optim'", "mapping"]),
])
def test_optim_child_config_is_validated(optim, expect):
    with pytest.raises(ConfigError) as err:
        TASKS.validate({"name": "seq2seq", "optim": optim}, "task")
    for part in expect:
        assert part in str(err.value)


def test_a_bad_optim_field_stops_the_run_before_any_work(tmp_path):
    with pytest.raises(ConfigError, match=r"task\.optim\.lrr"):
        train(compose_cfg(["task.optim.lrr=0.1", *QUIET]), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_optim_overrides_merge_onto_the_tasks_default():
    out = TASKS.validate({"name": "seq2seq", "optim": {"lr": 0.01}}, "task")
    assert out["optim"] == {"optimizer": "adam", "lr": 0.01, "weight_decay": 0.0,
                            "scheduler": "cosine", "warmup_steps": 4000, "decay_bias_and_norm": True,
                            "cooldown": 0.0}
    task = TASKS.build({"name": "node_classification", "optim": {"scheduler": "noam"}},
                       nn.Linear(2, 2), 2)
    assert task.optim == OptimConfig(lr=0.005, weight_decay=5e-4, scheduler="noam")


@pytest.mark.parametrize("name", TASKS.names())
def test_every_task_has_the_inherited_optim_field_once(name):
    fields = [f.name for f in dataclasses.fields(TASKS.schema(name))]
    assert fields.count("optim") == 1 and len(fields) == len(set(fields))
    listed = [f for f, _, _ in TASKS.fields(name)]
    for sub in ("optimizer", "lr", "weight_decay", "scheduler", "warmup_steps"):
        assert listed.count(f"optim.{sub}") == 1
    assert issubclass(TASKS.get(name), Task)


def test_translation_declares_only_its_own_fields_and_inherits_the_rest():
    from attnflow.tasks.translation import TranslationTask

    import inspect

    own = [p.name for p in inspect.signature(TranslationTask.__init__).parameters.values()
           if p.kind is p.KEYWORD_ONLY]
    # optim and label_smoothing are declared again only for their translation defaults
    assert set(own) == {"optim", "label_smoothing", "beam_size", "val_beam_size", "length_penalty"}
    fields = {f: d for f, _, d in TASKS.fields("translation")}
    assert fields["penalty_weight"] == 0.0  # the seq2seq task's, through **kwargs
    assert fields["label_smoothing"] == 0.1 and fields["optim.lr"] == 1e-3
    assert fields["optim.scheduler"] == "none"


def test_group_yaml_holds_only_the_name():
    """The constructor defaults are what the group files gave; the files name the task."""
    conf = Path(__file__).resolve().parent.parent / "conf" / "task"
    from omegaconf import OmegaConf

    for path in conf.glob("*.yaml"):
        assert list(OmegaConf.load(path)) == ["name"], path


@dataclasses.dataclass(frozen=True)
class Inner:
    mode: typing.Literal["a", "b"] = "a"
    size: int = 1


class Parent(nn.Module):
    def __init__(self, *, inner: Inner = Inner(), width: int = 2):
        super().__init__()
        self.inner, self.width = inner, width


def test_nested_config_and_inherited_fields_are_generic():
    """Any block: a keyword-only field annotated with a dataclass is a nested typed config, and a
    subclass passing **kwargs up inherits its parent's fields (a redeclared one keeps its place)."""
    reg = Registry("test_task_base_kind")

    @reg.register("child")
    class Child(Parent):
        def __init__(self, *, inner: Inner = Inner(size=5), depth: int = 3, **kwargs):
            super().__init__(inner=inner, **kwargs)
            self.depth = depth

    assert [f.name for f in dataclasses.fields(reg.schema("child"))] == ["inner", "width", "depth"]
    assert reg.fields("child")[:2] == [("inner.mode", "'a' | 'b'", "a"), ("inner.size", "int", 5)]
    block = reg.build({"name": "child", "inner": {"mode": "b"}, "width": 7})
    assert block.inner == Inner(mode="b", size=5) and block.width == 7 and block.depth == 3
    with pytest.raises(ConfigError, match=r"'x\.inner\.mode'.*'a', 'b'"):
        reg.validate({"name": "child", "inner": {"mode": "c"}}, "x")


# -- optimiser and schedule as before -----------------------------------------------------------------
def _optimizers(overrides, context=(0, 1, 2, 5), steps=100):
    resolved = resolve_config(compose_cfg(overrides))
    task = TASKS.build(resolved["task"], nn.Linear(2, 2), *context, path="task")
    task._trainer = SimpleNamespace(estimated_stepping_batches=steps, gradient_clip_val=None)
    return task.configure_optimizers()


def test_seq2seq_default_is_adam_lr_0003_with_cosine_decay():
    out = _optimizers([])
    opt, sched = out["optimizer"], out["lr_scheduler"]["scheduler"]
    assert type(opt) is torch.optim.Adam and out["lr_scheduler"]["interval"] == "step"
    assert sched.base_lrs == [0.003] and opt.defaults["weight_decay"] == 0.0
    assert sched.lr_lambdas[0](0) == pytest.approx(1.0) and sched.lr_lambdas[0](50) == pytest.approx(0.5)


def test_mt_transformer_is_adam_lr_00007_noam_4000():
    out = _optimizers(["experiment=mt_transformer"], steps=9070)  # (Multi30k's 20 epochs)
    opt, sched = out["optimizer"], out["lr_scheduler"]["scheduler"]
    assert type(opt) is torch.optim.Adam and sched.base_lrs == [0.0007]
    assert sched.lr_lambdas[0](4000) == pytest.approx(1.0)
    assert sched.lr_lambdas[0](1000) == pytest.approx(0.25)


def test_reverse_transformer_and_gat_presets():
    sched = _optimizers(["experiment=reverse_transformer"], steps=1000)["lr_scheduler"]["scheduler"]
    assert sched.base_lrs == [0.001] and sched.lr_lambdas[0](300) == pytest.approx(1.0)
    out = _optimizers(["experiment=gat_pubmed"], context=(3,))
    opt, sched = out["optimizer"], out["lr_scheduler"]["scheduler"]
    assert type(opt) is torch.optim.Adam and sched.lr_lambdas[0](300) == 1.0  # scheduler none
    assert opt.defaults["lr"] == 0.01 and opt.defaults["weight_decay"] == 1e-3


# -- the checkpoint metric comes from the task ------------------------------------------------------------
def _checkpoint(overrides, tmp_path):
    resolved = resolve_config(compose_cfg(overrides))
    callbacks = build_callbacks(resolved["callbacks"], tmp_path, TASKS.get(resolved["task"]["name"]))
    # the monitored checkpoint and early stopping (not the unmonitored one that keeps last.ckpt)
    return [c for c in callbacks if isinstance(c, EarlyStopping)
            or (isinstance(c, ModelCheckpoint) and c.monitor is not None)]


@pytest.mark.parametrize("overrides, monitor", [
    ([], "val/seq_acc"),
    (["experiment=reverse_transformer"], "val/seq_acc"),
    (["experiment=mt_transformer"], "val/bleu"),
    (["experiment=han_imdb"], "val/acc"),
    (["experiment=gat_synthetic"], "val/acc"),
])
def test_checkpoint_monitors_the_tasks_metric(overrides, monitor, tmp_path):
    (ck,) = _checkpoint(overrides, tmp_path)
    assert (ck.monitor, ck.mode) == (monitor, "max")


def test_explicit_monitor_wins_and_early_stopping_follows_the_task(tmp_path):
    ck, es = _checkpoint(["callbacks.checkpoint.monitor=val/loss",
                          "callbacks.early_stopping={patience: 3}"], tmp_path)
    assert (ck.monitor, ck.mode) == ("val/loss", "min")  # the metric's own direction
    assert (es.monitor, es.mode, es.patience) == ("val/seq_acc", "max", 3)
    (ck, es) = _checkpoint(["experiment=gat_cora"], tmp_path)
    assert (ck.monitor, ck.mode, es.monitor, es.mode) == ("val/acc", "max", "val/loss", "min")


def test_an_empty_entry_means_its_defaults_not_off(tmp_path):
    # `callbacks.early_stopping={}` on a config where it is null: EarlyStopping with its fields'
    # defaults (patience 3, the task's metric), not silently none; only null turns one off
    (ck, es) = _checkpoint(["callbacks.early_stopping={}"], tmp_path)
    assert (es.monitor, es.mode, es.patience) == ("val/seq_acc", "max", 3)
    resolved = resolve_config(compose_cfg(["callbacks.checkpoint=null", "callbacks.attention_maps=null"]))
    resolved["callbacks"].update(checkpoint={}, attention_maps={})  # as a merge into null leaves them
    built = build_callbacks(resolved["callbacks"], tmp_path, TASKS.get(resolved["task"]["name"]))
    (ck,) = [c for c in built if isinstance(c, ModelCheckpoint) and c.monitor is not None]
    assert (ck.monitor, ck.save_top_k) == ("val/seq_acc", 1)
    assert any(isinstance(c, AttentionMaps) and c.examples == 4 for c in built)


@pytest.mark.slow
def test_checkpoint_null_writes_no_checkpoint(tmp_path):
    # (Lightning adds a ModelCheckpoint of its own unless told not to: the run wrote
    # csv/version_0/checkpoints/epoch=0-step=8.ckpt and tested it as the "best")
    summary = train(compose_cfg(["callbacks.checkpoint=null", *TINY]), tmp_path / "run")
    assert summary["best_checkpoint"] == "" and summary["global_step"] == 2
    assert not list((tmp_path / "run").rglob("*.ckpt"))
    assert {"best/val/seq_acc", "test/seq_acc"} <= set(summary["metrics"])  # of the final weights
    with pytest.raises(ConfigError, match=r"callbacks.checkpoint \(null: none\)"):
        resolve_config(compose_cfg(["+trainer.enable_checkpointing=false"]))


def test_a_misspelt_monitor_is_refused_before_any_work(tmp_path):
    with pytest.raises(ConfigError) as err:
        train(compose_cfg(["callbacks.checkpoint.monitor=val/seq_accc", *QUIET]), tmp_path / "run")
    msg = str(err.value)
    assert "callbacks.checkpoint.monitor 'val/seq_accc'" in msg and "Did you mean 'val/seq_acc'?" in msg
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match="val/bleu"):  # a translation metric is not seq2seq's
        resolve_config(compose_cfg(["callbacks.early_stopping={monitor: val/bleu}"]))


# -- compositions by group ----------------------------------------------------------------------------
def test_a_misfit_composition_fails_before_any_work(tmp_path):
    cfg = compose_cfg(["data=reverse", "model=gat", "task=seq2seq", *QUIET])
    with pytest.raises(ConfigError) as err:
        train(cfg, tmp_path / "run")
    msg = str(err.value)
    assert "data 'reverse', model 'gat' and task 'seq2seq' do not fit together" in msg
    assert "model 'gat' works on graphs" in msg and "planetoid, synthetic_graph" in msg
    assert "data 'reverse' gives sequence pairs" in msg and "seq2seq, transformer" in msg
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("overrides, misfit", [
    (["data=synthetic_graph", "model=gat", "task=seq2seq"], "task 'seq2seq' works on sequence pairs"),
    (["data=reverse", "task=classification"], "task 'classification' works on labelled documents"),
    (["data=imdb", "model=transformer", "task=classification"], "model 'transformer' works on sequence pairs"),
])
def test_other_misfits_name_the_odd_one_out(overrides, misfit):
    with pytest.raises(ConfigError, match="do not fit together") as err:
        resolve_config(compose_cfg(overrides))
    assert misfit in str(err.value)


def test_translation_task_on_reverse_data_trains(tmp_path):
    """Without a tokenizer the translation task scores the space-joined target symbols."""
    cfg = compose_cfg(["task=translation", *TINY, "trainer.fast_dev_run=true", "task.beam_size=2"])
    summary = train(cfg, tmp_path)
    assert summary["global_step"] == 1
    assert {"best/val/bleu", "test/bleu", "best/val/seq_acc"} <= set(summary["metrics"])


def _two_graph_epochs(data_overrides, tmp_path):
    cfg = compose_cfg([*data_overrides, "model=gat", "task=node_classification",
                       "trainer.max_epochs=2", *CHEAP])
    summary = train(cfg, tmp_path)
    assert summary["epochs"] == 2
    assert {"best/val/acc", "best/val/loss", "test/acc"} <= set(summary["metrics"])
    best = summary["best_checkpoint"]
    assert best and Path(best).is_file()
    state = torch.load(best, weights_only=True)
    (key,) = [k for k in state["callbacks"] if k.startswith("ModelCheckpoint") and "'monitor': None" not in k]
    assert "'monitor': 'val/acc'" in key and "'mode': 'max'" in key
    assert state["attnflow_config"]["task"]["name"] == "node_classification"
    return summary


@pytest.mark.skipif(not CORA_RAW.is_dir(),
                    reason=f"Cora raw files not found at {CORA_RAW} (set ATTNFLOW_DATA_DIR)")
@pytest.mark.slow
def test_planetoid_gat_node_classification_by_groups_trains(tmp_path):
    """With the paper's scorer: the root's default, additive with 128 hidden units, scores each of
    Cora's 13k edges per head on its own (≈ 20 s of this test's time on a CPU); other scorers on
    graphs: tests/blocks/test_graph_attention.py."""
    torch.set_num_threads(1)
    _two_graph_epochs(["data=planetoid", f"paths.data_dir={DATA_DIR}", "scorer=gat"], tmp_path)


@pytest.mark.slow
def test_synthetic_graph_gat_node_classification_by_groups_trains(tmp_path):
    torch.set_num_threads(1)
    _two_graph_epochs(["data=synthetic_graph", "data.num_nodes=100", "scorer.hidden_dim=16"],
                      tmp_path)


class _Mean(Task):
    """Logs the mean of each batch's values, weighted by the batch's size, as the tasks do."""

    def step(self, batch, split):
        (x,) = batch
        self.log(f"{split}/loss", x.mean(), batch_size=len(x), sync_dist=True)


@pytest.mark.parametrize("values", [[0.0, 1, 2, 3, 4, 5, 6], [0.0, 1, 2, 3, 4, float("nan"), 6]])
def test_a_synced_epoch_mean_weighs_each_batch_by_its_size(values):
    """Batches of 5 and 2: the mean over the 7 values (3.0), not over the batches (3.75); a NaN
    stays NaN. Over ranks the same metric sums values and counts (tests/test_ddp.py)."""
    import pytorch_lightning as pl
    from torch.utils.data import DataLoader, TensorDataset

    data = DataLoader(TensorDataset(torch.tensor(values)), batch_sampler=[[0, 1, 2, 3, 4], [5, 6]])
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False,
                         enable_model_summary=False)
    (got,) = trainer.validate(_Mean(nn.Linear(1, 1)), data, verbose=False)
    expect = torch.tensor(values).mean()
    assert torch.isnan(expect) or expect == 3.0
    torch.testing.assert_close(torch.tensor(got["val/loss"]), expect, equal_nan=True)
