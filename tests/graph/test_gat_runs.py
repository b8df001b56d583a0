"""End-to-end GAT runs: a short Cora run well above chance; single-label, multi-label and
mini-batch (k-hop subgraph) training on a generated graph; the run directory's picture."""

import json

import pytest
import torch
import torch.nn.functional as F

from attnflow.data.synthetic_graph import SyntheticGraphDataModule
from attnflow.models.gat import GAT
from attnflow.config.registry import TASKS
from attnflow.training.run import train
from support import DATA_DIR, compose_cfg

QUIET = ["callbacks.progress_bar=none", "trainer.accelerator=cpu"]


@pytest.mark.skipif(not (DATA_DIR / "planetoid" / "Cora" / "raw").is_dir(),
                    reason=f"Cora raw files not found at {DATA_DIR / 'planetoid' / 'Cora' / 'raw'} "
                           "(set ATTNFLOW_DATA_DIR)")
@pytest.mark.slow
def test_short_cora_run_is_well_above_chance(tmp_path):
    cfg = compose_cfg(["experiment=gat_cora", *QUIET, "trainer.max_epochs=30",
                       f"paths.data_dir={DATA_DIR}"])
    summary = train(cfg, tmp_path)
    m = summary["metrics"]
    assert m["test/acc"] > 0.6, m  # chance (the largest class) is about 0.32
    assert m["best/val/acc"] > 0.6, m
    assert (tmp_path / "attention" / "graph_embedding.png").stat().st_size > 10_000
    assert json.loads((tmp_path / "metrics.json").read_text())["metrics"]["test/acc"] == m["test/acc"]


@pytest.mark.slow
def test_synthetic_graph_training_learns_full_batch(tmp_path):
    # the k-hop mini-batches (the experiment's loader) train in the multi-label test below
    cfg = compose_cfg(["experiment=gat_synthetic", *QUIET, "data.loader=full",
                       "trainer.max_epochs=8", "logger=none", "task.picture=false"])
    m = train(cfg, tmp_path)["metrics"]
    assert m["test/acc"] > 0.8, m  # 4 balanced classes: chance 0.25


@pytest.mark.slow
def test_multi_label_training_with_sigmoid_log_loss(tmp_path):
    cfg = compose_cfg(["experiment=gat_synthetic", *QUIET, "data.multi_label=true",
                       "task.multi_label=true", "trainer.max_epochs=8", "logger=none"])
    m = train(cfg, tmp_path)["metrics"]
    # about 1.5 of 4 labels per node: predicting none gives f1 0 and acc ~0.62
    assert m["test/f1"] > 0.75 and m["test/acc"] > 0.85, m
    assert (tmp_path / "attention" / "graph_embedding.png").is_file()


def test_multi_label_loss_is_per_class_sigmoid_log_loss():
    dm = SyntheticGraphDataModule(num_nodes=60, multi_label=True)
    d = dm.full_graph()
    assert d.y.shape == (60, 4) and (d.y.sum(1) >= 1).all() and (d.y.sum(1) > 1).any()
    model = GAT(16, 4, dropout=0.0, attn_dropout=0.0)
    task = TASKS.build({"name": "node_classification", "multi_label": True}, model,
                       **dm.task_context())
    z = model(d.x, d.edge_index)[d.train_mask]
    y = d.y[d.train_mask].float()
    by_hand = -(y * torch.log(torch.sigmoid(z)) + (1 - y) * torch.log(1 - torch.sigmoid(z))).mean()
    task.log = lambda *a, **k: None
    torch.testing.assert_close(task.step(d, "train"), by_hand)


def test_khop_batches_hold_each_seeds_receptive_field():
    """A 2-layer GAT's outputs for the seeds of a 2-hop subgraph equal its full-graph outputs."""
    dm = SyntheticGraphDataModule(num_nodes=200, loader="khop", batch_size=16)
    d = dm.full_graph()
    model = GAT(16, 4).eval()
    full = model(d.x, d.edge_index)
    seen = 0
    for batch in dm.train_dataloader():
        seeds = batch.train_mask
        torch.testing.assert_close(model(batch.x, batch.edge_index)[seeds],
                                   full[batch.n_id[seeds]], rtol=1e-5, atol=1e-6)
        seen += int(seeds.sum())
    assert seen == int(d.train_mask.sum())
    assert F.one_hot(d.y).sum(0).min() > 0


def test_a_split_that_leaves_no_nodes_is_refused():
    with pytest.raises(ValueError, match=r"leaves an empty split \(0 train, 5 val, 5 test\)"):
        SyntheticGraphDataModule(num_nodes=10, split=[0.05, 0.5])


@pytest.mark.slow
def test_each_epochs_line_in_train_log_holds_that_epochs_train_accuracy(tmp_path):
    """The epoch's line (console and train.log) is written before the task's epoch-end hook: the
    task logs train/acc at the epoch's last batch, so the line holds that epoch's value, as the
    CSV log does (not the epoch before's)."""
    import csv
    import re

    train(compose_cfg(["experiment=gat_synthetic", "data.num_nodes=80", "trainer.max_epochs=3",
                       "logger=csv", *QUIET]), tmp_path)
    with open(next((tmp_path / "csv").rglob("metrics.csv"))) as f:
        logged = [float(r["train/acc"]) for r in csv.DictReader(f) if r.get("train/acc")]
    log = (tmp_path / "train.log").read_text()
    lines = re.findall(r"epoch (\d)/2 done in [\d:]+: train/acc=([\d.]+)", log)
    assert [int(e) for e, _ in lines] == [0, 1, 2] and len(logged) == 3  # (0-based)
    assert [float(a) for _, a in lines] == pytest.approx(logged, abs=5e-4)
