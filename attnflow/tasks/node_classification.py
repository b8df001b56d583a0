"""Node classification on a graph: single-label (softmax cross-entropy) or multi-label (per-class
sigmoid log-loss), Veličković et al. 2018 (Cora, CiteSeer, PubMed; PPI). Only the nodes of the
batch's ``<split>_mask`` count; ε is label smoothing (Szegedy et al. 2016, §7):

    single-label:  L = −1/|M| Σ_{t∈M} Σ_c q_tc ln softmax(z_t)_c,  q_t = (1 − ε)·onehot(y_t) + ε/C
    multi-label:   L = −1/(|M|·C) Σ_{t∈M} Σ_c [y_tc ln σ(z_tc) + (1 − y_tc) ln(1 − σ(z_tc))]

μ = ``propagation_reg`` > 0 adds P-reg to the training loss (Yang, Ma & Cheng 2021, §3), over
every node with a neighbour, labelled or not (the gradient flows through both sides):

    L_train = L + μ · 1/|V′| Σ_{i∈V′} −Σ_c softmax(ẑ_i)_c ln softmax(z_i)_c,   Ẑ = ÂZ

with Â = D⁻¹A (paper) or, ``propagation_adjacency='gcn'``, D̃^-½(A+I)D̃^-½ (the authors' code;
Kipf & Welling 2017, eq. 2). Validation and test losses are the plain L; ``train/preg`` logs the
term. ``acc`` and multi-label ``f1`` (micro) come from float32 counts summed over an epoch's
batches and the ranks, so full-batch and mini-batch evaluation agree. With ``picture``, the end
of training saves the PCA embedding picture (after Veličković et al. 2018, Fig. 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import remove_self_loops, scatter

from attnflow.config.registry import DATA, TASKS, ConfigError, NonNegativeFloat, Probability
from attnflow.data.graph import GraphDataModule
from attnflow.io.console import warn_unread
from attnflow.tasks.base import Task
from attnflow.tasks.optim import OptimConfig, attached_trainer
from attnflow.viz.figures import alpha_label, image_panel, neighbourhood_figure
from attnflow.viz.graph import embedding_figure, log_figure, neighbourhoods

SPLITS = ("train", "val", "test")
COUNTS = ("right", "decisions", "tp", "fp", "fn")  # the per-epoch sums behind acc and f1


def propagate(z: torch.Tensor, edge_index: torch.Tensor, adjacency: str = "mean"):
    """(Ẑ = ÂZ, the (N,) mask of the nodes it is defined for): 'mean' D⁻¹A over in-neighbours
    j ≠ i (masked where none), 'gcn' D̃^-½(A+I)D̃^-½ (every node)."""
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
    """P-reg's term (module docstring) over the nodes ẑ is defined for."""
    neighbours, has = propagate(logits, edge_index, adjacency)
    ce = -(neighbours.softmax(-1) * logits.log_softmax(-1)).sum(-1)
    return ce[has].mean()


