"""Lightning callbacks of attnflow: attention heat maps during and after training; a stop on a
non-finite training loss."""

from __future__ import annotations

from pathlib import Path

import math

import numpy as np
import pytorch_lightning as pl
from pytorch_lightning.loggers import TensorBoardLogger, WandbLogger

from attnflow.viz import attention_figure, save_attention_png


def _figure_to_array(fig) -> np.ndarray:
    import matplotlib.pyplot as plt

    fig.canvas.draw()
    img = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
    plt.close(fig)
    return img


class AttentionMaps(pl.Callback):
    """Logs α heat maps of a few validation examples every ``every_n_epochs`` epochs to the
    experiment logger (W&B images, TensorBoard images) and writes PNGs to ``<out_dir>`` when
    training ends.

    The task must offer ``attention_examples(batch) -> [{"weights", "source", "output"}]`` and the
    data module ``example_batch(n)``.
    """

    def __init__(self, out_dir: Path, examples: int = 4, every_n_epochs: int = 1):
        self.out_dir, self.examples, self.every_n_epochs = Path(out_dir), examples, every_n_epochs

    def _examples(self, trainer: pl.Trainer, pl_module: pl.LightningModule):
        dm = trainer.datamodule
        if self.examples <= 0 or dm is None or not hasattr(pl_module, "attention_examples"):
            return []
        return pl_module.attention_examples(dm.example_batch(self.examples))

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero or not self.every_n_epochs:
            return
        if trainer.current_epoch % self.every_n_epochs:
            return
        loggers = [lg for lg in trainer.loggers if isinstance(lg, (WandbLogger, TensorBoardLogger))]
        if not loggers:
            return
        images = [_figure_to_array(attention_figure(e["weights"], e["source"], e["output"]))
                  for e in self._examples(trainer, pl_module)]
        for lg in loggers:
            if isinstance(lg, WandbLogger):
                lg.log_image("val/attention", images, step=trainer.global_step,
                             caption=[f"example {i}" for i in range(len(images))])
            else:
                for i, img in enumerate(images):
                    lg.experiment.add_image(f"val/attention/{i}", img, trainer.global_step,
                                            dataformats="HWC")

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        for i, e in enumerate(self._examples(trainer, pl_module)):
            title = "α, mean over heads" if getattr(pl_module.model, "heads", 1) > 1 else "α"
            save_attention_png(self.out_dir / f"val_example_{i}.png", e["weights"], e["source"],
                               e["output"], f"validation example {i}: {title}")


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN or infinite loss; the message names the step."""


class StopOnNonFiniteLoss(pl.Callback):
    """Stops training at the first NaN/∞ training loss, naming the epoch and step, before any
    checkpoint holds the broken weights (the checkpoints of earlier epochs are kept)."""

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs,
                           batch, batch_idx: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        value = None if loss is None else float(loss)
        if value is not None and not math.isfinite(value):
            raise NonFiniteLossError(
                f"the training loss is {value} at epoch {trainer.current_epoch}, step "
                f"{trainer.global_step} (batch {batch_idx}); training stopped, nothing of this epoch "
                f"was saved. Lower task.optim.lr, clip gradients (trainer.gradient_clip_val) or check "
                f"the data")
