"""A run stopped within an epoch resumes at the train loader's next batch, in the epoch's order,
with the random stream where it was (attnflow.data.resumable with attnflow.training.state's
TrainingState): whether Lightning made the loader after restoring the checkpoint's loops (it
restores the loader's state then) or before (a schedule reading estimated_stepping_batches)."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

from attnflow.data.buckets import BucketBatchSampler
from attnflow.data.resumable import ResumableDataLoader
from attnflow.training.state import TrainingState

POINTS, BATCH = 12, 2  # 6 batches an epoch


class Records(pl.LightningModule):
    """Records each step's batch and a draw from the torch stream (as dropout draws)."""

    def __init__(self, reads_steps: bool, bucketed: bool = False) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.reads_steps, self.bucketed = reads_steps, bucketed
        self.seen: list = []

    def training_step(self, batch, batch_idx):
        self.seen.append((batch.view(-1).tolist(), torch.rand(1).item()))
        return self.layer(batch).pow(2).mean()

    def configure_optimizers(self):
        if self.reads_steps:  # makes the train loader before the checkpoint's loops are restored
            assert self.trainer.estimated_stepping_batches > 0
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        data = torch.arange(float(POINTS)).view(-1, 1)
        if self.bucketed:  # an order drawn from the seed and the trainer's epoch, not torch's stream
            return ResumableDataLoader(data, batch_sampler=BucketBatchSampler(
                [1.0] * POINTS, BATCH, True, seed=0, pool=1,
                epoch=lambda: self.trainer.current_epoch))
        return ResumableDataLoader(data, batch_size=BATCH, shuffle=True)


class StopAt(pl.Callback):
    """Saves ``last.ckpt`` after global step ``step`` (within an epoch) and stops there."""

    def __init__(self, step: int, path: Path) -> None:
        self.step, self.path = step, path

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            trainer.save_checkpoint(self.path)
            trainer.should_stop = True


def _fit(module, root: Path, callbacks=(), ckpt_path=None) -> list:
    pl.seed_everything(0, verbose=False)
    trainer = pl.Trainer(default_root_dir=root, accelerator="cpu", logger=False, max_epochs=2,
                         enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=False, callbacks=[TrainingState(), *callbacks])
    trainer.fit(module, ckpt_path=ckpt_path)
    return module.seen


@pytest.mark.parametrize("reads_steps, bucketed", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("stop", [3, 8])  # within the first epoch, within the second
def test_a_run_stopped_mid_epoch_resumes_at_its_next_batch(tmp_path, reads_steps, bucketed, stop):
    whole = _fit(Records(reads_steps, bucketed), tmp_path / "whole")
    assert len(whole) == 2 * POINTS // BATCH
    last = tmp_path / "last.ckpt"
    first = _fit(Records(reads_steps, bucketed), tmp_path / "cut", [StopAt(stop, last)])
    assert first == whole[:stop]
    torch.manual_seed(123)  # (the checkpoint's streams are restored, not this process's)
    resumed = _fit(Records(reads_steps, bucketed), tmp_path / "cut", ckpt_path=last)
    assert resumed == whole[stop:]
