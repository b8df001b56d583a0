"""node_classification's epoch metrics (plain per-epoch counts, not torchmetrics objects) against
hand computations: the accuracy of every split, full-batch and summed over k-hop mini-batches;
multi-label accuracy and micro-F1; nothing of them in the checkpoint's state dict."""

import copy

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
import torchmetrics

from attnflow.data.synthetic_graph import SyntheticGraphDataModule
from attnflow.models.gat import GAT
from attnflow.config.registry import TASKS


def _trainer(**kw):
    return pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False,
                      num_sanity_val_steps=0, **kw)


def _task(dm, multi_label=False):
    torch.manual_seed(0)
    model = GAT(16, 4, dropout=0.0, attn_dropout=0.0)  # train-mode forward = eval forward
    return TASKS.build({"name": "node_classification", "multi_label": multi_label,
                        "picture": False}, model, **dm.task_context())


@torch.no_grad()
def _by_hand(model, d, split, multi_label=False):
    """(loss, acc, f1) of ``split`` from a full-graph forward, computed here from the definitions."""
    z = model.eval()(d.x, d.edge_index)[d[f"{split}_mask"]]
    y = d.y[d[f"{split}_mask"]]
    if not multi_label:
        right = sum(int(a == b) for a, b in zip(z.argmax(-1).tolist(), y.tolist()))
        return F.cross_entropy(z, y), torch.tensor(right / y.numel(), dtype=torch.float32), None
    decided = (z > 0).tolist()
    pairs = [(p, t == 1) for zr, yr in zip(decided, y.tolist()) for p, t in zip(zr, yr)]
    tp = sum(p and t for p, t in pairs)
    fp = sum(p and not t for p, t in pairs)
    fn = sum(t and not p for p, t in pairs)
    acc = sum(p == t for p, t in pairs) / len(pairs)
    return (F.binary_cross_entropy_with_logits(z, y.float()), torch.tensor(acc, dtype=torch.float32),
            torch.tensor(2 * tp / max(2 * tp + fp + fn, 1), dtype=torch.float32))


def test_full_batch_epoch_metrics_of_every_split_equal_a_hand_computation():
    dm = SyntheticGraphDataModule(num_nodes=80)
    d = dm.full_graph()
    task = _task(dm)
    before = copy.deepcopy(task.model)  # the one training step is taken with these weights
    trainer = _trainer(max_epochs=1)
    trainer.fit(task, datamodule=dm)
    m = trainer.callback_metrics
    loss, acc, _ = _by_hand(before, d, "train")
    assert m["train/acc"] == acc  # right / decisions, in float32 like the counts
    torch.testing.assert_close(m["train/loss"], loss)
    loss, acc, _ = _by_hand(task.model, d, "val")  # validation after the step
    assert m["val/acc"] == acc
    torch.testing.assert_close(m["val/loss"], loss)
    (out,) = trainer.test(task, datamodule=dm, verbose=False)
    loss, acc, _ = _by_hand(task.model, d, "test")
    assert out["test/acc"] == pytest.approx(float(acc), abs=0) and 0 < out["test/acc"] < 1
    torch.testing.assert_close(torch.tensor(out["test/loss"]), loss)


@pytest.mark.parametrize("multi_label", [False, True])
def test_khop_minibatch_metrics_sum_to_the_full_graph_ones(multi_label):
    """Counts summed over the epoch's k-hop batches (5, of unequal size) give the whole split's
    accuracy (and micro-F1), not a mean of per-batch values."""
    dm = SyntheticGraphDataModule(num_nodes=120, loader="khop", batch_size=7,
                                  multi_label=multi_label)
    d = dm.full_graph()
    task = _task(dm, multi_label)
    assert len(dm.val_dataloader()) == 5  # 30 validation nodes: 7, 7, 7, 7, 2
    (out,) = _trainer().validate(task, datamodule=dm, verbose=False)
    loss, acc, f1 = _by_hand(task.model, d, "val", multi_label)
    assert out["val/acc"] == pytest.approx(float(acc), abs=0)
    if multi_label:
        assert out["val/f1"] == pytest.approx(float(f1), abs=0) and 0 < out["val/f1"] < 1
    else:
        assert "val/f1" not in out


def test_metrics_hold_no_state_in_checkpoints_and_no_metric_modules():
    dm = SyntheticGraphDataModule(num_nodes=40, multi_label=True)
    task = _task(dm, multi_label=True)
    assert set(task.state_dict()) == {f"model.{k}" for k in task.model.state_dict()}
    assert not any(isinstance(m, torchmetrics.Metric) for m in task.modules())


def test_label_smoothing_loss_equals_the_smoothed_cross_entropy_by_hand():
    """ε = 0.2: L = −1/|M| Σ_t Σ_c q_tc ln p_tc with q_t = 0.8·onehot(y_t) + 0.2/C, written out
    here from log-probabilities (not with F.cross_entropy's own label_smoothing)."""
    dm = SyntheticGraphDataModule(num_nodes=80)
    d = dm.full_graph()
    torch.manual_seed(0)
    model = GAT(16, 4, dropout=0.0, attn_dropout=0.0)
    task = TASKS.build({"name": "node_classification", "picture": False, "label_smoothing": 0.2},
                       model, **dm.task_context())
    (out,) = _trainer().validate(task, datamodule=dm, verbose=False)
    with torch.no_grad():
        z = model.eval()(d.x, d.edge_index)[d.val_mask]
        y = d.y[d.val_mask]
        logp = z.log_softmax(-1)
        c = z.shape[-1]
        q = torch.full_like(logp, 0.2 / c)
        q[torch.arange(len(y)), y] += 0.8
        by_hand = -(q * logp).sum(-1).mean()
    assert out["val/loss"] == pytest.approx(float(by_hand), rel=1e-5)
    assert out["val/loss"] != pytest.approx(float(F.cross_entropy(z, y)), rel=1e-3)


def test_label_smoothing_is_unread_for_multi_label_data_and_warns():
    from attnflow.config.registry import DATA, AttnflowWarning

    task = TASKS.validate({"name": "node_classification", "multi_label": True, "label_smoothing": 0.1},
                          "task")
    data = DATA.validate({"name": "synthetic_graph", "multi_label": True}, "data")
    with pytest.warns(AttnflowWarning, match="task.label_smoothing=0.1 is unread: single-label"):
        TASKS.get("node_classification").check_config({"task": task, "data": data})
