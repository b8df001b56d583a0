"""What the sequence and text data modules share: the three Lightning loaders from one
``_loader(split, train)``, a test split that may be absent (named, not an empty loader), and the
loader of a split whose items have lengths (length-bucketed when training)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from attnflow.config.contracts import DataContract
from attnflow.data.buckets import BucketBatchSampler, trainer_epoch
from attnflow.data.errors import DataError, missing_data
from attnflow.data.examples import example_indices, spread_over_labels
from attnflow.data.hf_datasets import HFDataset, HFSplit, class_names
from attnflow.data.resumable import ResumableDataLoader

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


class UnrepeatedSampler(DistributedSampler):
    """This rank's share of a data set in order, every item on exactly one rank (ranks may differ
    by one item; torch's sampler repeats items to even them out). A ``DistributedSampler``, so
    Lightning puts none of its own in its place."""

    def __init__(self, dataset: Any) -> None:
        super().__init__(dataset, shuffle=False)
        self.num_samples = len(range(self.rank, len(dataset), self.num_replicas))
        self.total_size = len(dataset)
        # a rank without a batch would wait for the others' collective calls
        assert self.num_samples >= 1 or self.total_size == 0

    def __iter__(self):
        return iter(range(self.rank, self.total_size, self.num_replicas))


def eval_sampler(dataset):
    """Under DDP each evaluation item on exactly one rank (Lightning's sampler repeats items to
    even out the ranks: counted twice); None in one process."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return None
    return UnrepeatedSampler(dataset)


def random_subset(rows: list, limit: int, seed: int) -> list:
    """``limit`` rows drawn with ``seed``, in file order (0: all); files may be sorted by label."""
    if limit and limit < len(rows):
        rows = [rows[i] for i in sorted(random.Random(seed).sample(range(len(rows)), limit))]
    return rows


class SplitDataModule(DataContract, pl.LightningDataModule):
    """A data module whose loaders differ only by split: a subclass implements
    ``_loader(split, train)`` and, when its test split can be absent, ``missing_test()``."""

    def _loader(self, split: str, train: bool) -> DataLoader:
        raise NotImplementedError

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
            return ResumableDataLoader(data, batch_sampler=BucketBatchSampler(
                sizes(), self.batch_size, True, self.seed, pool=50, epoch=trainer_epoch(self)),
                              collate_fn=collate, num_workers=self.num_workers)
        sampler = None if train else eval_sampler(data)
        if not train and sampler is None:  # the same order every epoch and every evaluation
            sampler = random.Random(self.seed).sample(range(len(data)), len(data))
        return (ResumableDataLoader if train else DataLoader)(
            data, batch_size=self.batch_size, shuffle=train, collate_fn=collate, sampler=sampler,
            num_workers=self.num_workers)


def present(source: Any) -> bool:
    """Whether a split's source is there: a file, or a split its HF data set holds."""
    return source.exists() if isinstance(source, HFSplit) else Path(source).is_file()


