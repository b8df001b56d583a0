"""Overrides of fields that the rest of the config leaves unread are refused before any work
(attnflow.overrides); each "unread" claim is first checked against the block's behaviour."""

from __future__ import annotations

import pytest
import torch

from attnflow.blocks.decoders.luong import LuongDecoder
from attnflow.data.synthetic_graph import SyntheticGraphDataModule, make_sbm_graph
from attnflow.overrides import inert_fields, typed_fields
from attnflow.registry import DATA, MODELS, ConfigError
from attnflow.run import resolve_config, train
from attnflow.tasks.optim import OptimConfig, configure, lr_factor
from support import compose_cfg

GRAPH = ["experiment=gat_synthetic", "trainer.max_epochs=1", "callbacks.progress_bar=none"]


def test_typed_fields_are_the_assignments_as_typed():
    typed = typed_fields(["++data.batch_size=8", "scorer=dot", "~data.seed", "hydra/launcher=basic",
                          "+trainer.gradient_clip_val=1", "data.num_neighbors=[5,5]"])
    assert typed == {"data.batch_size": "data.batch_size=8", "scorer": "scorer=dot",
                     "trainer.gradient_clip_val": "trainer.gradient_clip_val=1",
                     "data.num_neighbors": "data.num_neighbors=[5,5]"}


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
    assert set(MODELS.inert_fields(cfg, "model")) == {"model.decoder.window", "model.decoder.gaussian"}
    cfg["decoder"]["alignment"] = "local_p"
    assert MODELS.inert_fields(cfg, "model") == {}


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
    (["data.extra_label_prob=0.3"], ["data.extra_label_prob=0.3", "data.multi_label=false"]),
    (["task.optim.weight_decay=0", "task.optim.decay_bias_and_norm=false"],
     ["task.optim.weight_decay=0 decays no parameter"]),
    (["model.layers=1", "model.heads=4"], ["model.heads=4 (at 'model.heads')", "model.layers=1 is the "
                                           "output layer alone"]),
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
    ["data.multi_label=true", "task.multi_label=true", "data.extra_label_prob=0.3"],
    ["task.optim.weight_decay=0.01", "task.optim.decay_bias_and_norm=false"],
    ["model.layers=1"],  # the preset's heads are now unread, but the user did not set them
    ["data.loader=full"],  # the preset's batch_size is now unread, but the user did not set it
])
def test_a_field_that_counts_or_that_a_preset_set_is_accepted(overrides):
    resolved = resolve_config(compose_cfg([*GRAPH, *overrides], return_hydra_config=True))
    for item in overrides:
        key, value = item.split("=")
        node = resolved
        for part in key.split("."):
            node = node[part]
        assert str(node).lower().replace(" ", "") == value.lower()
