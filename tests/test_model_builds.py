"""A model its config cannot build is refused before the data is read (run.check_model_builds:
a build on the meta device from the data's stand-in context)."""

from __future__ import annotations

import pytest
import torch

from attnflow.config.registry import DATA, MODELS, ConfigError
from attnflow.training.validate import check_model_builds, resolve_config
from attnflow.training.run import train
from support import DATA_DIR, FAST, compose_cfg

GRAPH = ["experiment=gat_synthetic", "trainer.max_epochs=1", "callbacks.progress_bar=none"]


@pytest.mark.parametrize("overrides, says", [
    ([*FAST, "attention=multihead", "attention.heads=7"],
     "attention 'multihead': the query size 128 (model.d_model of a Transformer or BERT, "
     "model.decoder.hidden_dim of an RNN decoder) is not divisible by heads 7"),
    ([*GRAPH, "model.output_aggregator.name=concat", "model.out_heads=2"],
     "model 'gat': the output layer gives 8 features with output_aggregator 'concat', need "
     "num_classes = 4"),  # the synthetic graph's own data.num_classes
    ([*FAST, "model=luong", "model.decoder.hidden_dim=100", "scorer=dot"],
     "needs query_dim == key_dim, got 100 and 512"),
    ([*FAST, "model=luong", "model.decoder.alignment=local_m", "attention=multihead"],
     "needs a plain block; use attention=single"),
    (["experiment=caption_shapes", "model.encoder.channels=[]"],
     "encoder 'cnn': field 'channels' must list positive ints"),
    (["experiment=caption_shapes", "model.encoder.pool_size=4"],  # 4³ = 64: one region still fits
     None),
])
def test_a_model_the_config_cannot_build_is_refused_before_the_data(overrides, says, tmp_path,
                                                                     monkeypatch):
    """Each of these stopped only when the model was built, after the data was read and the run
    folder written (the GAT one with a traceback)."""
    def no_data(self, *a, **k):
        raise AssertionError("the data was built")

    if says is None:  # the boundary case passes
        check_model_builds(resolve_config(compose_cfg(overrides)))
        return
    for name in DATA.names():
        monkeypatch.setattr(DATA.get(name), "setup", no_data, raising=False)
    with pytest.raises(ConfigError) as err:
        train(compose_cfg(overrides), tmp_path / "run")
    assert says in str(err.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_the_same_model_with_a_fitting_field_passes():
    for overrides in ([*FAST, "attention=multihead", "attention.heads=8"],
                      [*GRAPH, "model.output_aggregator.name=concat", "model.out_heads=1"]):
        check_model_builds(resolve_config(compose_cfg(overrides)))


def test_what_the_meta_device_cannot_do_is_left_to_the_real_build(monkeypatch):
    gat = MODELS.get("gat")
    original = gat.__init__

    def needs_real_tensors(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if next(self.parameters()).is_meta:
            raise NotImplementedError("an operation without a meta kernel")

    monkeypatch.setattr(gat, "__init__", needs_real_tensors)
    check_model_builds(resolve_config(compose_cfg(GRAPH)))  # not refused


@pytest.mark.parametrize("name, fields", [
    ("reverse", {}),
    ("synthetic_graph", {"num_classes": 5, "feature_dim": 7}),
    ("shapes", {"train_size": 16, "val_size": 8, "test_size": 8}),  # (a few images to draw)
])
def test_the_stand_in_context_has_the_keys_of_the_real_one(name, fields):
    cls = DATA.get(name)
    stand_in = cls.placeholder_context(DATA.validate({"name": name, **fields}, "data"))
    real = DATA.build({"name": name, **fields}, path="data").model_context()
    assert set(stand_in) == set(real)
    if name == "synthetic_graph":  # what the config fixes, it gives as it is
        assert stand_in == real == {"in_dim": 7, "num_classes": 5}


@pytest.mark.skipif(not (DATA_DIR / "planetoid" / "Cora" / "raw").is_dir(),
                    reason=f"Cora raw files not found under {DATA_DIR / 'planetoid'} (set ATTNFLOW_DATA_DIR)")
def test_planetoid_stand_ins_are_the_sets_own_sizes():
    fields = {"name": "planetoid", "dataset": "Cora", "root": str(DATA_DIR / "planetoid")}
    real = DATA.build(fields, path="data").model_context()
    assert DATA.get("planetoid").placeholder_context(DATA.validate(fields, "data")) == real
    assert real == {"in_dim": 1433, "num_classes": 7}
    with torch.device("meta"):  # the stand-in build allocates nothing
        model = MODELS.build({"name": "gat"}, **real)
    assert all(p.is_meta for p in model.parameters())


@pytest.mark.parametrize("overrides, refused", [
    (["data=multi30k", "model=transformer"], True),  # tie_embeddings=all, shared_vocab=false: defaults
    (["data=multi30k", "model=transformer", "data.shared_vocab=true"], False),
    (["data=multi30k", "model=transformer", "model.tie_embeddings=decoder"], False),
    (["model=transformer"], False),  # the reversal data: one vocabulary of symbols
])
@pytest.mark.slow
def test_tied_source_and_target_embeddings_need_one_vocabulary(overrides, refused, tmp_path):
    """Two BPE vocabularies of the same size (8000 each) would have tied unrelated tokens silently;
    of different sizes, the model refused them only after the tokenizers were trained."""
    cfg = compose_cfg([*overrides, f"paths.data_dir={DATA_DIR}"])
    if not refused:
        resolve_config(cfg)
        return
    with pytest.raises(ConfigError, match="tie_embeddings=all .* data.shared_vocab=false gives each "
                                          "side its own vocabulary"):
        train(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()