class FileDataModule(SplitDataModule):
    """Text files ``train_path``, ``val_path`` and an optional ``test_path`` (empty, null or
    absent: no test split), or the splits of an HF data set (``hf_dataset``) in their place,
    encoded by a subclass into ``self.splits`` (labelled ones: ``.labels``)."""

    source_fields = ("train_path", "label_field", "hf_dataset")

    owner = "data"
    hf: Optional[HFDataset] = None  # the HF data set read in place of the files

    @classmethod
    def check_files(cls, fields: Mapping[str, Any], test: bool = True) -> None:
        """The training and validation files are there (nothing read): before a sweep's first job."""
        if fields.get("hf_dataset"):  # (a Hub name cannot be told from a mistyped folder unread)
            return
        for name in ("train_path", "val_path"):
            if fields.get(name) and not Path(fields[name]).is_file():
                raise missing_data(cls.owner, f"file not found: {fields[name]} (at 'data.{name}')")

    def set_paths(self, what: str, train_path: str, val_path: str, test_path: Optional[str],
                  hf: Optional[HFDataset] = None) -> None:
        """The splits' files, or with ``hf`` its splits (the file paths then unread)."""
        self.hf = hf
        if hf is not None:
            self.paths = {role: hf.split(role) for role in ("train", "val", "test")}
            return
        for name, value in (("train_path", train_path), ("val_path", val_path)):
            if not value:
                raise ValueError(f"{self.owner}: '{name}' is required ({what}, or data.hf_dataset)")
        self.paths = {"train": Path(train_path), "val": Path(val_path),
                      "test": Path(test_path) if test_path else None}

    @property
    def has_test(self) -> bool:
        return self.paths["test"] is not None and present(self.paths["test"])

    def without_test(self) -> None:
        """A run with test=false: its test file is never read (it need not be there)."""
        self.paths["test"] = None

    def missing_test(self) -> Optional[str]:
        if self.has_test:
            return None
        source = self.paths["test"]
        if isinstance(source, HFSplit):
            what = f"{source} is absent"
        elif self.hf is not None:
            what = "data.hf_splits names none"
        else:
            what = f"test_path={str(source or '')!r} is absent"
        return f"{self.owner}: no test split ({what}); run with test=false"

    def example_batch(self, n: int, split: str = "val",
                      ids: Optional[Sequence[int]] = None) -> Dict[str, torch.Tensor]:
        """``n`` items of a split as a batch, taken across the labels (dashboards), or ``ids``."""
        self.setup()
        data = self.splits[split]
        chosen = spread_over_labels(data.labels, n).tolist() if ids is None else ids
        return self.collate([data[i] for i in example_indices(len(data), n, chosen)])

    def eval_path(self, split: str) -> Path:
        if self.paths.get(split) is None:
            raise ValueError(f"{self.owner}: no {split} file; set data.{split}_path (or name the "
                             f"split in data.hf_splits)")
        return self.paths[split]

    def class_values(self, train_rows: Sequence[tuple], labels: Optional[list], field: str) -> list:
        """The classes, class i the i-th: ``data.labels``, else the names of an HF ``ClassLabel``
        column, else the training file's values sorted."""
        declared = class_names(self.paths["train"], field) if labels is None else None
        values = (list(labels) if labels is not None else declared if declared is not None
                  else sorted({y for _, y in train_rows}))
        if len(values) < 2:
            raise DataError(f"{self.owner}: {self.paths['train']} has one label value {values} in "
                            f"'{field}'; classification needs two")
        return values

    def classes(self, values: Optional[list] = None) -> Optional[Tuple[list, str]]:
        """What :func:`class_label` checks a file's labels against: ``values`` (the classes), else
        ``data.labels`` (``self.labels``), else nothing."""
        values = values if values is not None else self.labels
        if values is None:
            return None
        return values, "data.labels" if self.labels is not None else f"the labels of {self.paths['train']}"

    @staticmethod
    def label_ids(raw: Sequence, values: list) -> List[int]:
        index = {v: i for i, v in enumerate(values)}
        return [index[v] for v in raw]


def check_labels(labels: Optional[Sequence], owner: str) -> Optional[list]:
    """``data.labels``: null (the classes are the training file's labels), or two or more distinct
    class values, all ints or all strings (``[neg, pos]``); class i is the i-th."""
    if labels is None:
        return None
    labels, kinds = list(labels), {type(v) for v in labels}
    if len(labels) < 2 or len(set(labels)) < len(labels) or kinds not in ({int}, {str}):
        raise ValueError(f"{owner}: labels={labels} must list two or more distinct classes, all "
                         f"ints or all strings")
    return labels


def class_label(value: Any, classes: Optional[Tuple[list, str]], where: str, field: str,
                first: Any = None) -> Any:
    """A label ``value`` read at ``where`` (a file and line) as a class value. With ``classes``
    (values, whence) it must be one of them (a ``label<TAB>text`` label matches by its text);
    without, an int or a string of the type of the file's ``first`` label."""
    if classes is not None:
        for known in classes[0]:
            if (type(known) is type(value) and known == value) or (type(value) is str and str(known) == value):
                return known
        raise DataError(f"{where}: {field}={value!r} is not a class of {classes[1]} "
                        f"({', '.join(map(repr, classes[0]))})")
    if type(value) not in (int, str):
        raise DataError(f"{where}: {field}={value!r} is no class label (an int or a string)")
    if first is not None and type(value) is not type(first):
        raise DataError(f"{where}: {field}={value!r} is a {type(value).__name__}, the file's first "
                        f"label {first!r} a {type(first).__name__}: labels are all ints or all strings")
    return value
