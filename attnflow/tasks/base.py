"""What every task shares: the model, the optimiser config, the checkpoint metric, the run config.

A task is a LightningModule around a model. This base owns

- ``optim``: one typed child config (:class:`~attnflow.tasks.optim.OptimConfig`: optimizer, lr,
  weight_decay, scheduler, warmup_steps), validated by the registry like any field
  (``task.optim.lr=0.01``); a subclass gives its own default by declaring ``optim`` again with
  another default, and passes the rest of its parent's fields up with ``**kwargs`` (the registry
  collects keyword-only fields along the MRO);
- ``configure_optimizers`` (:func:`attnflow.tasks.optim.configure`: a fused optimiser where the
  run allows one) and ``configure_gradient_clipping`` (clipping under bf16-mixed with it);
- the step dispatch: ``training_step``, ``validation_step`` and ``test_step`` call
  ``step(batch, split)``, which a subclass implements (it returns the training loss);
- what the runner reads before any data is built: ``interface`` (what data and models it works
  with: ``"seq2seq"``, ``"documents"``, ``"graph"``), ``metrics`` (name → 'min' or 'max': what it
  logs as ``{train,val,test}/<name>``) and the checkpoint metric ``monitor`` with its
  ``monitor_mode`` (ModelCheckpoint and early stopping take them unless the config names one);
- ``run_config`` (the resolved config, set by the runner) and ``on_save_checkpoint``, which stores
  it as ``checkpoint["attnflow_config"]`` together with the data module's ``artifacts()`` when it
  has them (``checkpoint["attnflow_artifacts"]``: what prediction needs besides weights).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Dict, Iterator, Mapping, Optional

import pytorch_lightning as pl
import torch
from pytorch_lightning.plugins.precision import MixedPrecision, Precision
from pytorch_lightning.utilities.enums import GradClipAlgorithmType
from torch import nn

from attnflow.tasks.optim import OptimConfig, configure


class Task(pl.LightningModule):
    """Base of the registered tasks (not registered itself).

    Args:
        model: the model (context).
        optim: optimiser and schedule (one child config; default: OptimConfig()).
    """

    interface: Optional[str] = None
    metrics: Dict[str, str] = {"loss": "min"}
    monitor: str = "val/loss"
    monitor_mode: str = "min"
    # metrics logged only where a field of the task is above 0 ({metric: field})
    conditional_metrics: Dict[str, str] = {}

    def __init__(self, model: nn.Module, *, optim: OptimConfig = OptimConfig()):
        super().__init__()
        self.model = model
        self.optim = OptimConfig(**optim) if isinstance(optim, Mapping) else optim
        self.run_config: Dict[str, Any] = {}  # the resolved config, stored in checkpoints

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
        """Eval mode (no dropout) for a forward pass outside Lightning's loops (dashboards,
        explanations, pictures during training); the previous mode is restored after, also when
        the pass fails."""
        was_training = self.training
        self.eval()
        try:
            yield
        finally:
            self.train(was_training)

    # -- optimisation and checkpoints ---------------------------------------------------------------
    def configure_optimizers(self):
        return configure(self, self.optim)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None,
                                    gradient_clip_algorithm=None) -> None:
        """Lightning's clipping, except under bf16-mixed with a fused optimiser, which Lightning's
        mixed-precision plugin will not clip (a rule for float16's GradScaler); bf16-mixed has no
        scaler, so the gradients are clipped here as the base precision plugin clips them."""
        plugin = self.trainer.precision_plugin
        if gradient_clip_val and isinstance(plugin, MixedPrecision) and plugin.scaler is None:
            Precision.clip_gradients(plugin, optimizer, gradient_clip_val,
                                     GradClipAlgorithmType(gradient_clip_algorithm or "norm"))
            return
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["attnflow_config"] = self.run_config
        dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if dm is not None and hasattr(dm, "artifacts"):
            checkpoint["attnflow_artifacts"] = dm.artifacts()

    # -- what the runner checks before building -------------------------------------------------------
    @classmethod
    def metric_names(cls, splits=("train", "val")) -> list:
        """``<split>/<metric>`` for every metric the task logs."""
        return [f"{s}/{m}" for s in splits for m in cls.metrics]

    @classmethod
    def metric_names_of(cls, task_cfg: Mapping[str, Any], splits=("train", "val")) -> list:
        """:meth:`metric_names` that a task of config ``task_cfg`` logs: less a conditional
        metric whose field is 0 there (``penalty`` without ``penalty_weight``), which an
        ``optimized_metric`` or a monitor would wait for in vain."""
        off = {m for m, field in cls.conditional_metrics.items() if not (task_cfg.get(field) or 0) > 0}
        return [n for n in cls.metric_names(splits) if n.split("/", 1)[1] not in off]


def updated_on_any_rank(metric, trainer) -> bool:
    """Whether ``metric`` (a torchmetrics object) was updated on any rank. Its ``compute()``
    syncs under DDP, so every rank must call it or none; with :func:`eval_sampler` a rank whose
    shard was empty (fewer items than ranks) has no update of its own, and deciding per rank
    would leave the others waiting in the collective. One process: ``metric.update_count``."""
    updated = bool(metric.update_count)
    strategy = getattr(trainer, "strategy", None) if trainer is not None else None
    if strategy is not None:
        updated = bool(strategy.reduce_boolean_decision(updated, all=False))
    return updated
