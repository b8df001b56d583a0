"""Experiment loggers by registry name: ``csv`` (default, no account), ``tensorboard``, ``wandb``.

Each factory gets the run directory (context) and its YAML fields. W&B runs offline unless the
user configured otherwise (``WANDB_MODE`` in the environment or ``logger.mode=online``), so no
account is needed; ``wandb sync <run dir>/wandb/offline-run-*`` uploads later.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional

from attnflow.registry import LOGGERS


@LOGGERS.register("csv")
def csv_logger(save_dir: str):
    """Lightning's CSVLogger: <run dir>/csv/version_N/metrics.csv (a resumed run gets N + 1, so
    nothing logged before is rewritten)."""
    from pytorch_lightning.loggers import CSVLogger

    return CSVLogger(save_dir, name="csv")


@LOGGERS.register("tensorboard")
def tensorboard_logger(save_dir: str):
    """TensorBoard event files in <run dir>/tensorboard/version_N (``tensorboard --logdir outputs``)."""
    from pytorch_lightning.loggers import TensorBoardLogger

    return TensorBoardLogger(save_dir, name="tensorboard", default_hp_metric=False)


@LOGGERS.register("wandb")
def wandb_logger(save_dir: str, *, project: str = "attnflow", entity: Optional[str] = None,
                 group: Optional[str] = None, run_name: Optional[str] = None,
                 tags: List[str] = [], mode: Optional[str] = None, run_id: Optional[str] = None):
    """Weights & Biases; files in <run dir>/wandb.

    Args:
        project, entity, group, tags: as in ``wandb.init`` (group: e.g. one per sweep).
        run_name: the run's display name (default: the run directory's name).
        mode: 'offline', 'online' or 'disabled' (default: $WANDB_MODE, else 'offline').
        run_id: resume this W&B run (default None: a new run).
    """
    from pytorch_lightning.loggers import WandbLogger

    mode = mode or os.environ.get("WANDB_MODE") or "offline"
    if mode not in ("offline", "online", "disabled"):
        raise ValueError(f"logger 'wandb': mode must be offline, online or disabled, got {mode!r}")
    return WandbLogger(project=project, entity=entity, group=group, tags=list(tags),
                       name=run_name or Path(save_dir).name, save_dir=save_dir, mode=mode,
                       id=run_id, resume="allow" if run_id else None)


@LOGGERS.register("none")
def no_logger(save_dir: str):
    """No experiment logger (metrics.json and checkpoints are still written)."""
    return False