@TASKS.register("node_classification")
class NodeClassificationTask(Task):
    """Trains a graph model (x, edge_index) -> logits (N, C) on masked nodes; the default optim
    is the GAT paper's for Cora (Adam, lr 0.005, weight decay 5e-4)."""

    interface = "graph"
    metrics = {"loss": "min", "acc": "max", "f1": "max"}
    monitor, monitor_mode = "val/acc", "max"

    def __init__(self, model: nn.Module, num_classes: int, multi_label_data: bool = False, *,
                 multi_label: bool = False,
                 optim: OptimConfig = OptimConfig(lr=0.005, weight_decay=5e-4), picture: bool = True,
                 label_smoothing: Probability = 0.0, propagation_reg: NonNegativeFloat = 0.0,
                 propagation_adjacency: Literal["mean", "gcn"] = "mean"):
        super().__init__(model, optim=optim)
        self.num_classes, self.multi_label = num_classes, multi_label
        self.picture, self.label_smoothing = picture, label_smoothing
        self.propagation_reg, self.propagation_adjacency = propagation_reg, propagation_adjacency
        # split -> float32 sums of COUNTS over the epoch so far (not a buffer: not checkpointed)
        self._sums: dict = {}

    @classmethod
    def check_config(cls, cfg: Mapping[str, Any]) -> None:
        """The task's labels are the data's kind; single-label options unread with multi_label."""
        if cfg["task"].get("name") == "node_classification":
            task = cfg["task"]  # with the defaults
            for field in ("label_smoothing", "propagation_reg"):
                if task["multi_label"] and task[field]:
                    warn_unread(f"task.{field}={task[field]}",
                                "single-label data only; task.multi_label=true")
            data = cfg["data"]  # its config says which labels it makes, or its class does
            known = data.get("multi_label", DATA.get(data["name"]).known_multi_label)
            if known is not None and known != task["multi_label"]:
                kind = "multi-label ((N, C) 0/1)" if known else "single-label ((N,) ids)"
                raise ConfigError(f"task 'node_classification': the data's labels are {kind}; "
                                  f"set task.multi_label={str(known).lower()}")

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.model(x, edge_index)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Node features in the weights' float type (``*-true`` precisions do not cast a PyG
        ``Data``)."""
        dtype = next(self.model.parameters()).dtype
        return x.to(self.device, dtype) if x.is_floating_point() else x.to(self.device)

    def step(self, batch, split: str) -> torch.Tensor:
        logits = self.model(self.features(batch.x), batch.edge_index)
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
        """``<split>/acc`` (and ``/f1``) of the epoch from its sums over batches and every rank
        (also one without a batch); equal on every rank, so ``max`` syncs nothing away."""
        sums = self._sums.pop(split, None)
        if sums is None:
            sums = torch.zeros(len(COUNTS) if self.multi_label else 2, device=self.device)
        if attached_trainer(self) is not None:
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

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        # at the epoch's last batch, not its end: callbacks (the epoch's line in the console and
        # train.log) read the epoch's metrics before the module's on_train_epoch_end
        if batch_idx + 1 >= self.trainer.num_training_batches:
            self._log_counts("train")

    def on_train_epoch_end(self) -> None:
        if "train" in self._sums:  # (an epoch stopped before its last batch)
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
        if not isinstance(dm, GraphDataModule) or trainer.fast_dev_run:
            return
        data = dm.full_graph()
        logits, weights = self._attention(data)
        y = data.y.argmax(-1) if data.y.dim() == 2 else data.y
        fig, caption = self._embedding(logits, y, weights)
        out = Path(trainer.default_root_dir) / "attention" / "graph_embedding.png"
        log_figure(fig, out, trainer, "last/graph/embedding", caption,  # (not a validation's)
                   when=f"end of training, step {trainer.global_step}, last weights")

    def _embedding(self, logits: torch.Tensor, y: torch.Tensor, weights: list):
        """(:func:`attnflow.viz.graph.embedding_figure` with edges by the last layer's α, its
        caption): both name the layer and how many heads the edges average."""
        edge_index, alpha = weights[-1]
        edges = "edges by " + alpha_label(alpha.shape[-1], (len(weights), len(weights)))
        fig = embedding_figure(logits, y.cpu(), edge_index, alpha.mean(-1),
                               f"output-layer node vectors (PCA); {edges}", self.class_names())
        return fig, f"every node's output vector (PCA, 2-D) by true class; {edges}"

    # -- dashboard ---------------------------------------------------------------------------------
    def class_names(self) -> list:
        return [f"class {c}" for c in range(self.num_classes)]

    @torch.no_grad()
    def _attention(self, data):
        """Full-graph logits and [(edge_index, α (E, J))] per layer, on the CPU."""
        with self.eval_mode():
            logits, weights = self.model(self.features(data.x), data.edge_index.to(self.device),
                                         need_weights=True)
        return logits.float().cpu(), [(ei.cpu(), a.float().cpu()) for ei, a in weights]

    def predicted(self, data):
        """(logits, [(edge_index, α (E, J))] per layer, true classes (N,), predicted classes (N,))
        of the whole graph (multi-label: each node's first class)."""
        logits, weights = self._attention(data)
        y = data.y.argmax(-1) if data.y.dim() == 2 else data.y
        pred = (logits > 0).float().argmax(-1) if self.multi_label else logits.argmax(-1)
        return logits, weights, y, pred

    def node_picture(self, t: int, nbrs: torch.Tensor, alphas: list, y: torch.Tensor,
                     pred: torch.Tensor):
        """(:func:`~attnflow.viz.figures.neighbourhood_figure` of node ``t``'s neighbours ``nbrs``
        and their α per layer (K, heads), its title: the node's true and predicted class)."""
        names = self.class_names()
        labels = [("self" if j == t else str(j)) + f" · c{int(y[j])}" for j in nbrs.tolist()]
        title = (f"node {t} ({names[int(y[t])]}, predicted {names[int(pred[t])]}): α of its "
                 f"{len(labels)} neighbours per layer and head")
        return neighbourhood_figure([a.numpy() for a in alphas], labels, title), title

    def dashboard(self, batch: dict) -> list:
        """Per node of ``batch["nodes"]`` its neighbours' α per layer and head
        (``val/attention/node_<id>``); with ``picture`` the embedding (``graph/embedding``)."""
        data, nodes = batch["graph"], batch["nodes"].cpu()
        logits, weights, y, pred = self.predicted(data)
        panels = []
        for t, (nbrs, alphas) in zip(nodes.tolist(), neighbourhoods(weights, nodes)):
            fig, title = self.node_picture(t, nbrs, alphas, y, pred)
            panels.append(image_panel(f"val/attention/node_{t}", fig, caption=title,
                                      file=f"val_node_{t}.png"))
        if self.picture:
            fig, caption = self._embedding(logits, y, weights)
            panels.append(image_panel("graph/embedding", fig, caption=caption))
        return panels


def top_neighbours(edge_index: torch.Tensor, alpha: torch.Tensor, num_nodes: int, k: int):
    """For every target node t the k sources i of its edges with the largest α (ties: edge
    order): ids (N, k) (-1 where N(t) has fewer) and weights (N, k) (NaN there). No loop over
    nodes: edges are sorted by (target, −α) and ranked within each target's segment."""
    src, dst = edge_index
    order = torch.argsort(alpha, descending=True, stable=True)
    order = order[torch.argsort(dst[order], stable=True)]
    src, dst, alpha = src[order], dst[order], alpha[order]
    counts = torch.bincount(dst, minlength=num_nodes)
    rank = torch.arange(len(dst)) - (torch.cumsum(counts, 0) - counts)[dst]
    keep = rank < k
    ids = torch.full((num_nodes, k), -1, dtype=torch.long)
    weights = torch.full((num_nodes, k), float("nan"))
    ids[dst[keep], rank[keep]] = src[keep]
    weights[dst[keep], rank[keep]] = alpha[keep].float()
    return ids, weights
