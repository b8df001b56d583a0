"""Labelled texts as WordPiece ids ``[CLS] text [SEP]`` for fine-tuning BERT on single-sentence
classification (Devlin et al. 2019, §4.1). Files: JSON lines, CSV, TSV, Parquet (named fields) or
``label<TAB>text`` lines. The tokenizer is the pretraining run's or an HF checkpoint's
(``tokenizer_from``), else trained on the training texts; it is saved with this run. Texts are cut
to ``max_len`` subwords at their end. An HF data set's splits (``hf_dataset``) may stand in for
the files.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Annotated, Any, Dict, List, Mapping, Optional, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader

from attnflow.data.base import Columns, FileDataModule, check_labels, class_label, random_subset
from attnflow.data.documents import clean
from attnflow.data.tables import has_header, read_table, table_format
from attnflow.data.errors import DataError, numbered_lines
from attnflow.data.hf_datasets import DEFAULT_SPLITS, HFSplit, hf_source
from attnflow.data.corpus import CLS, PAD, SEP, SPECIALS, WordPieceData, run_tokenizer
from attnflow.data.pretraining import DEFAULT_VOCAB, pad_rows
from attnflow.config.registry import DATA, NonNegativeInt, PositiveInt, Range
from attnflow.io.console import warn_unread

log = logging.getLogger(__name__)

OWNER = "data 'text_classification'"


def read_labelled(path: Path | HFSplit, text_field: str, label_field: str, limit: int = 0,
                  seed: int = 0, classes: Optional[tuple] = None) -> List[tuple]:
    """``[(text, label)]`` of a table file (:mod:`attnflow.data.tables`), an HF split or of
    ``label<TAB>text`` lines (``limit``: a subset); a label not of ``classes`` is refused naming
    the file and line (:func:`class_label`)."""
    if isinstance(path, HFSplit):
        return read_table(path, text_field, label_field, limit, seed, OWNER, classes, "texts")
    path = Path(path)
    kind = table_format(path)
    if kind and (kind != ".tsv" or has_header(path, (text_field, label_field), OWNER)):
        return read_table(path, text_field, label_field, limit, seed, OWNER, classes, "texts")
    if kind != ".tsv" and not path.name.endswith((".txt", ".txt.gz")):
        raise DataError(f"{OWNER}: {path}: unknown format; use .jsonl, .csv, .tsv or .parquet (a "
                        f"'{text_field}' and a '{label_field}' field or column) or .txt/.tsv "
                        f"without a header (label<TAB>text per line), optionally .gz")
    rows = []
    for n, line in numbered_lines(path, OWNER):
        if not line.strip():
            continue
        label, tab, text = line.partition("\t")
        if not tab:
            raise DataError(f"{OWNER}: {path} line {n} has no tab; expected label<TAB>text")
        rows.append((text, class_label(label.strip(), classes, f"{OWNER}: {path} line {n}", "label")))
    if not rows:
        raise DataError(f"{OWNER}: {path} holds no texts (the file is empty or blank)")
    return random_subset(rows, limit, seed)


def encode_texts(tokenizer, texts: Sequence[str], max_len: int) -> tuple:
    """(``[CLS] text [SEP]`` id arrays cut to ``max_len``, how many texts were cut)."""
    cleaned = [clean(t).replace("\n", " ") for t in texts]
    enc = tokenizer.encode_batch(cleaned, add_special_tokens=False)
    keep = max_len - 2
    out = [np.concatenate(([CLS], np.asarray(e.ids[:keep], np.int64), [SEP])).astype(np.int64)
           for e in enc]
    return out, sum(len(e.ids) > keep for e in enc)


def collate_texts(items: Sequence[tuple]) -> Dict[str, torch.Tensor]:
    """Pad ``(ids, label)`` pairs into a batch (:func:`~attnflow.data.pretraining.pad_rows`)."""
    ids, attention = pad_rows([i for i, _ in items])
    return {"input_ids": torch.from_numpy(ids), "segment_ids": torch.zeros(ids.shape, dtype=torch.long),
            "attention_mask": torch.from_numpy(attention),
            "labels": torch.tensor([y for _, y in items], dtype=torch.long)}


@DATA.register("text_classification")
class TextClassificationDataModule(WordPieceData, FileDataModule):
    """Labelled texts as ``[CLS] text [SEP]`` WordPiece ids (module docstring). ``vocab_size``
    (null: 30522) and ``lowercase`` (null: True) shape a tokenizer trained here: unread with
    ``tokenizer_from``; ``max_len`` counts [CLS] and [SEP]; ``limit_*``: a random subset;
    ``hf_dataset``: an HF data set's splits in place of the files."""

    owner = OWNER
    interface = "text_classification"  # the bert model (head sequence), the text_classification task

    def __init__(self, *, train_path: str = "", val_path: str = "", test_path: Optional[str] = "",
                 text_field: str = "text", label_field: str = "label",
                 tokenizer_from: Optional[str] = None,
                 vocab_size: Optional[Annotated[int, Range(ge=6, what="the 5 special tokens and more")]] = None,
                 lowercase: Optional[bool] = None,
                 max_len: Annotated[int, Range(ge=3, what="[CLS], a subword, [SEP]")] = 256,
                 limit_train: NonNegativeInt = 0, limit_val: NonNegativeInt = 0,
                 batch_size: PositiveInt = 32, bucket: bool = True, num_workers: NonNegativeInt = 0,
                 seed: int = 1234, labels: Optional[List[Any]] = None,
                 hf_dataset: Optional[str] = None, hf_config: Optional[str] = None,
                 hf_splits: List[Optional[str]] = DEFAULT_SPLITS):
        super().__init__()
        self.labels = check_labels(labels, OWNER)
        self.set_paths("a .jsonl or label<TAB>text file", train_path, val_path, test_path,
                       hf_source(hf_dataset, hf_config, hf_splits, OWNER))
        for name, value in (("vocab_size", vocab_size), ("lowercase", lowercase)):
            if tokenizer_from and value is not None:
                warn_unread(f"{OWNER}: {name}={value}", f"the tokenizer comes from tokenizer_from={tokenizer_from}")
        self.text_field, self.label_field = text_field, label_field
        self.tokenizer_from = tokenizer_from or None
        self.vocab = vocab_size or DEFAULT_VOCAB
        self.lowercase = True if lowercase is None else lowercase
        self.max_len = max_len
        self.limits = {"train": limit_train, "val": limit_val, "test": 0}
        self.batch_size, self.bucket, self.num_workers, self.seed = batch_size, bucket, num_workers, seed
        self.tokenizer = None
        self.rows: Dict[str, List[tuple]] = {}
        self.label_values: List = []
        self.splits: Dict[str, Columns] = {}

    def read(self) -> None:
        """Read the files and the label values (every file now: a bad one fails before any work)."""
        if self.rows:
            return
        read = functools.partial(read_labelled, text_field=self.text_field, label_field=self.label_field)
        self.rows["train"] = read(self.paths["train"], limit=self.limits["train"], seed=self.seed,
                                  classes=self.classes())
        self.label_values = self.class_values(self.rows["train"], self.labels, self.label_field)
        classes = self.classes(self.label_values)
        self.rows["val"] = read(self.paths["val"], limit=self.limits["val"], seed=self.seed, classes=classes)
        if self.has_test:
            self.rows["test"] = read(self.paths["test"], classes=classes)
        elif self.paths["test"] is not None:
            log.info("%s: no test split (%s is absent)", OWNER, self.paths["test"])

    def class_list(self) -> list:
        self.read()
        return self.label_values

    def training_texts(self) -> List[str]:
        self.read()
        return [clean(t) for t, _ in self.rows["train"]]

    def artifacts(self) -> dict:
        """What using the weights needs besides them (stored in checkpoints)."""
        self.setup()
        return {"tokenizer": self.tokenizer.to_str(), "specials": dict(zip(SPECIALS, range(len(SPECIALS)))),
                "class_names": [str(v) for v in self.label_values], "label_values": self.label_values,
                "label_field": self.label_field, "text_field": self.text_field, "max_len": self.max_len}

    @classmethod
    def placeholder_context(cls, fields: Mapping[str, Any]) -> Optional[dict]:
        return {"vocab_size": fields["vocab_size"] or DEFAULT_VOCAB, "pad_id": PAD, "num_classes": 2}

    def _encode(self, split: str, rows: List[tuple]) -> Columns:
        ids, cut = encode_texts(self.tokenizer, [t for t, _ in rows], self.max_len)
        log.info("%s %s: %d texts, %d cut to max_len=%d subwords", OWNER, split, len(ids), cut, self.max_len)
        return Columns(ids=ids, labels=self.label_ids([y for _, y in rows], self.label_values))

    def setup_evaluation(self, run_dir, artifacts: dict, split: str) -> None:
        """The run's tokenizer and classes and ``split``'s file only (attnflow-eval)."""
        path = self.eval_path(split)
        self.tokenizer = run_tokenizer(run_dir, artifacts, OWNER)
        if "label_values" not in artifacts:
            raise ValueError(f"{OWNER}: the run's checkpoint carries no label values")
        self.label_values = list(artifacts["label_values"])
        self.splits[split] = self._encode(split, read_labelled(
            path, self.text_field, self.label_field, classes=(self.label_values, "the run's classes")))

    def text_batch(self, lines: Sequence[str]) -> Dict[str, torch.Tensor]:
        """Texts of your own, ``[CLS] text [SEP]`` cut to ``max_len``; no label (-1)."""
        ids, _ = encode_texts(self.tokenizer, lines, self.max_len)
        return collate_texts([(row, -1) for row in ids])

    def _loader(self, split: str, train: bool) -> DataLoader:
        self.setup()
        data = self.splits[split]
        # IMDB texts run from 10 to 1,000 subwords: bucketed by length when training
        return self._sized_loader(data, lambda: [len(i) for i in data.ids], self.collate, train)

    collate = staticmethod(collate_texts)
