"""Overrides of fields that the rest of the config leaves unread are refused before any work
(attnflow.config.overrides); each "unread" claim is first checked against the block's behaviour."""

from __future__ import annotations

import pytest
import torch

from attnflow.blocks.decoders.luong import LuongDecoder
from attnflow.data.synthetic_graph import SyntheticGraphDataModule, make_sbm_graph
from attnflow.config.overrides import inert_fields, typed_fields
from attnflow.config.registry import DATA, ENCODERS, MODELS, ConfigError
from attnflow.training.validate import resolve_config
from attnflow.training.run import train
from attnflow.tasks.optim import OptimConfig, configure, lr_factor
from support import compose_cfg, fit_tiny

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


# -- each claim holds: the field changes nothing where it is listed, and something where it is not --

def _luong_logits(alignment: str, window: int, gaussian: bool) -> torch.Tensor:
    torch.manual_seed(0)
    dec = LuongDecoder(11, 8, 8, hidden_dim=8, alignment=alignment, window=window, gaussian=gaussian)
    g = torch.Generator().manual_seed(1)
    memory, init = torch.randn(2, 9, 8, generator=g), torch.randn(2, 8, generator=g)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, 6:] = False
    return dec(torch.randint(0, 11, (2, 5), generator=g), memory, mask, init)[0]


def test_luong_window_and_gaussian_are_unread_by_global_alignment_only():
    base = _luong_logits("global", 1, True)
    assert torch.equal(base, _luong_logits("global", 4, False))
    local = _luong_logits("local_m", 1, True)
    assert not torch.allclose(local, _luong_logits("local_m", 4, True))
    assert not torch.allclose(local, _luong_logits("local_m", 1, False))
    cfg = MODELS.validate({"name": "seq2seq", "decoder": {"name": "luong"}}, "model")
    decoder = lambda found: {p for p in found if p.startswith("model.decoder.")}  # noqa: E731
    assert decoder(MODELS.inert_fields(cfg, "model")) == {"model.decoder.window", "model.decoder.gaussian"}
    cfg["decoder"]["alignment"] = "local_p"
    assert decoder(MODELS.inert_fields(cfg, "model")) == set()


@pytest.mark.parametrize("scheduler, unread", [("none", True), ("cosine", True), ("noam", False),
                                               ("linear", False), ("constant_with_warmup", False)])
def test_warmup_steps_are_unread_by_schedules_without_warm_up(scheduler, unread):
    short, long = lr_factor(scheduler, 500, 10), lr_factor(scheduler, 500, 300)
    same = all(short(s) == long(s) for s in range(0, 500, 7))
    assert same == unread
    task = {"name": "node_classification", "optim": {"scheduler": scheduler}}
    found = set(inert_fields({"data": {"name": "synthetic_graph"}, "model": {"name": "gat"},
                              "task": task}))
    assert ("task.optim.warmup_steps" in found) == unread


def _after_steps(optim_cfg: OptimConfig) -> list:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    opt = configure(net, optim_cfg)
    for _ in range(3):
        opt.zero_grad()
        net(torch.randn(5, 4)).pow(2).sum().backward()
        opt.step()
    return [p.detach().clone() for p in net.parameters()]


@pytest.mark.parametrize("optimizer", ["adam", "adamw", "sgd"])
def test_decay_bias_and_norm_is_unread_without_weight_decay(optimizer):
    for decay, unread in ((0.0, True), (0.1, False)):
        a, b = (_after_steps(OptimConfig(optimizer=optimizer, lr=0.1, weight_decay=decay,
                                         decay_bias_and_norm=flag)) for flag in (True, False))
        assert all(torch.equal(x, y) for x, y in zip(a, b)) == unread
        found = OptimConfig.inert_fields({"weight_decay": decay, "scheduler": "noam"})
        assert ("decay_bias_and_norm" in found) == unread


def _gat_logits(**fields) -> torch.Tensor:
    torch.manual_seed(0)
    model = MODELS.build({"name": "gat", **fields}, 6, 3).eval()
    g = torch.Generator().manual_seed(2)
    edge_index = torch.randint(0, 10, (2, 30), generator=g)
    return model(torch.randn(10, 6, generator=g), edge_index)


