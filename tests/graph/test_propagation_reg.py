"""node_classification's propagation regularisation (P-reg; Yang, Ma & Cheng 2021, §3, φ the
cross-entropy) against the definition written out here with loops over nodes and edges: the term on a
known graph, the training loss of a real step (L + μ·P-reg), the validation loss left plain, and
the refusals (multi-label data, μ < 0)."""

import copy
import math

import re

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from attnflow.data.synthetic_graph import SyntheticGraphDataModule
from attnflow.models.gat import GAT
from attnflow.config.registry import TASKS, ConfigError
from attnflow.tasks.node_classification import propagation_loss
from support import compose_cfg


def _by_definition(z: torch.Tensor, edges: list) -> float:
    """1/|V′| Σ_{i∈V′} −Σ_c softmax(ẑ_i)_c ln softmax(z_i)_c, ẑ_i the mean of z_j over the edges
    j → i with j ≠ i, V′ the nodes that have such an edge; plain Python over nodes and classes."""
    rows = z.tolist()
    total, counted = 0.0, 0
    for i, zi in enumerate(rows):
        nbrs = [j for j, t in edges if t == i and j != i]
        if not nbrs:
            continue
        mean = [sum(rows[j][c] for j in nbrs) / len(nbrs) for c in range(len(zi))]
        q = [math.exp(v) / sum(math.exp(u) for u in mean) for v in mean]
        logp = [v - math.log(sum(math.exp(u) for u in zi)) for v in zi]
        total += -sum(qc * lc for qc, lc in zip(q, logp))
        counted += 1
    return total / counted


def test_the_term_on_a_known_graph_equals_the_definition():
    """A path 0–1–2 both ways, a one-way edge 3 → 0, a self-loop on 2 (ignored) and an isolated
    node 4 (left out of the mean): node 0's neighbours are 1 and 3, node 3 has none."""
    torch.manual_seed(0)
    z = torch.randn(5, 3)
    edges = [(0, 1), (1, 0), (1, 2), (2, 1), (3, 0), (2, 2)]
    got = propagation_loss(z, torch.tensor(edges).t())
    assert float(got) == pytest.approx(_by_definition(z, edges), rel=1e-6)
    # the isolated node 4 is neither a neighbour nor has one: moving its logits leaves the term;
    # moving node 1's (a neighbour of 0 and 2, with neighbours itself) moves it
    z2 = z.clone()
    z2[4] += 5.0
    assert float(propagation_loss(z2, torch.tensor(edges).t())) == pytest.approx(float(got), rel=1e-6)
    z2[1] += torch.tensor([3.0, 0.0, -3.0])
    assert float(propagation_loss(z2, torch.tensor(edges).t())) != pytest.approx(float(got), rel=1e-3)


def _gcn_by_definition(z: torch.Tensor, edges: list) -> float:
    """The 'gcn' adjacency (the P-reg authors' code propagates with GCNConv's weights):
    ẑ_i = Σ_j z_j / √(d̃_i d̃_j) over i's in-neighbours and i itself, d̃ the count of those (an
    existing self-loop counted once); the mean over every node; plain Python."""
    n = z.shape[0]
    rows = z.tolist()
    nbrs = {i: sorted({j for j, t in edges if t == i and j != i} | {i}) for i in range(n)}
    total = 0.0
    for i, zi in enumerate(rows):
        zhat = [sum(rows[j][c] / math.sqrt(len(nbrs[i]) * len(nbrs[j])) for j in nbrs[i])
                for c in range(len(zi))]
        q = [math.exp(v) / sum(math.exp(u) for u in zhat) for v in zhat]
        logp = [v - math.log(sum(math.exp(u) for u in zi)) for v in zi]
        total += -sum(qc * lc for qc, lc in zip(q, logp))
    return total / n


def test_the_gcn_adjacency_of_the_authors_code():
    """adjacency='gcn' on the known graph: every node counts, the isolated one too (its ẑ is its
    own z), and the term differs from the paper's text's D⁻¹A."""
    torch.manual_seed(0)
    z = torch.randn(5, 3)
    edges = [(0, 1), (1, 0), (1, 2), (2, 1), (3, 0), (2, 2)]
    got = propagation_loss(z, torch.tensor(edges).t(), adjacency="gcn")
    assert float(got) == pytest.approx(_gcn_by_definition(z, edges), rel=1e-6)
    assert float(got) != pytest.approx(float(propagation_loss(z, torch.tensor(edges).t())), rel=1e-3)


