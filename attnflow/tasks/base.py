"""The base of every task: a LightningModule around a model with its ``optim`` child config.

A subclass implements ``step(batch, split)`` (returning the training loss) and declares what the
runner reads before building: ``interface`` (the data and models it works with), ``metrics``
(name → 'min'/'max', logged as ``{train,val,test}/<name>``) and the checkpoint ``monitor``
(:class:`attnflow.config.contracts.TaskContract`).
Checkpoints carry the resolved config and the data module's ``artifacts()``.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Mapping, Optional

import pytorch_lightning as pl
import torch
from pytorch_lightning.plugins.precision import MixedPrecision, Precision
from pytorch_lightning.utilities.enums import GradClipAlgorithmType
from torch import nn
from torchmetrics import MeanMetric, Metric
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

from attnflow.config.contracts import DataContract, TaskContract
from attnflow.tasks.optim import OptimConfig, attached_trainer, configure


class Task(TaskContract, pl.LightningModule):
    """Base of the registered tasks (not registered itself)."""

    # a prefix of every name logged: ``best/`` while the best checkpoint is validated after
    # training (its figures are not one more point of the ``val/`` curves)
    logged_as: str = ""
    # the data module given to a task rebuilt outside training (:meth:`use_data`)
    _given_data: Optional[DataContract] = None

    def __init__(self, model: nn.Module, *, optim: OptimConfig = OptimConfig()):
        super().__init__()
        self.model = model
        self.optim = OptimConfig(**optim) if isinstance(optim, Mapping) else optim
        self.run_config: Dict[str, Any] = {}  # the resolved config, stored in checkpoints
        self._synced_means = nn.ModuleDict()  # {name: MeanMetric}, see log

    def log(self, name: str, value: Any, *args: Any, **kwargs: Any) -> None:
        """Lightning's ``log``, the name after :attr:`logged_as`. An epoch mean over every rank
        (``sync_dist`` with a ``batch_size``) is a torchmetrics ``MeanMetric``, which sums values
        and weights over the ranks: Lightning's own divides its integer count of items by the
        world size and floors it (Lightning-AI/pytorch-lightning#21838), so val/loss under DDP
        came out up to one item in 2·n too high."""
        name = self.logged_as + name
        on_step = kwargs.get("on_step")
        if (kwargs.get("sync_dist") and torch.is_tensor(value) and "batch_size" in kwargs
                and kwargs.get("reduce_fx", "mean") == "mean"
                and not (self.training if on_step is None else on_step)):
            key = name.replace(".", ",")  # (a module's name has no dot)
            if key not in self._synced_means:
                # a NaN stays NaN (torchmetrics 1.9's "disable" also drops the weights)
                self._synced_means[key] = MeanMetric(nan_strategy=float("nan")).to(value.device)
            mean = self._synced_means[key]
            mean.update(value.detach(), weight=kwargs.pop("batch_size"))
            value, kwargs["sync_dist"] = mean, False  # (a metric syncs itself as it computes)
            kwargs["metric_attribute"] = f"_synced_means.{key}"
        super().log(name, value, *args, **kwargs)

    # -- one batch -------------------------------------------------------------------------------
    def step(self, batch: Any, split: str) -> Optional[torch.Tensor]:
        """Loss and metrics of one batch of ``split`` ('train', 'val' or 'test'); returns the loss."""
        raise NotImplementedError

    def training_step(self, batch, batch_idx):
        return self.step(batch, "train")

    def validation_step(self, batch, batch_idx):
        self.step(batch, "val")

    def test_step(self, batch, batch_idx):
        self.step(batch, "test")

    @contextmanager
    def eval_mode(self) -> Iterator[None]:
        """Eval mode for a forward pass outside Lightning's loops; the previous mode after."""
        was_training = self.training
        self.eval()
        try:
            yield
        finally:
            self.train(was_training)

    # -- the metrics of the classifiers ----------------------------------------------------------
    def add_class_metrics(self, num_classes: int) -> None:
        """Micro accuracy (every split) and macro F1 (val, test) for :meth:`log_class_metrics`."""
        self._acc = nn.ModuleDict({f"{s}_": MulticlassAccuracy(num_classes, average="micro")
                                   for s in ("train", "val", "test")})
        self._f1 = nn.ModuleDict({f"{s}_": MulticlassF1Score(num_classes, average="macro")
                                  for s in ("val", "test")})

    def log_class_metrics(self, split: str, loss: torch.Tensor, logits: torch.Tensor,
                          y: torch.Tensor) -> None:
        """``<split>/loss``, ``/acc`` and (val, test) ``/f1``; val/test over every rank's items."""
        n, pred = len(y), logits.argmax(-1)
        acc = self._acc[f"{split}_"]
        acc(pred, y)  # forward, not update: it also sets the per-step value that training logs
        self.log(f"{split}/loss", loss, batch_size=n, prog_bar=split != "test",
                 sync_dist=split != "train")
        self.log(f"{split}/acc", acc, batch_size=n, prog_bar=True)
        if split != "train":
            self._f1[f"{split}_"].update(pred, y)
            self.log(f"{split}/f1", self._f1[f"{split}_"], batch_size=n)

    # -- optimisation and checkpoints ---------------------------------------------------------------
    def configure_optimizers(self):
        return configure(self, self.optim)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None,
                                    gradient_clip_algorithm=None) -> None:
        """Lightning's clipping; under bf16-mixed (no GradScaler) clipped as the base precision
        plugin clips, since Lightning's mixed plugin refuses to clip with a fused optimiser."""
        plugin = self.trainer.precision_plugin
        if gradient_clip_val and isinstance(plugin, MixedPrecision) and plugin.scaler is None:
            Precision.clip_gradients(plugin, optimizer, gradient_clip_val,
                                     GradClipAlgorithmType(gradient_clip_algorithm or "norm"))
            return
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def on_fit_start(self) -> None:
        self._reset_metrics()

    def on_validation_start(self) -> None:
        if self.trainer.state.fn != "fit":  # (within a fit the train metrics are still counting)
            self._reset_metrics()

    on_test_start = on_validation_start

    def _reset_metrics(self) -> None:
        """Every torchmetrics state to zero as a stage starts: under ddp_spawn a stage's workers
        get the module with the states the fit left, and would count them again."""
        for m in self.modules():
            if isinstance(m, Metric):
                m.reset()

    def data_module(self) -> Optional[DataContract]:
        """The attnflow data module of the run this task is attached to, else the one given to
        :meth:`use_data`, else None."""
        trainer = attached_trainer(self)
        dm = trainer.datamodule if trainer is not None else self._given_data
        return dm if isinstance(dm, DataContract) else None

    def use_data(self, dm: DataContract) -> None:
        """The data module a task rebuilt outside training reads (its tokenizer spells the
        tokens of pictures: :meth:`token_strings`)."""
        self._given_data = dm

    def token_strings(self, ids: torch.Tensor, lengths: List[int]) -> List[List[str]]:
        """Each row's first ``lengths`` ids as the data module's tokenizer spells them (else the
        ids), for dashboards."""
        dm = self.data_module()
        tok = dm.tokenizer if dm is not None else None
        show = tok.id_to_token if tok is not None else str
        return [[show(i) or str(i) for i in row[:n]] for row, n in zip(ids.tolist(), lengths)]

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["attnflow_config"] = self.run_config
        dm = self.data_module()
        if dm is not None:
            checkpoint["attnflow_artifacts"] = dm.artifacts()


def updated_on_any_rank(metric: Metric, trainer: Optional[pl.Trainer]) -> bool:
    """Whether a torchmetrics ``metric`` was updated on any rank: its ``compute()`` syncs under
    DDP, so every rank must call it or none, also one whose shard was empty."""
    updated = bool(metric.update_count)
    if trainer is not None:
        updated = bool(trainer.strategy.reduce_boolean_decision(updated, all=False))
    return updated