def test_gat_hidden_layer_fields_are_unread_with_one_layer():
    one = _gat_logits(layers=1, hidden_dim=4, heads=2)
    assert torch.equal(one, _gat_logits(layers=1, hidden_dim=16, heads=8,
                                        hidden_aggregator={"name": "mean"}))
    assert _gat_logits(layers=2, hidden_dim=4, heads=2).shape == one.shape
    assert not torch.allclose(_gat_logits(layers=2, hidden_dim=4, heads=2),
                              _gat_logits(layers=2, hidden_dim=4, heads=4))
    found = MODELS.inert_fields(MODELS.validate({"name": "gat", "layers": 1}, "model"))
    assert set(found) == {"model.hidden_dim", "model.heads", "model.hidden_aggregator"}
    assert MODELS.inert_fields(MODELS.validate({"name": "gat"}, "model")) == {}


def _batches(**fields):
    dm = SyntheticGraphDataModule(num_nodes=60, **fields)
    dm.setup()
    return [(b.x.shape[0], b.train_mask.sum().item()) for b in dm.train_dataloader()]


def test_graph_loader_fields_are_unread_by_the_other_loaders():
    assert _batches(loader="full", batch_size=4, num_hops=1) == _batches(loader="full", batch_size=16,
                                                                       num_hops=3)
    assert _batches(loader="khop", batch_size=4) != _batches(loader="khop", batch_size=16)
    assert _batches(loader="khop", num_hops=1) != _batches(loader="khop", num_hops=3)
    graph = {"name": "synthetic_graph", "multi_label": True}
    found = DATA.inert_fields(DATA.validate(graph, "data"), "data")
    assert set(found) == {"data.batch_size", "data.num_hops", "data.num_neighbors"}
    found = DATA.inert_fields(DATA.validate({**graph, "loader": "khop"}, "data"))
    assert set(found) == {"data.num_neighbors"}
    assert "data.num_hops" in DATA.inert_fields(
        DATA.validate({"name": "planetoid", "loader": "neighbor"}, "data"))


def test_extra_label_prob_is_unread_without_multi_label():
    kw = dict(num_nodes=50, num_classes=3, feature_dim=4, p_in=0.2, p_out=0.02, noise=1.0,
              split=[0.5, 0.25], seed=3)
    one = make_sbm_graph(multi_label=False, extra_label_prob=0.1, **kw)
    assert torch.equal(one.y, make_sbm_graph(multi_label=False, extra_label_prob=0.9, **kw).y)
    assert not torch.equal(make_sbm_graph(multi_label=True, extra_label_prob=0.1, **kw).y,
                           make_sbm_graph(multi_label=True, extra_label_prob=0.9, **kw).y)
    found = DATA.inert_fields(DATA.validate({"name": "synthetic_graph"}, "data"), "data")
    assert "data.extra_label_prob" in found
    assert "data.extra_label_prob" not in DATA.inert_fields(
        DATA.validate({"name": "synthetic_graph", "multi_label": True}, "data"), "data")


# -- the run refuses them when typed, before any work; a preset's value is left alone ---------------

