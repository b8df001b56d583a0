"""What the sequence and text data modules share: the three Lightning loaders from one
``_loader(split, train)``, a test split that may be absent (named, not an empty loader), and the
loader of a split whose items have lengths (length-bucketed when training)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset

from attnflow.data.buckets import BucketBatchSampler, trainer_epoch
from attnflow.data.errors import DataError
from attnflow.data.examples import spread_over_labels

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


class Columns(Dataset):
    """Items as tuples of equally long columns, each column also an attribute (``.labels``)."""

    def __init__(self, **columns):
        self.__dict__.update(columns)
        self.columns = list(columns.values())

    def __len__(self) -> int:
        return len(self.columns[0])

    def __getitem__(self, i: int) -> tuple:
        return tuple(c[i] for c in self.columns)


def eval_sampler(dataset):
    """Under DDP each evaluation item on exactly one rank (Lightning's sampler repeats items to
    even out the ranks: counted twice); None in one process."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return None
    from pytorch_lightning.overrides.distributed import UnrepeatedDistributedSampler

    return UnrepeatedDistributedSampler(dataset, shuffle=False)


def random_subset(rows: list, limit: int, seed: int) -> list:
    """``limit`` rows drawn with ``seed``, in file order (0: all); files may be sorted by label."""
    if limit and limit < len(rows):
        rows = [rows[i] for i in sorted(random.Random(seed).sample(range(len(rows)), limit))]
    return rows


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

    def set_run_dir(self, run_dir) -> None:
        """Where the run keeps files (``<run_dir>/tokenizer/``): saved there, read back on resume."""
        self.run_dir = Path(run_dir)


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
        """Training with ``self.bucket``: batches of similar ``sizes()``; else shuffled. Evaluation
        walks one fixed order drawn from ``seed`` (files may be sorted by label, so a prefix
        would be one class); under DDP each item on one rank."""
        if train and self.bucket:
            return DataLoader(data, batch_sampler=BucketBatchSampler(
                sizes(), self.batch_size, True, self.seed, pool=50, epoch=trainer_epoch(self)),
                              collate_fn=collate, num_workers=self.num_workers)
        sampler = None if train else eval_sampler(data)
        if not train and sampler is None:  # the same order every epoch and every evaluation
            sampler = random.Random(self.seed).sample(range(len(data)), len(data))
        return DataLoader(data, batch_size=self.batch_size, shuffle=train, collate_fn=collate,
                          sampler=sampler, num_workers=self.num_workers)


class FileDataModule(SplitDataModule):
    """Text files ``train_path``, ``val_path`` and an optional ``test_path`` (absent: no test
    split), encoded by a subclass into ``self.splits`` (labelled ones: ``.labels``)."""

    owner = "data"
    run_dir: Optional[Path] = None

    def set_paths(self, what: str, train_path: str, val_path: str, test_path: str) -> None:
        for name, value in (("train_path", train_path), ("val_path", val_path)):
            if not value:
                raise ValueError(f"{self.owner}: '{name}' is required ({what})")
        self.paths = {"train": Path(train_path), "val": Path(val_path),
                      "test": Path(test_path) if test_path else None}

    @property
    def has_test(self) -> bool:
        return self.paths["test"] is not None and self.paths["test"].is_file()

    def missing_test(self) -> Optional[str]:
        if self.has_test:
            return None
        return (f"{self.owner}: no test split (test_path={str(self.paths['test'] or '')!r} is "
                "absent); run with test=false")

    def example_batch(self, n: int, split: str = "val") -> Dict[str, torch.Tensor]:
        """``n`` items of a split as a batch, taken across the labels (dashboards)."""
        self.setup()
        data = self.splits[split]
        return self.collate([data[i] for i in spread_over_labels(data.labels, n).tolist()])

    def eval_path(self, split: str) -> Path:
        if self.paths.get(split) is None:
            raise ValueError(f"{self.owner}: no {split} file; set data.{split}_path")
        return self.paths[split]

    def sorted_labels(self, rows: Sequence[tuple], field: str) -> list:
        """The training labels' values, sorted: class i is the i-th (IMDB: 1..4, 7..10)."""
        try:
            return sorted({y for _, y in rows})
        except TypeError:
            raise DataError(f"{self.owner}: label field '{field}' of {self.paths['train']} mixes "
                            "types") from None

    def label_ids(self, raw: Sequence, values: list, split: str, what: str, field: str) -> List[int]:
        index = {v: i for i, v in enumerate(values)}
        for n, v in enumerate(raw):
            if v not in index:
                raise DataError(f"{self.owner}: {split} {what} {n + 1} ({self.paths[split]}) has "
                                f"{field}={v!r}, not seen in training; training values: {values}")
        return [index[v] for v in raw]
