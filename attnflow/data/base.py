"""What the sequence and text data modules share: the three Lightning loaders from one
``_loader(split, train)``, a test split that may be absent (named, not an empty loader), and the
loader of a split whose items have lengths (length-bucketed when training)."""

from __future__ import annotations

import random
from typing import Callable, Dict, Optional, Sequence, Tuple

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset

from attnflow.data.buckets import BucketBatchSampler, trainer_epoch
from attnflow.data.sampling import eval_sampler

PAD, BOS, EOS = 0, 1, 2  # the first ids of every sequence data module's vocabulary


def frame_targets(seqs: Sequence[Sequence[int]]) -> tuple:
    """(tgt_in, tgt_out), (B, T) long with T = longest + 1: ⟨bos⟩ y and y ⟨eos⟩, ⟨pad⟩ after."""
    B, T = len(seqs), max((len(s) for s in seqs), default=0) + 1
    tgt_in = torch.full((B, T), PAD, dtype=torch.long)
    tgt_out = torch.full((B, T), PAD, dtype=torch.long)
    tgt_in[:, 0] = BOS
    for i, s in enumerate(seqs):
        ids = torch.as_tensor(list(s), dtype=torch.long)
        tgt_in[i, 1 : len(s) + 1] = ids
        tgt_out[i, : len(s)] = ids
        tgt_out[i, len(s)] = EOS
    return tgt_in, tgt_out


def collate_seq2seq(sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]]
                    ) -> Dict[str, torch.Tensor]:
    """``src`` (B, S) padded, ``src_lengths`` (at least 1), ``tgt_in``, ``tgt_out``."""
    src = torch.full((len(sources), max(max(map(len, sources)), 1)), PAD, dtype=torch.long)
    for i, s in enumerate(sources):
        src[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
    tgt_in, tgt_out = frame_targets(targets)
    return {"src": src, "src_lengths": torch.tensor([max(len(s), 1) for s in sources]),
            "tgt_in": tgt_in, "tgt_out": tgt_out}


class SplitDataModule(pl.LightningDataModule):
    """A data module whose loaders differ only by split: a subclass implements
    ``_loader(split, train)`` and, when its test split can be absent, ``missing_test()``."""

    def _loader(self, split: str, train: bool) -> DataLoader:
        raise NotImplementedError

    # the fields a trained model is bound to (attnflow-eval keeps the run's values)
    run_fixed: Tuple[str, ...] = ()

    def missing_test(self) -> Optional[str]:
        """Why there is no test split (the error's message), or None when there is one."""
        return None

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", False)

    def test_dataloader(self) -> DataLoader:
        why = self.missing_test()
        if why:
            raise ValueError(why)
        return self._loader("test", False)

    def _sized_loader(self, data: Dataset, sizes: Callable[[], Sequence[int]], collate: Callable,
                      train: bool) -> DataLoader:
        """The loader of ``data``: when training with ``self.bucket``, batches of similar
        ``sizes()`` (little padding; :class:`BucketBatchSampler`, reshuffled per epoch); else
        shuffled when training, and under DDP each evaluation item on exactly one rank. In one
        process evaluation walks the split in one fixed order drawn from ``seed``: labelled files
        may be sorted by label (IMDB's are), and a prefix of them (``limit_val_batches``) was one
        class, scored 1.0 without a word. Reads ``bucket``, ``batch_size``, ``seed`` and
        ``num_workers`` of the module."""
        if train and self.bucket:
            return DataLoader(data, batch_sampler=BucketBatchSampler(
                sizes(), self.batch_size, True, self.seed, pool=50, epoch=trainer_epoch(self)),
                              collate_fn=collate, num_workers=self.num_workers)
        sampler = None if train else eval_sampler(data)
        if not train and sampler is None:  # the same order every epoch and every evaluation
            sampler = random.Random(self.seed).sample(range(len(data)), len(data))
        return DataLoader(data, batch_size=self.batch_size, shuffle=train, collate_fn=collate,
                          sampler=sampler, num_workers=self.num_workers)