@pytest.mark.parametrize("overrides, says", [
    (["data.loader=full", "data.batch_size=8"],
     ["data.batch_size=8 (at 'data.batch_size') does nothing", "data.loader=full the whole graph is "
      "one batch", "read by loader=khop and loader=neighbor"]),
    (["data.num_neighbors=[5,5]"], ["data.num_neighbors=[5,5]", "data.loader=khop", "loader=neighbor"]),
    (["task.optim.warmup_steps=30"], ["task.optim.warmup_steps=30", "task.optim.scheduler=none has "
                                      "no warm-up", "noam, linear, constant_with_warmup"]),
    (["trainer.gradient_clip_algorithm=value"], ["trainer.gradient_clip_algorithm=value", "set "
                                                 "trainer.gradient_clip_val to clip them"]),
    (["test=false", "trainer.limit_test_batches=3"], ["trainer.limit_test_batches=3 (at "
                                                      "'trainer.limit_test_batches') does nothing: "
                                                      "test=false, so the run tests nothing"]),
    (["data.extra_label_prob=0.3"], ["data.extra_label_prob=0.3", "data.multi_label=false"]),
    (["task.optim.weight_decay=0", "task.optim.decay_bias_and_norm=false"],
     ["task.optim.weight_decay=0 decays no parameter"]),
    (["model.layers=1", "model.heads=4"], ["model.heads=4 (at 'model.heads')", "model.layers=1 is the "
                                           "output layer alone"]),
    (["trainer.min_epochs=1"], ["trainer.min_epochs=1 (at 'trainer.min_epochs') does nothing",
                                "nothing asks the run to stop before trainer.max_epochs",
                                "callbacks.early_stopping", "trainer.max_time"]),
    (["trainer.min_steps=20"], ["trainer.min_steps=20 (at 'trainer.min_steps') does nothing"]),
])
def test_an_unread_field_set_on_the_command_line_is_refused(overrides, says, tmp_path):
    with pytest.raises(ConfigError) as err:
        train(compose_cfg([*GRAPH, *overrides], return_hydra_config=True), tmp_path / "run")
    for text in says:
        assert text in str(err.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("overrides", [
    ["data.loader=khop", "data.batch_size=8"],          # the field counts there
    ["task.optim.scheduler=noam", "task.optim.warmup_steps=30"],
    ["trainer.gradient_clip_val=1", "trainer.gradient_clip_algorithm=value"],
    ["trainer.limit_test_batches=3"],  # tested (test=true)
    ["data.multi_label=true", "task.multi_label=true", "data.extra_label_prob=0.3"],
    ["task.optim.weight_decay=0.01", "task.optim.decay_bias_and_norm=false"],
    ["model.layers=1"],  # the preset's heads are now unread, but the user did not set them
    ["data.loader=full"],  # the preset's batch_size is now unread, but the user did not set it
    ["trainer.min_epochs=1", "callbacks.early_stopping={}"],  # holds early stopping off
    ["trainer.min_steps=2", "trainer.max_time=00:00:10:00"],  # holds the time limit off
])
def test_a_field_that_counts_or_that_a_preset_set_is_accepted(overrides):
    resolved = resolve_config(compose_cfg([*GRAPH, *overrides], return_hydra_config=True))
    for item in overrides:
        key, value = item.split("=")
        node = resolved
        for part in key.split("."):
            node = node[part]
        assert str(node).lower().replace(" ", "") == value.lower()


@pytest.mark.parametrize("name", ["rnn", "rnn_unpacked"])
def test_rnn_encoder_dropout_is_unread_with_one_layer(name):
    def out(layers, dropout):
        torch.manual_seed(0)
        enc = ENCODERS.build({"name": name, "hidden_dim": 6, "layers": layers, "dropout": dropout}, 5)
        enc.train()
        torch.manual_seed(1)
        return enc(torch.randn(3, 7, 5), torch.tensor([7, 4, 2]))[0]

    assert torch.equal(out(1, 0.0), out(1, 0.7))
    assert not torch.equal(out(2, 0.0), out(2, 0.7))
    assert set(ENCODERS.inert_fields(ENCODERS.validate({"name": name}, "e"), "e")) == {"e.dropout"}
    assert ENCODERS.inert_fields(ENCODERS.validate({"name": name, "layers": 2}, "e"), "e") == {}


def test_cnn_pool_size_without_pooling_and_pooling_with_size_one_are_unread():
    def out(**fields):
        torch.manual_seed(0)
        enc = ENCODERS.build({"name": "cnn", "channels": [4, 4], **fields}, 3).eval()
        return enc(torch.randn(2, 3, 12, 12, generator=torch.Generator().manual_seed(1)))[0]

    assert torch.equal(out(pooling="none", pool_size=2), out(pooling="none", pool_size=3))
    assert torch.equal(out(pooling="max", pool_size=1), out(pooling="avg", pool_size=1))
    assert not torch.equal(out(pooling="max", pool_size=2), out(pooling="avg", pool_size=2))
    inert = lambda **f: set(ENCODERS.inert_fields(ENCODERS.validate({"name": "cnn", **f}, "e"), "e"))  # noqa: E731
    assert inert(pooling="none") == {"e.pool_size"} and inert(pool_size=1) == {"e.pooling"}
    assert inert() == set()


def test_gat_head_dropout_is_unread_without_input_dropout():
    def out(dropout, head_dropout):
        torch.manual_seed(0)
        model = MODELS.build({"name": "gat", "dropout": dropout, "attn_dropout": 0.0,
                              "head_dropout": head_dropout}, 6, 3).train()
        g = torch.Generator().manual_seed(2)
        return model(torch.randn(10, 6, generator=g), torch.randint(0, 10, (2, 30), generator=g))

    assert torch.equal(out(0.0, False), out(0.0, True))
    assert not torch.allclose(out(0.5, False), out(0.5, True))
    found = MODELS.inert_fields(MODELS.validate({"name": "gat", "dropout": 0.0}, "model"))
    assert set(found) == {"model.head_dropout"}


def test_bert_classifier_dropout_is_unread_by_pretraining():
    def dropouts(head):
        model = MODELS.build({"name": "bert", "head": head, "d_model": 16, "layers": 1, "ffn_dim": 32,
                              "classifier_dropout": 0.77}, 40, 0, 0 if head == "pretraining" else 2)
        return [m for m in model.modules() if isinstance(m, torch.nn.Dropout) and m.p == 0.77]

    assert dropouts("pretraining") == [] and len(dropouts("sequence")) == 1
    fields = MODELS.validate({"name": "bert"}, "model")
    assert set(MODELS.inert_fields(fields)) == {"model.classifier_dropout"}
    assert MODELS.inert_fields({**fields, "head": "sequence"}) == {}


def test_planetoid_seed_is_read_by_the_khop_loader_only():
    found = lambda **f: set(DATA.inert_fields(DATA.validate({"name": "planetoid", **f}, "data")))  # noqa: E731
    assert "data.seed" in found() and "data.seed" in found(loader="neighbor")
    assert "data.seed" not in found(loader="khop")


@pytest.mark.parametrize("overrides, says", [
    (["callbacks.attention_maps.examples=0", "callbacks.attention_maps.every_n_epochs=2"],
     "callbacks.attention_maps.every_n_epochs=2 (at 'callbacks.attention_maps.every_n_epochs') does "
     "nothing: callbacks.attention_maps.examples=0 draws no attention maps"),
    (["+callbacks.average={last:2,mode:max}"], "(at 'callbacks.average.mode') does nothing: "
                                               "callbacks.average.last keeps the last validated epochs"),
    # the maps during training go to W&B or TensorBoard only; the pictures after training are
    # drawn whatever every_n_epochs says
    (["callbacks.attention_maps.every_n_epochs=2"],
     "callbacks.attention_maps.every_n_epochs=2 (at 'callbacks.attention_maps.every_n_epochs') does "
     "nothing: the maps drawn during training go to a W&B or TensorBoard logger, and logger=csv "
     "gives neither"),
    (["logger=none", "callbacks.attention_maps.every_n_epochs=0"], "logger=none gives neither"),
    # no top-k checkpoint, no monitor and no averaging: nothing ranks by the mode
    (["callbacks.checkpoint.save_top_k=0", "callbacks.checkpoint.mode=max"],
     "callbacks.checkpoint.mode=max (at 'callbacks.checkpoint.mode') does nothing: "
     "callbacks.checkpoint.save_top_k=0 keeps no best checkpoint"),
    (["callbacks.checkpoint={save_top_k: 0, mode: min}"], "set callbacks.checkpoint.save_top_k=1 (or "
                                                           "-1: every one) to keep the best"),
])
def test_unread_callback_fields_are_refused_when_typed(overrides, says, tmp_path):
    with pytest.raises(ConfigError) as err:
        train(compose_cfg([*GRAPH, *overrides], return_hydra_config=True), tmp_path / "run")
    assert says in str(err.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("logger", ["tensorboard", "[csv,wandb]", "wandb"])
def test_attention_maps_every_n_epochs_is_read_with_a_dashboard_logger(logger):
    resolved = resolve_config(compose_cfg([*GRAPH, f"logger={logger}", "callbacks.attention_maps."
                                           "every_n_epochs=2"], return_hydra_config=True))
    assert resolved["callbacks"]["attention_maps"]["every_n_epochs"] == 2


def test_attention_maps_during_training_need_a_dashboard_logger(tmp_path):
    """The claim: with only a CSV logger no validation asks the task for its dashboard, whatever
    every_n_epochs is; the pictures after training are drawn once."""
    from unittest import mock

    from attnflow.tasks.node_classification import NodeClassificationTask

    calls = []
    real = NodeClassificationTask.dashboard
    with mock.patch.object(NodeClassificationTask, "dashboard",
                           lambda self, batch: calls.append(1) or real(self, batch)):
        train(compose_cfg([*GRAPH, "trainer.max_epochs=3", "test=false", "logger=csv"]),
              tmp_path / "run")
    assert len(calls) == 1  # on_train_end's pictures only
    assert list((tmp_path / "run" / "attention").glob("*.png"))


def test_a_field_an_interpolation_reads_is_read(tmp_path):
    """data.num_hops with loader=full is unread by the data, but model.layers=${data.num_hops}
    reads it: not refused."""
    resolved = resolve_config(compose_cfg(["experiment=gat_cora", "data.num_hops=3",
                                           "model.layers=${data.num_hops}"], return_hydra_config=True))
    assert resolved["model"]["layers"] == 3
    with pytest.raises(ConfigError, match="data.num_hops=3 .* does nothing"):
        resolve_config(compose_cfg(["experiment=gat_cora", "data.num_hops=3"], return_hydra_config=True))


def test_a_common_field_every_task_sets_itself_is_unread_and_refused_when_typed():
    """experiment=bert_imdb_multitask data.common.label_field=rating ran with each task's own
    label field and metrics equal to the run without it."""
    from attnflow.data.multitask import MultiTaskDataModule

    common = {"name": "text_classification", "train_path": "a", "val_path": "b"}
    own = {"polarity": {"label_field": "label"}, "rating": {"label_field": "rating"}}
    for value in ("label", "rating", "stars"):  # the claim: what the tasks are built from
        tasks = MultiTaskDataModule.task_configs({"common": {**common, "label_field": value}, "tasks": own})
        assert {t: c["label_field"] for t, c in tasks.items()} == {"polarity": "label", "rating": "rating"}
    found = DATA.inert_fields(DATA.validate({"name": "multitask", "common": common, "tasks": own}, "data"))
    assert set(found) == {"data.common.label_field"}
    assert found["data.common.label_field"].startswith(
        "every task sets label_field itself (data.tasks.polarity.label_field=label, "
        "data.tasks.rating.label_field=rating)")
    # read where one task takes common's; a task with a data module of its own reads none of it
    assert not DATA.inert_fields(DATA.validate(
        {"name": "multitask", "common": common, "tasks": {**own, "polarity": {}}}, "data"))
    found = DATA.inert_fields(DATA.validate(
        {"name": "multitask", "common": common, "tasks": {"polarity": {"name": "reverse"}}}, "data"))
    assert "data.common.name" in found and "data.common.batch_size" in found
    mt = ["experiment=bert_imdb_multitask", "callbacks.progress_bar=none"]
    with pytest.raises(ConfigError) as err:
        resolve_config(compose_cfg([*mt, "data.common.label_field=rating"], return_hydra_config=True))
    assert str(err.value).startswith("data.common.label_field=rating (at 'data.common.label_field') "
                                     "does nothing: every task sets label_field itself")
    resolved = resolve_config(compose_cfg([*mt, "data.common.max_len=32", "~data.tasks.polarity.label_field",
                                           "data.common.label_field=label"], return_hydra_config=True))
    assert resolved["data"]["common"]["label_field"] == "label"


# -- the Trainer's minimums: read only where something asks the run to stop early ---------------------

def _epochs_trained(**trainer) -> int:
    return fit_tiny(**trainer).current_epoch


@pytest.mark.parametrize("typed", ["max_epochs=3", "max_steps=50", "limit_train_batches=3",
                                   "limit_val_batches=0.5", "val_check_interval=0.5",
                                   "num_sanity_val_steps=3"])
def test_fast_dev_run_sets_the_limits_itself_so_a_typed_one_is_refused(typed, tmp_path):
    """The claim, from Lightning itself: with fast_dev_run=2 the run is 2 training steps in one
    epoch whatever the limit says; typed beside it, the limit is refused before any work (before:
    accepted and ignored); the same limit without fast_dev_run counts."""
    base = ["experiment=gat_synthetic", "callbacks.progress_bar=none"]
    key, value = typed.split("=")
    value = float(value) if "." in value else int(value)
    assert fit_tiny(fast_dev_run=2).global_step == fit_tiny(fast_dev_run=2, **{key: value}).global_step == 2
    with pytest.raises(ConfigError) as err:
        train(compose_cfg([*base, "trainer.fast_dev_run=2", f"trainer.{typed}"],
                          return_hydra_config=True), tmp_path / "run")
    assert str(err.value).startswith(f"trainer.{typed} (at 'trainer.{key}') does nothing: "
                                     f"trainer.fast_dev_run=2 sets it to "), err.value
    assert not (tmp_path / "run").exists()
    resolve_config(compose_cfg([*base, f"trainer.{typed}"], return_hydra_config=True))
    resolve_config(compose_cfg([*base, "trainer.fast_dev_run=2"], return_hydra_config=True))
    # the value fast_dev_run sets anyway is no claim to the contrary: accepted
    resolve_config(compose_cfg([*base, "trainer.fast_dev_run=2", "trainer.num_sanity_val_steps=0",
                                "trainer.max_epochs=1", "trainer.max_steps=2"], return_hydra_config=True))


def test_min_epochs_changes_nothing_without_an_early_stop_and_never_passes_max_epochs():
    assert _epochs_trained(max_epochs=2) == _epochs_trained(max_epochs=2, min_epochs=5) == 2


# -- the checkpoint's mode with save_top_k=0 ------------------------------------------------------------

def test_checkpoint_mode_ranks_nothing_without_a_kept_checkpoint_a_monitor_or_averaging(tmp_path):
    """The claim: save_top_k=0 keeps and ranks no checkpoint, so mode=min and mode=max train,
    save and evaluate alike; attnflow-report reads the mode only as the direction of a monitor
    the config sets (a null monitor is the task's, ranked by the task's direction)."""
    from pathlib import Path

    from attnflow.cli.report import Run, choose_metric

    base = [*GRAPH, "trainer.max_epochs=2", "logger=none", "callbacks.attention_maps.examples=0",
            "callbacks.checkpoint.save_top_k=0", "callbacks.checkpoint.save_last=true"]
    runs = {mode: train(compose_cfg([*base, f"callbacks.checkpoint.mode={mode}"]), tmp_path / mode)
            for mode in ("min", "max")}
    assert runs["min"]["metrics"] == runs["max"]["metrics"] and not runs["max"]["best_checkpoint"]
    assert sorted(p.name for p in (tmp_path / "max" / "checkpoints").iterdir()) == ["last.ckpt"]

    def ranked(**checkpoint):
        config = {"task": {"name": "node_classification"}, "callbacks": {"checkpoint": checkpoint}}
        return choose_metric([Run("r", Path("r"), config=config)], {})

    assert ranked(monitor=None, mode="max") == ranked(monitor=None, mode="min")
    assert ranked(monitor="val/loss", mode="max") != ranked(monitor="val/loss", mode="min")


@pytest.mark.parametrize("overrides", [
    ["callbacks.checkpoint.mode=max"],  # ranks the top-k checkpoint (of the task's metric)
    # save_top_k=0: the monitor is what attnflow-report sorts runs by, the mode its direction
    ["callbacks.checkpoint.save_top_k=0", "callbacks.checkpoint.monitor=val/loss"],
    ["callbacks.checkpoint.save_top_k=0", "callbacks.checkpoint.monitor=val/loss",
     "callbacks.checkpoint.mode=max"],
    # ... and callbacks.average ranks its best N by the checkpoint's monitor and mode
    ["callbacks.checkpoint.save_top_k=0", "callbacks.checkpoint.mode=max", "+callbacks.average={best: 2}"],
])
def test_checkpoint_monitor_and_mode_are_read_where_something_ranks_by_them(overrides):
    resolved = resolve_config(compose_cfg([*GRAPH, *overrides], return_hydra_config=True))
    assert resolved["callbacks"]["checkpoint"]["save_top_k"] in (0, 1)


# -- trainer.log_every_n_steps without a logger -------------------------------------------------------------

def test_log_every_n_steps_is_unread_without_a_logger_or_the_text_bar(tmp_path, capsys):
    """The claim: with logger=none Lightning has no logger to send step metrics to, and a bar other
    than text prints nothing by steps, so the run is the same whatever the interval; the text bar
    prints a line every log_every_n_steps batches (tests/test_console.py)."""
    from support import FAST

    base = [*FAST, "logger=none", "callbacks.progress_bar=none", "trainer.limit_train_batches=4",
            "trainer.limit_val_batches=1", "test=false", "callbacks.attention_maps.examples=0"]
    one = train(compose_cfg([*base, "trainer.log_every_n_steps=1"]), tmp_path / "one")
    printed = capsys.readouterr().out
    fifty = train(compose_cfg([*base, "trainer.log_every_n_steps=50"]), tmp_path / "fifty")
    assert one["metrics"] == fifty["metrics"] and printed == capsys.readouterr().out
    assert "step" not in printed
    assert sorted(p.name for p in (tmp_path / "one").rglob("*")) == sorted(
        p.name for p in (tmp_path / "fifty").rglob("*"))


@pytest.mark.parametrize("bar, shown", [
    ("rich", "callbacks.progress_bar=rich is a redrawn bar, which does not print by steps"),
    ("tqdm", "callbacks.progress_bar=tqdm is a redrawn bar"),
    ("none", "callbacks.progress_bar=none draws no bar"),
])
def test_log_every_n_steps_without_a_logger_is_refused_when_typed(bar, shown, tmp_path):
    with pytest.raises(ConfigError) as err:
        train(compose_cfg([*GRAPH, "logger=none", f"callbacks.progress_bar={bar}",
                           "trainer.log_every_n_steps=5"], return_hydra_config=True), tmp_path / "run")
    assert str(err.value).startswith("trainer.log_every_n_steps=5 (at 'trainer.log_every_n_steps') "
                                     "does nothing: logger=none logs no metrics, and ")
    assert shown in str(err.value) and "(e.g. logger=csv, or callbacks.progress_bar=text)" in str(err.value)
    assert not (tmp_path / "run").exists()


def test_log_every_n_steps_under_the_auto_bar_is_read_where_it_prints_lines(monkeypatch):
    """callbacks.progress_bar=auto is the text bar where the output is not a terminal (a pipe, a
    log file: what pytest gives), the rich bar on one."""
    import attnflow.io.console as console

    typed = [*GRAPH, "logger=none", "callbacks.progress_bar=auto", "trainer.log_every_n_steps=5"]
    assert resolve_config(compose_cfg(typed, return_hydra_config=True))["trainer"]["log_every_n_steps"] == 5
    monkeypatch.setattr(console, "is_interactive", lambda: True)
    with pytest.raises(ConfigError, match="callbacks.progress_bar=auto draws the rich bar on this terminal"):
        resolve_config(compose_cfg(typed, return_hydra_config=True))


@pytest.mark.parametrize("overrides", [
    ["logger=csv", "callbacks.progress_bar=none"],  # step metrics go to the CSV file
    ["logger=none", "callbacks.progress_bar=text"],  # a line every log_every_n_steps batches
])
def test_log_every_n_steps_with_a_logger_or_the_text_bar_is_accepted(overrides):
    resolved = resolve_config(compose_cfg([*GRAPH, *overrides, "trainer.log_every_n_steps=5"],
                                          return_hydra_config=True))
    assert resolved["trainer"]["log_every_n_steps"] == 5


# -- paths.data_dir: read only where a field is built from it ----------------------------------------------

@pytest.mark.parametrize("overrides, says", [
    ([], "data 'reverse' generates its data and reads no files"),  # the default experiment
    (["experiment=gat_synthetic"], "data 'synthetic_graph' generates its data"),
    (["experiment=caption_shapes"], "data 'shapes' generates its data"),
    # a data module that reads files, each path given without it
    (["experiment=gat_cora", "data.root=/elsewhere/planetoid"],
     "data 'planetoid' reads the files its own fields name, and none of them is built from "
     "paths.data_dir here; build a path from it (e.g. data.root='${paths.data_dir}/…'"),
])
def test_a_data_dir_no_field_is_built_from_is_refused_when_typed(overrides, says, tmp_path):
    with pytest.raises(ConfigError) as err:
        train(compose_cfg([*overrides, "paths.data_dir=/data"], return_hydra_config=True), tmp_path / "run")
    assert str(err.value).startswith("paths.data_dir=/data (at 'paths.data_dir') does nothing: ")
    assert says in str(err.value)
    if "generates" in says:
        assert "(data=bert_pretraining, captions, imdb, imdb_text, multi30k, multitask_imdb, planetoid)" \
            in str(err.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("overrides", [
    ["experiment=gat_cora"],  # data.root: ${paths.data_dir}/planetoid
    ["experiment=han_imdb"],  # data.train_path, val_path, test_path
    ["experiment=bert_imdb_multitask"],  # data.common.*_path
    ["experiment=gat_cora", "data.root=${paths.data_dir}/mine"],
    ["hydra.run.dir=${paths.data_dir}/runs"],  # Hydra builds the run's folder from it
])
def test_a_data_dir_a_field_is_built_from_is_read(overrides):
    cfg = compose_cfg([*overrides, "paths.data_dir=/data"], return_hydra_config=True)
    assert resolve_config(cfg)["paths"]["data_dir"] == "/data"


def test_the_data_dir_of_the_environment_is_not_an_override(monkeypatch):
    monkeypatch.setenv("ATTNFLOW_DATA_DIR", "/data")
    resolved = resolve_config(compose_cfg(["experiment=gat_synthetic"], return_hydra_config=True))
    assert resolved["paths"]["data_dir"] == "/data"


# -- paths.root_dir: read only through paths.data_dir's default --------------------------------------------

@pytest.mark.parametrize("env, overrides, says", [
    (None, [], "and here paths.data_dir does nothing: data 'reverse' generates its data"),
    (None, ["experiment=gat_synthetic"], "paths.data_dir does nothing: data 'synthetic_graph' generates"),
    (None, ["experiment=caption_shapes"], "paths.data_dir does nothing: data 'shapes' generates"),
    (None, ["experiment=gat_cora", "paths.data_dir=/d"], "and here paths.data_dir is given (/d)"),
    ("/data", ["experiment=gat_cora"], "and here $ATTNFLOW_DATA_DIR sets paths.data_dir (/data)"),
])
def test_a_root_dir_that_feeds_no_data_dir_read_is_refused_when_typed(monkeypatch, env, overrides, says):
    """conf/ reads paths.root_dir in one place, paths.data_dir's default (attnflow's code and
    Hydra's folders not at all): typed where that default is not used or not read, it did nothing.
    (resolve_config: what attnflow-train checks before it makes the run's folder.)"""
    if env is None:
        monkeypatch.delenv("ATTNFLOW_DATA_DIR", raising=False)
    else:
        monkeypatch.setenv("ATTNFLOW_DATA_DIR", env)
    with pytest.raises(ConfigError) as err:
        resolve_config(compose_cfg([*overrides, "paths.root_dir=/x"], return_hydra_config=True))
    assert str(err.value).startswith("paths.root_dir=/x (at 'paths.root_dir') does nothing: "
                                     "paths.root_dir feeds only the default of paths.data_dir")
    assert says in str(err.value)


@pytest.mark.parametrize("env, overrides, data_dir", [
    (None, ["experiment=gat_cora"], "/x/../shared/data"),  # data.root: ${paths.data_dir}/planetoid
    ("/data", ["experiment=gat_cora", "paths.data_dir=${paths.root_dir}/d"], "/x/d"),
    ("/data", ["experiment=gat_cora", "data.root=${paths.root_dir}/planetoid"], "/data"),
    ("/data", ["hydra.run.dir=${paths.root_dir}/runs"], "/data"),  # Hydra builds the run's folder from it
])
def test_a_root_dir_a_read_field_is_built_from_is_read(monkeypatch, env, overrides, data_dir):
    if env is None:
        monkeypatch.delenv("ATTNFLOW_DATA_DIR", raising=False)
    else:
        monkeypatch.setenv("ATTNFLOW_DATA_DIR", env)
    resolved = resolve_config(compose_cfg([*overrides, "paths.root_dir=/x"], return_hydra_config=True))
    assert resolved["paths"]["root_dir"] == "/x" and resolved["paths"]["data_dir"] == data_dir


# -- fields read at the end of a validation epoch only -------------------------------------------------

def test_lightning_runs_no_validation_epoch_end_under_a_zero_validation_limit():
    """The claim behind refusing task.renderings beside trainer.limit_val_batches=0: Lightning
    skips the validation loop and its epoch-end hook, in the fit and in the final validation."""
    import pytorch_lightning as pl

    class Ends(pl.Callback):  # (Lightning calls a callback's hook where it calls the module's)
        def on_validation_epoch_end(self, trainer, module):
            ends.append(trainer.state.fn)

    for limit, expected in ((0, 0), (1, 3)):  # (1: two epochs' ends, then the final validation)
        ends = []
        fit = fit_tiny(validate=True, max_epochs=2, num_sanity_val_steps=0, limit_val_batches=limit,
                       callbacks=[Ends()])
        fit.validate(fit.lightning_module, torch.utils.data.DataLoader(torch.randn(4, 2), batch_size=2),
                     verbose=False)
        assert len(ends) == expected


@pytest.mark.parametrize("overrides, refused", [
    (["trainer.limit_val_batches=0", "task.renderings=8"], True),
    (["trainer.limit_val_batches=0.0", "task.renderings=0"], True),
    (["trainer.limit_val_batches=2", "task.renderings=8"], False),
    (["trainer.limit_val_batches=0.5", "task.renderings=8"], False),
])
def test_renderings_without_validation_are_refused_when_typed(overrides, refused):
    cfg = compose_cfg(["experiment=han_imdb", *overrides], return_hydra_config=True)
    if not refused:
        resolve_config(cfg)
        return
    with pytest.raises(ConfigError) as err:
        resolve_config(cfg)
    assert str(err.value).startswith(f"{overrides[1]} (at 'task.renderings') does nothing: "
                                     f"{overrides[0]} runs no validation, and task 'classification' "
                                     f"reads it at the end of a validation epoch only")
