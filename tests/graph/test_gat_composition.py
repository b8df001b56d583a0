"""model=gat consumes the shared `normalizer` group as it does `scorer`: `normalizer=norm` reaches
every graph attention layer of the built model, and such a model trains."""

import pytest

from attnflow.blocks.normalizers.norm import NormNormalizer
from attnflow.blocks.normalizers.softmax import SoftmaxNormalizer
from attnflow.config.registry import MODELS
from attnflow.training.run import train
from support import compose_cfg


@pytest.mark.parametrize("experiment", ["gat_cora", "gat_cora_const", "gat_synthetic"])
@pytest.mark.parametrize("overrides,cls", [([], SoftmaxNormalizer),
                                           (["normalizer=norm"], NormNormalizer),
                                           (["normalizer=norm", "normalizer.positive=relu"], NormNormalizer)])
def test_the_normalizer_override_reaches_every_layer(experiment, overrides, cls):
    cfg = compose_cfg([f"experiment={experiment}", *overrides])
    model = MODELS.build(cfg.model, 16, 4, path="model")
    assert len(model.layers) == 2
    assert all(type(layer.normalizer) is cls for layer in model.layers)
    if "normalizer.positive=relu" in overrides:
        assert all(layer.normalizer.positive == "relu" for layer in model.layers)


@pytest.mark.slow
def test_a_gat_with_norm_trains(tmp_path):
    cfg = compose_cfg(["experiment=gat_synthetic", "normalizer=norm", "callbacks.progress_bar=none",
                       "trainer.accelerator=cpu", "trainer.max_epochs=8", "logger=none",
                       "task.picture=false"])
    m = train(cfg, tmp_path)["metrics"]
    assert m["test/acc"] > 0.5, m  # 4 balanced classes: chance 0.25
