"""Length-bucketed batches: shuffled, each pool of ``pool`` batches sorted by size and cut, the
batches shuffled (little padding, a new order each epoch; ``epoch`` gives the trainer's epoch so
a resumed run keeps its order); not shuffled, the whole set sorted by size. A ``BatchSampler``
with a ``sampler`` argument, so under DDP Lightning re-creates it with its DistributedSampler.
"""

from __future__ import annotations

import random
from typing import Callable, Iterator, List, Optional, Sequence

import pytorch_lightning as pl
from torch.utils.data import BatchSampler, Sampler


class BucketBatchSampler(BatchSampler):
    """Batches of indices of items of similar ``sizes``; ``sampler``: the indices to batch
    (default all; under DDP Lightning passes this rank's share)."""

    def __init__(self, sizes: Sequence[float], batch_size: int, shuffle: bool = True, seed: int = 0,
                 pool: int = 100, epoch: Optional[Callable[[], Optional[int]]] = None,
                 sampler: Optional[Sampler] = None, drop_last: bool = False):
        # BatchSampler.__init__ is not called: its checks want a sampler, and ours is optional
        self.sizes, self.batch_size, self.shuffle = list(sizes), batch_size, shuffle
        self.seed, self.pool, self.epoch_source = seed, pool, epoch
        self.sampler, self.drop_last = sampler, drop_last  # drop_last: BatchSampler's API; unused
        self.iterations = 0

    def _indices(self) -> List[int]:
        return list(range(len(self.sizes))) if self.sampler is None else list(self.sampler)

    def __len__(self) -> int:
        n = len(self.sizes) if self.sampler is None else len(self.sampler)
        return (n + self.batch_size - 1) // self.batch_size

    def _epoch(self) -> int:
        epoch = self.epoch_source() if self.epoch_source is not None else None
        return self.iterations if epoch is None else epoch

    def __iter__(self) -> Iterator[List[int]]:
        order, bs = self._indices(), self.batch_size
        n = len(order)
        if not self.shuffle:
            order = sorted(order, key=lambda i: self.sizes[i])
            return iter([order[i : i + bs] for i in range(0, n, bs)])
        rng = random.Random(self.seed + self._epoch())
        self.iterations += 1
        rng.shuffle(order)
        batches, chunk = [], self.pool * bs
        for p in range(0, n, chunk):
            part = sorted(order[p : p + chunk], key=lambda i: self.sizes[i])
            batches += [part[i : i + bs] for i in range(0, len(part), bs)]
        rng.shuffle(batches)
        return iter(batches)


def trainer_epoch(data_module: pl.LightningDataModule) -> Callable[[], Optional[int]]:
    """The current epoch of the trainer a LightningDataModule is attached to (None if none)."""
    def epoch() -> Optional[int]:
        trainer = data_module.trainer
        return None if trainer is None else int(trainer.current_epoch)
    return epoch
