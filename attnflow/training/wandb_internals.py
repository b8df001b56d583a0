"""W&B's internals that attnflow reads, in one place, checked against wandb 0.31.0 and the
``WandbLogger`` of pytorch-lightning 2.6.6; ``tests/test_library_internals.py`` checks each on the
installed versions:

- ``WandbLogger._wandb_init``: the arguments the logger passes to ``wandb.init``. It passes
  ``anonymous`` always (None where not asked for), and wandb answers a set ``anonymous`` with a
  deprecation line on every run (``wandb.termwarn``, not Python's warnings); no public argument
  of the logger leaves it out.
"""

from __future__ import annotations

from pytorch_lightning.loggers import WandbLogger


def without_anonymous(logger: WandbLogger) -> WandbLogger:
    """``logger``, which no longer passes ``anonymous`` to ``wandb.init``."""
    logger._wandb_init.pop("anonymous", None)
    return logger
