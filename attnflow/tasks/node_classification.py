"""Node classification on a graph: single-label (SoftMax cross-entropy) or multi-label (per-class
sigmoid log-loss).

Source: Veličković et al. 2018, "Graph attention networks" (Cora, CiteSeer, PubMed: single-label;
PPI: multi-label, the output layer followed by a logistic sigmoid per class, trained with per-class
log-loss). The model maps (x, edge_index) to logits (N, C); only the
nodes of the batch's ``<split>_mask`` count (ε: label smoothing, Szegedy et al. 2016, §7; 0 in the
GAT paper, where the single-label loss is the plain cross-entropy −ln softmax(z_t)_{y_t}):

    single-label:  L = −1/|M| Σ_{t∈M} Σ_c q_tc ln softmax(z_t)_c,  q_t = (1 − ε)·onehot(y_t) + ε/C
    multi-label:   L = −1/(|M|·C) Σ_{t∈M} Σ_c [y_tc ln σ(z_tc) + (1 − y_tc) ln(1 − σ(z_tc))]

With μ = ``propagation_reg`` > 0 (single-label only) the training loss adds propagation
regularisation, P-reg (Yang, Ma & Cheng 2021, "Rethinking graph regularization for graph neural
networks", §3, φ the cross-entropy): each node's output is pulled towards its neighbours' mean
output, over *every* node of the batch, labelled or not,

    L_train = L + μ · 1/|V′| Σ_{i∈V′} −Σ_c softmax(ẑ_i)_c ln softmax(z_i)_c,   ẑ_i = 1/|N(i)| Σ_{j∈N(i)} z_j

(Ẑ = D⁻¹AZ; N(i): i's in-neighbours other than i; V′: the nodes with at least one; the gradient
flows through both sides). ``propagation_adjacency='gcn'`` propagates as the authors' released
code does (its ``IConv`` is PyG's GCNConv with an identity weight): Ẑ = D̃^-½ÃD̃^-½Z with
Ã = A + I (Kipf & Welling 2017, eq. (2)), ẑ_i = Σ_{j∈N(i)∪{i}} z_j / √(d̃_i d̃_j), over every
node. Validation and test losses are the plain L, so early stopping on val/loss compares the same
quantity whatever μ is; ``train/preg`` logs the term without μ.

Metrics, logged as ``{train,val,test}/<name>``: ``loss``; ``acc`` (single-label: argmax equals
the class; multi-label: fraction of (node, class) decisions σ(z) > ½ that are right); multi-label
also ``f1`` (micro-averaged F1, the PPI metric). Metrics accumulate over the mini-batches of an
epoch, so full-batch and mini-batch evaluation agree.

The counts behind ``acc`` and ``f1`` (right decisions, decisions, tp, fp, fn) are float32 tensors
summed per epoch and over the ranks, logged at the epoch's end: what torchmetrics would compute,
without its per-epoch object cost on a full-batch graph.

With ``picture`` the task saves, at the end of training, a 2-D projection (PCA) of the output
layer's node vectors coloured by class with edges drawn by attention weight (after Veličković et al. 2018, Fig. 2)
to ``<run dir>/attention/graph_embedding.png`` and logs it to TensorBoard / W&B.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Literal, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import remove_self_loops, scatter

from attnflow.config.registry import DATA, TASKS, AttnflowWarning, ConfigError, NonNegativeFloat, Probability
from attnflow.tasks.base import Task
from attnflow.tasks.optim import OptimConfig

SPLITS = ("train", "val", "test")
COUNTS = ("right", "decisions", "tp", "fp", "fn")  # the per-epoch sums behind acc and f1


def propagate(z: torch.Tensor, edge_index: torch.Tensor, adjacency: str = "mean"):
    """(Ẑ = ÂZ, the (N,) mask of the nodes it is defined for). ``adjacency`` 'mean': Â = D⁻¹A,
    each node's mean of z_j over its in-neighbours j ≠ i, 0 (and masked) where it has none;
    'gcn': Â = D̃^-½ÃD̃^-½ with Ã = A + I (Kipf & Welling 2017's propagation; every node)."""
    n = z.shape[0]
    if adjacency == "gcn":
        (src, dst), weight = gcn_norm(edge_index, None, n, add_self_loops=True)
        out = scatter(z[src] * weight.unsqueeze(-1).to(z.dtype), dst, dim=0, dim_size=n, reduce="sum")
        return out, torch.ones(n, dtype=torch.bool, device=z.device)
    src, dst = remove_self_loops(edge_index)[0]
    has = torch.zeros(n, dtype=torch.bool, device=z.device)
    has[dst] = True
    return scatter(z[src], dst, dim=0, dim_size=n, reduce="mean"), has


def propagation_loss(logits: torch.Tensor, edge_index: torch.Tensor,
                     adjacency: str = "mean") -> torch.Tensor:
    """P-reg's term (module docstring): the mean of the cross-entropy of softmax(z_i) against
    softmax(ẑ_i), Ẑ = ÂZ (``propagate``; edges j → i), over the nodes ẑ is defined for (those with
    a neighbour for 'mean', every node for 'gcn')."""
    neighbours, has = propagate(logits, edge_index, adjacency)
    ce = -(neighbours.softmax(-1) * logits.log_softmax(-1)).sum(-1)
    return ce[has].mean()


def _check_labels(multi_label: bool, multi_label_data: bool) -> None:
    if multi_label != multi_label_data:
        kind = "multi-label ((N, C) 0/1)" if multi_label_data else "single-label ((N,) ids)"
        raise ConfigError(f"task 'node_classification': the data's labels are {kind}; set "
                          f"task.multi_label={str(multi_label_data).lower()}")




@TASKS.register("node_classification")
class NodeClassificationTask(Task):
    """Trains a graph model (x, edge_index) -> logits (N, C) on masked nodes.

    Args:
        model: the model (context).
        num_classes: C (context, from the data module).
        multi_label_data: whether the data's labels are (N, C) 0/1 (context).
        multi_label: per-class sigmoid log-loss instead of SoftMax cross-entropy; must match the
            data (default False).
        optim: optimiser and schedule (default Adam, lr 0.005, weight decay 5e-4: the GAT
            paper's for Cora; constant).
        picture: save the embedding picture when training ends (default True).
        label_smoothing: ε of the single-label loss, every split (default 0.0: the paper's);
            unread with multi_label.
        propagation_reg: μ of the P-reg term of the training loss (default 0.0: none, the
            paper's); unread with multi_label.
        propagation_adjacency: P-reg's Â, 'mean' (D⁻¹A, the paper's text) or 'gcn'
            (D̃^-½(A+I)D̃^-½, the authors' code); default 'mean'. 'gcn' needs μ > 0.
    """

    interface = "graph"
    metrics = {"loss": "min", "acc": "max", "f1": "max"}
    monitor, monitor_mode = "val/acc", "max"

    def __init__(self, model: nn.Module, num_classes: int, multi_label_data: bool = False, *,
                 multi_label: bool = False,
                 optim: OptimConfig = OptimConfig(lr=0.005, weight_decay=5e-4), picture: bool = True,
                 label_smoothing: Probability = 0.0, propagation_reg: NonNegativeFloat = 0.0,
                 propagation_adjacency: Literal["mean", "gcn"] = "mean"):
        super().__init__(model, optim=optim)
        _check_labels(multi_label, multi_label_data)
        self.num_classes, self.multi_label = num_classes, multi_label
        self.picture, self.label_smoothing = picture, label_smoothing
        self.propagation_reg, self.propagation_adjacency = propagation_reg, propagation_adjacency
        # split -> float32 sums of COUNTS over the epoch's batches so far (not a module or a
        # buffer: nothing of it goes into checkpoints, as torchmetrics' states did not)
        self._sums: dict = {}

    @classmethod
    def check_config(cls, cfg: Mapping[str, Any]) -> None:
        """The task's labels are the data's kind; single-label options unread with multi_label."""
        if cfg["task"].get("name") == "node_classification":
            task = cfg["task"]  # with the defaults
            for field in ("label_smoothing", "propagation_reg"):
                if task["multi_label"] and task[field]:
                    warnings.warn(f"task.{field}={task[field]} applies to single-label data only; "
                                  f"unread with task.multi_label=true", AttnflowWarning)
            data = cfg["data"]
            if "multi_label" in data:  # a data set that says in its config which labels it makes
                _check_labels(task["multi_label"], data["multi_label"])
            known = getattr(DATA.get(cfg["data"]["name"]), "known_multi_label", None)
            if known is not None:  # or whose labels are of one kind (Planetoid: single-label)
                _check_labels(task["multi_label"], known)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.model(x, edge_index)

    def _features(self, x: torch.Tensor) -> torch.Tensor:
        """Node features in the weights' floating type: Lightning's ``*-true`` precisions
        (``bf16-true``, ``16-true``) cast the weights and the tensors of a batch, but a PyG
        ``Data`` graph is not a collection it looks into."""
        dtype = next(self.model.parameters()).dtype
        return x.to(self.device, dtype) if x.is_floating_point() else x.to(self.device)

    def step(self, batch, split: str) -> torch.Tensor:
        logits = self.model(self._features(batch.x), batch.edge_index)
        mask = batch[f"{split}_mask"]
        z, y = logits[mask], batch.y[mask]
        n = int(mask.sum())
        if self.multi_label:
            y = y.float()
            loss = F.binary_cross_entropy_with_logits(z, y)
            with torch.no_grad():
                pred, truth = z > 0, y > 0.5
                counts = torch.stack([(pred == truth).sum(dtype=torch.float32),
                                      z.new_tensor(truth.numel(), dtype=torch.float32),
                                      *((v.sum(dtype=torch.float32) for v in
                                         (pred & truth, pred & ~truth, ~pred & truth)))])
        else:
            loss = F.cross_entropy(z, y, label_smoothing=self.label_smoothing)
            with torch.no_grad():
                counts = torch.stack([(z.argmax(-1) == y).sum(dtype=torch.float32),
                                      z.new_tensor(y.numel(), dtype=torch.float32)])
            if split == "train" and self.propagation_reg:
                preg = propagation_loss(logits, batch.edge_index, self.propagation_adjacency)
                self.log("train/preg", preg, batch_size=logits.shape[0], on_epoch=True, on_step=False,
                         sync_dist=True)
                loss = loss + self.propagation_reg * preg
        prev = self._sums.get(split)
        self._sums[split] = counts if prev is None else prev + counts
        self.log(f"{split}/loss", loss, batch_size=n, prog_bar=split != "test", on_epoch=True,
                 on_step=False, sync_dist=True)
        return loss

    def _log_counts(self, split: str) -> None:
        """``<split>/acc`` (and ``/f1``) of the epoch from its sums over batches and ranks.
        Every rank takes part in the sum, also one that had no batch (DDP shards of uneven
        size); the value logged is then the same on every rank (the ``max`` over ranks that
        ``sync_dist`` takes changes nothing, and keeps Lightning from asking for a sync)."""
        sums = self._sums.pop(split, None)
        if sums is None:
            sums = torch.zeros(len(COUNTS) if self.multi_label else 2, device=self.device)
        if self._trainer is not None:
            sums = self.trainer.strategy.reduce(sums, reduce_op="sum")
        self.log(f"{split}/acc", sums[0] / sums[1], prog_bar=True, on_epoch=True, on_step=False,
                 sync_dist=True, reduce_fx="max")
        if self.multi_label:
            tp, fp, fn = sums[2], sums[3], sums[4]
            self.log(f"{split}/f1", 2 * tp / (2 * tp + fp + fn).clamp(min=1), on_epoch=True,
                     on_step=False, sync_dist=True, reduce_fx="max")

    def on_train_epoch_start(self) -> None:
        self._sums.pop("train", None)  # what an interrupted epoch left

    def on_validation_epoch_start(self) -> None:
        self._sums.pop("val", None)

    def on_test_epoch_start(self) -> None:
        self._sums.pop("test", None)

    def on_train_epoch_end(self) -> None:
        self._log_counts("train")

    def on_validation_epoch_end(self) -> None:
        self._log_counts("val")

    def on_test_epoch_end(self) -> None:
        self._log_counts("test")

    # -- the picture ---------------------------------------------------------------------------
    def on_train_end(self) -> None:
        trainer = self.trainer
        if not self.picture or not trainer.is_global_zero or trainer.sanity_checking:
            return
        dm = trainer.datamodule
        if dm is None or not hasattr(dm, "full_graph") or trainer.fast_dev_run:
            return
        from attnflow.viz.graph import EMBEDDING_CAPTION, embedding_figure, log_figure

        data = dm.full_graph()
        logits, weights = self._attention(data)
        edge_index, alpha = weights[-1]
        y = data.y.argmax(-1) if data.y.dim() == 2 else data.y
        fig = embedding_figure(logits, y.cpu(), edge_index, alpha.mean(-1), class_names=self.class_names())
        out = Path(trainer.default_root_dir) / "attention" / "graph_embedding.png"
        log_figure(fig, out, trainer, "graph/embedding", EMBEDDING_CAPTION,
                   when=f"end of training, step {trainer.global_step}, last weights")

    # -- dashboard ---------------------------------------------------------------------------------
    def class_names(self) -> list:
        return [f"class {c}" for c in range(self.num_classes)]

    @torch.no_grad()
    def _attention(self, data):
        """Full-graph logits and [(edge_index, α (E, J))] per layer, on the CPU (``to`` makes
        copies: Data.to() would move the data module's own graph)."""
        with self.eval_mode():
            logits, weights = self.model(self._features(data.x), data.edge_index.to(self.device),
                                         need_weights=True)
        return logits.float().cpu(), [(ei.cpu(), a.float().cpu()) for ei, a in weights]

    def dashboard(self, batch: dict) -> list:
        """Panels for :class:`attnflow.training.callbacks.AttentionMaps`. ``batch``: the data module's
        ``{"graph": Data, "nodes": ids}`` (validation nodes chosen across classes). Per node, its
        neighbours' α per layer and head (``val/attention/node_<id>``, one size for all;
        ``attention/val_node_<id>.png`` at the end); with ``picture``, the embedding picture with
        its class legend (``graph/embedding``)."""
        from attnflow.viz.graph import EMBEDDING_CAPTION, embedding_figure, neighbourhoods
        from attnflow.viz.figures import image_panel, neighbourhood_figure

        data, nodes = batch["graph"], batch["nodes"].cpu()
        logits, weights = self._attention(data)
        y = data.y.argmax(-1) if data.y.dim() == 2 else data.y
        pred = (logits > 0).float().argmax(-1) if self.multi_label else logits.argmax(-1)
        names = self.class_names()
        panels = []
        for t, (nbrs, alphas) in zip(nodes.tolist(), neighbourhoods(weights, nodes)):
            labels = [("self" if j == t else str(j)) + f" · c{int(y[j])}" for j in nbrs.tolist()]
            title = (f"node {t} ({names[int(y[t])]}, predicted {names[int(pred[t])]}): α of its "
                     f"{len(labels)} neighbours per layer and head")
            panels.append(image_panel(f"val/attention/node_{t}", neighbourhood_figure(
                [a.numpy() for a in alphas], labels, title), caption=title, file=f"val_node_{t}.png"))
        if self.picture:
            edge_index, alpha = weights[-1]
            panels.append(image_panel("graph/embedding", embedding_figure(
                logits, y.cpu(), edge_index, alpha.mean(-1), class_names=names),
                caption=EMBEDDING_CAPTION))
        return panels