def _trainer(**kw):
    return pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False,
                      num_sanity_val_steps=0, **kw)


def _task(dm, mu, **kw):
    torch.manual_seed(0)
    model = GAT(16, 4, dropout=0.0, attn_dropout=0.0)  # train-mode forward = eval forward
    return TASKS.build({"name": "node_classification", "picture": False, "propagation_reg": mu, **kw},
                       model, **dm.task_context())


@pytest.mark.parametrize("adjacency", ["mean", "gcn"])
def test_a_training_step_minimises_cross_entropy_plus_mu_times_the_term(adjacency):
    dm = SyntheticGraphDataModule(num_nodes=60)
    d = dm.full_graph()
    task = _task(dm, 0.5, propagation_adjacency=adjacency)
    before = copy.deepcopy(task.model)
    trainer = _trainer(max_epochs=1)
    trainer.fit(task, datamodule=dm)
    m = trainer.callback_metrics
    with torch.no_grad():
        z = before.eval()(d.x, d.edge_index)
    edges = list(map(tuple, d.edge_index.t().tolist()))
    preg = (_by_definition if adjacency == "mean" else _gcn_by_definition)(z, edges)
    ce = float(F.cross_entropy(z[d.train_mask], d.y[d.train_mask]))
    assert float(m["train/preg"]) == pytest.approx(preg, rel=1e-5)
    assert float(m["train/loss"]) == pytest.approx(ce + 0.5 * preg, rel=1e-5)
    # the gradient of the step followed the regularised loss: the weights differ from a μ = 0 step
    plain = _task(dm, 0.0)
    _trainer(max_epochs=1).fit(plain, datamodule=dm)
    assert not torch.allclose(task.model.layers[0].lin.weight, plain.model.layers[0].lin.weight)


def test_validation_loss_is_the_plain_cross_entropy_whatever_mu():
    dm = SyntheticGraphDataModule(num_nodes=60)
    outs = [_trainer().validate(_task(dm, mu), datamodule=dm, verbose=False)[0] for mu in (0.0, 2.0)]
    assert outs[0]["val/loss"] == outs[1]["val/loss"]
    assert "train/preg" not in outs[1]


def test_refusals_name_the_field():
    dm = SyntheticGraphDataModule(num_nodes=40)
    with pytest.raises(ConfigError, match="propagation_reg"):
        TASKS.build({"name": "node_classification", "propagation_reg": -0.1}, GAT(16, 4),
                    **dm.task_context())
    with pytest.raises(ConfigError, match="propagation_adjacency.*one of 'mean', 'gcn'"):
        TASKS.build({"name": "node_classification", "propagation_reg": 0.5,
                     "propagation_adjacency": "sym"}, GAT(16, 4), **dm.task_context(), path="task")


@pytest.mark.parametrize("overrides,mu,adjacency", [
    ([], 0.6, "gcn"), (["task.propagation_reg=0.3"], 0.3, "gcn"),
    (["task.propagation_adjacency=mean", "task.propagation_reg=0.4"], 0.4, "mean"),
    (["task.propagation_reg=0"], 0.0, "gcn")])  # P-reg off: the preset's adjacency left alone
def test_the_preset_and_its_override_reach_the_task(overrides, mu, adjacency):
    cfg = compose_cfg(["experiment=gat_cora_preg", *overrides])
    dm = SyntheticGraphDataModule(num_nodes=40)
    task = TASKS.build(cfg.task, GAT(16, 4), **dm.task_context(), path="task")
    assert (task.propagation_reg, task.propagation_adjacency) == (mu, adjacency)
    assert compose_cfg(["experiment=gat_cora"]).task.get("propagation_reg", 0.0) == 0.0


@pytest.mark.parametrize("base,bad,match", [
    (["experiment=gat_synthetic", "data.multi_label=true", "task.multi_label=true"],
     "task.propagation_reg=0.5", "propagation_reg=0.5 is unread: single-label data"),
    (["experiment=gat_synthetic", "data.multi_label=true", "task.multi_label=true"],
     "task.label_smoothing=0.1", "label_smoothing=0.1 is unread: single-label data")])
def test_single_label_options_warn_with_multi_label(base, bad, match):
    from attnflow.config.registry import AttnflowWarning
    from attnflow.training.validate import resolve_config

    with pytest.warns(AttnflowWarning, match=re.escape(match)):
        resolve_config(compose_cfg([*base, bad]))
