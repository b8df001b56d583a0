"""Node classification on a graph: single-label (SoftMax cross-entropy) or multi-label (per-class
sigmoid log-loss).

Source: Veličković et al. 2018, "Graph attention networks" (Cora, CiteSeer, PubMed: single-label;
PPI: multi-label, the output layer followed by a logistic sigmoid per class, trained with per-class
log-loss). The model maps (x, edge_index) to logits (N, C); only the
nodes of the batch's ``<split>_mask`` count:

    single-label:  L = −1/|M| Σ_{t∈M} ln softmax(z_t)_{y_t}
    multi-label:   L = −1/(|M|·C) Σ_{t∈M} Σ_c [y_tc ln σ(z_tc) + (1 − y_tc) ln(1 − σ(z_tc))]

Metrics, logged as ``{train,val,test}/<name>``: ``loss``; ``acc`` (single-label: argmax equals
the class; multi-label: fraction of (node, class) decisions σ(z) > ½ that are right); multi-label
also ``f1`` (micro-averaged F1, the PPI metric). Metrics accumulate over the mini-batches of an
epoch, so full-batch and mini-batch evaluation agree.

With ``picture`` the task saves, at the end of training, a 2-D projection (PCA) of the output
layer's node vectors coloured by class with edges drawn by attention weight (after Veličković et al. 2018, Fig. 2)
to ``<run dir>/attention/graph_embedding.png`` and logs it to TensorBoard / W&B.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MeanMetric, SumMetric

from attnflow.registry import TASKS
from attnflow.tasks.base import Task
from attnflow.tasks.optim import OptimConfig

SPLITS = ("train", "val", "test")


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
    """

    interface = "graph"
    metrics = {"loss": "min", "acc": "max", "f1": "max"}
    monitor, monitor_mode = "val/acc", "max"

    def __init__(self, model: nn.Module, num_classes: int, multi_label_data: bool = False, *,
                 multi_label: bool = False,
                 optim: OptimConfig = OptimConfig(lr=0.005, weight_decay=5e-4), picture: bool = True):
        super().__init__(model, optim=optim)
        if multi_label != multi_label_data:
            kind = "multi-label ((N, C) 0/1)" if multi_label_data else "single-label ((N,) ids)"
            raise ValueError(f"task 'node_classification': the data's labels are {kind}; set "
                             f"task.multi_label={str(multi_label_data).lower()}")
        self.num_classes, self.multi_label = num_classes, multi_label
        self.picture = picture
        # ModuleDict keys must not shadow nn.Module attributes ('train'), hence the suffix
        self._acc = nn.ModuleDict({f"{s}_": MeanMetric() for s in SPLITS})
        self._counts = nn.ModuleDict({f"{s}_{k}": SumMetric() for s in SPLITS
                                      for k in ("tp", "fp", "fn")})

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.model(x, edge_index)

    def step(self, batch, split: str) -> torch.Tensor:
        logits = self.model(batch.x, batch.edge_index)
        mask = batch[f"{split}_mask"]
        z, y = logits[mask], batch.y[mask]
        n = int(mask.sum())
        if self.multi_label:
            y = y.float()
            loss = F.binary_cross_entropy_with_logits(z, y)
            pred = z > 0
            truth = y > 0.5
            self._acc[f"{split}_"].update((pred == truth).float())
            for k, v in (("tp", pred & truth), ("fp", pred & ~truth), ("fn", ~pred & truth)):
                self._counts[f"{split}_{k}"].update(v.sum().float())
        else:
            loss = F.cross_entropy(z, y)
            self._acc[f"{split}_"].update((z.argmax(-1) == y).float())
        self.log(f"{split}/loss", loss, batch_size=n, prog_bar=split != "test", on_epoch=True,
                 on_step=False, sync_dist=True)
        self.log(f"{split}/acc", self._acc[f"{split}_"], batch_size=n, prog_bar=True,
                 on_epoch=True, on_step=False)
        return loss

    def _log_f1(self, split: str) -> None:
        if not self.multi_label:
            return
        tp, fp, fn = (self._counts[f"{split}_{k}"].compute() for k in ("tp", "fp", "fn"))
        self.log(f"{split}/f1", 2 * tp / (2 * tp + fp + fn).clamp(min=1))
        for k in ("tp", "fp", "fn"):
            self._counts[f"{split}_{k}"].reset()

    def on_train_epoch_end(self) -> None:
        self._log_f1("train")

    def on_validation_epoch_end(self) -> None:
        self._log_f1("val")

    def on_test_epoch_end(self) -> None:
        self._log_f1("test")

    # -- the picture ---------------------------------------------------------------------------
    def on_train_end(self) -> None:
        trainer = self.trainer
        if not self.picture or not trainer.is_global_zero or trainer.sanity_checking:
            return
        dm = trainer.datamodule
        if dm is None or not hasattr(dm, "full_graph") or trainer.fast_dev_run:
            return
        from attnflow.graph_viz import embedding_figure, log_figure

        data = dm.full_graph()
        logits, weights = self._attention(data)
        edge_index, alpha = weights[-1]
        y = data.y.argmax(-1) if data.y.dim() == 2 else data.y
        fig = embedding_figure(logits, y.cpu(), edge_index, alpha.mean(-1), class_names=self.class_names())
        out = Path(trainer.default_root_dir) / "attention" / "graph_embedding.png"
        log_figure(fig, out, trainer, "graph/embedding")

    # -- dashboard ---------------------------------------------------------------------------------
    def class_names(self) -> list:
        return [f"class {c}" for c in range(self.num_classes)]

    @torch.no_grad()
    def _attention(self, data):
        """Full-graph logits and [(edge_index, α (E, J))] per layer, on the CPU (``to`` makes
        copies: Data.to() would move the data module's own graph)."""
        dtype = next(self.model.parameters()).dtype  # bf16-true runs: features in the weights' type
        with self.eval_mode():
            logits, weights = self.model(data.x.to(self.device, dtype), data.edge_index.to(self.device),
                                         need_weights=True)
        return logits.float().cpu(), [(ei.cpu(), a.float().cpu()) for ei, a in weights]

    def dashboard(self, batch: dict) -> list:
        """Panels for :class:`attnflow.callbacks.AttentionMaps`. ``batch``: the data module's
        ``{"graph": Data, "nodes": ids}`` (validation nodes chosen across classes). Per node, its
        neighbours' α per layer and head (``val/attention/node_<id>``, one size for all;
        ``attention/val_node_<id>.png`` at the end); with ``picture``, the embedding picture with
        its class legend (``graph/embedding``)."""
        from attnflow.graph_viz import embedding_figure, neighbourhoods
        from attnflow.viz import image_panel, neighbourhood_figure

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
                logits, y.cpu(), edge_index, alpha.mean(-1), class_names=names)))
        return panels
