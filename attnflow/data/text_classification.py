"""Labelled texts as WordPiece id sequences ⟨CLS⟩ text ⟨SEP⟩: fine-tuning BERT on a sequence
classification task (Devlin et al. 2019, §4.1: a single-sentence task, one segment).

Files. JSON lines (``.jsonl``, ``.jsonl.gz``) with a text field and a label field (IMDB:
``text`` and ``label`` or ``rating``), or tab-separated text files (``.tsv``/``.txt``, ``.gz``
allowed) holding ``label<TAB>text`` per line. Markup is removed as for the document classifiers
(:func:`attnflow.data.documents.clean`). Labels become class indices in sorted order of their
values (IMDB ratings 1,2,3,4,7,8,9,10 → classes 0..7), as :mod:`attnflow.data.documents` does;
``class_names`` keeps them. A file that is missing, empty, cut short or malformed raises
:class:`~attnflow.data.errors.DataError` naming the file and the line.

Tokenizer. Fine-tuning must see the ids the encoder was pretrained on, so ``tokenizer_from`` names
the pretraining run (its directory or a ``.ckpt``) whose saved WordPiece tokenizer is used
(``<run>/tokenizer/wordpiece.json``, else the checkpoint's ``attnflow_artifacts``, read with
``weights_only=True``). When it is null a WordPiece tokenizer is trained on the training texts with
the pretraining module's own function (the from-scratch baseline). Either way it is saved with
this run as ``<run_dir>/tokenizer/wordpiece.json`` and read back from there on resume.

Sequences are ``[CLS] text [SEP]`` cut to ``max_len`` subwords (the text loses its end: for
reviews the opening usually carries the verdict as well as the end does, and BERT's own
classifier scripts cut the end; the number of texts cut is logged once per split). Segment ids
are 0 throughout (one segment).

Batch: ``input_ids`` (B, T) long, padded with [PAD] = 0, ``segment_ids`` (B, T) zeros,
``attention_mask`` (B, T) bool (True at real tokens), ``labels`` (B,) long.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Annotated, Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
from torch.utils.data import DataLoader

from attnflow.data.base import SplitDataModule
from attnflow.data.documents import clean, read_jsonl
from attnflow.data.errors import DataError, numbered_lines
from attnflow.data.corpus import CLS, PAD, SEP, SPECIALS, TOKENIZER_FILE, save_tokenizer, train_wordpiece
from attnflow.data.pretraining import pad_rows
from attnflow.config.registry import DATA, AttnflowWarning, NonNegativeInt, PositiveInt, Range

log = logging.getLogger(__name__)

OWNER = "data 'text_classification'"
DEFAULT_VOCAB = 30522  # BERT's WordPiece size, when a tokenizer is trained here


# -- reading -----------------------------------------------------------------------------------------
def read_labelled(path: Path, text_field: str, label_field: str, limit: int = 0,
                  seed: int = 0) -> List[tuple]:
    """``[(text, label)]`` of a JSON-lines or ``label<TAB>text`` file; ``limit``: a seeded random
    subset of N texts (0 = all; files may be sorted by label)."""
    path = Path(path)
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    if name.endswith(".jsonl") or name.endswith(".json"):
        try:
            return read_jsonl(path, text_field, label_field, limit, seed)
        except DataError as err:  # its messages name the documents module
            raise DataError(str(err).replace("data 'documents'", OWNER, 1)) from None
    if not (name.endswith(".tsv") or name.endswith(".txt")):
        raise DataError(f"{OWNER}: {path}: unknown format; use .jsonl (a '{text_field}' and a "
                        f"'{label_field}' field per line) or .tsv/.txt (label<TAB>text per line), "
                        f"optionally .gz")
    rows = []
    for n, line in numbered_lines(path, OWNER):
        if not line.strip():
            continue
        label, tab, text = line.partition("\t")
        if not tab:
            raise DataError(f"{OWNER}: {path} line {n} has no tab; expected label<TAB>text")
        rows.append((text, label.strip()))
    if not rows:
        raise DataError(f"{OWNER}: {path} holds no texts (the file is empty or blank)")
    if limit and limit < len(rows):
        import random

        keep = sorted(random.Random(seed).sample(range(len(rows)), limit))
        rows = [rows[i] for i in keep]
    return rows


def load_tokenizer(source: str):
    """The WordPiece tokenizer saved by the pretraining run ``source`` (a run directory or a
    checkpoint file): ``<run>/tokenizer/wordpiece.json``, else the checkpoint's artifacts."""
    from tokenizers import Tokenizer

    from attnflow.io.checkpoints import CheckpointError, find_checkpoint, read_checkpoint

    where = f"{OWNER}: tokenizer_from={source}"
    path = Path(source)
    if path.is_dir() and (path / "tokenizer" / TOKENIZER_FILE).is_file():
        tok = Tokenizer.from_file(str(path / "tokenizer" / TOKENIZER_FILE))
    else:
        try:
            ckpt_path, run_dir = find_checkpoint(path)
            text = (read_checkpoint(ckpt_path).get("attnflow_artifacts") or {}).get("tokenizer")
        except CheckpointError as err:
            raise DataError(f"{where}: {err}") from None
        if not isinstance(text, str) or not text:
            raise DataError(f"{where}: {ckpt_path} carries no tokenizer (a checkpoint of a "
                            f"bert_pretraining run does) and {run_dir / 'tokenizer' / TOKENIZER_FILE} "
                            f"is missing")
        tok = Tokenizer.from_str(text)
    check_specials(tok, where)
    return tok


def check_specials(tok, where: str) -> None:
    """BERT's special tokens at the ids the model was trained with (pretraining.SPECIALS)."""
    wrong = [f"{s} (id {tok.token_to_id(s)})" for i, s in enumerate(SPECIALS) if tok.token_to_id(s) != i]
    if wrong:
        raise DataError(f"{where}: not a BERT WordPiece tokenizer: expected "
                        f"{', '.join(f'{s}={i}' for i, s in enumerate(SPECIALS))}; got {', '.join(wrong)}")


# -- encoding and batches --------------------------------------------------------------------------
class EncodedTexts(torch.utils.data.Dataset):
    """Texts as id arrays ``[CLS] … [SEP]`` with their class indices."""

    def __init__(self, ids: List[np.ndarray], labels: List[int]):
        self.ids, self.labels = ids, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        return self.ids[i], self.labels[i]


def encode_texts(tokenizer, texts: Sequence[str], max_len: int) -> tuple:
    """(``[CLS] text [SEP]`` id arrays cut to ``max_len``, how many texts were cut). One
    ``encode_batch`` call for all texts (the tokenizer's Rust threads)."""
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
class TextClassificationDataModule(SplitDataModule):
    """Labelled texts as ``[CLS] text [SEP]`` WordPiece ids for BERT fine-tuning (module docstring).

    Args:
        train_path, val_path: JSON-lines or label<TAB>text files (``.gz`` allowed) (default '':
            required).
        test_path: optional test file; absent or '' means no test split (default '').
        text_field: the text field of JSON lines (default 'text').
        label_field: the label field of JSON lines, e.g. 'label' or 'rating' (default 'label').
        tokenizer_from: the pretraining run (directory or .ckpt) whose tokenizer is used; it must
            be the run the encoder comes from (the experiments set it to ``${model.init_from}``);
            null = train a WordPiece tokenizer on the training texts (default null).
        vocab_size: WordPiece size when training one; unread with tokenizer_from (default null:
            30522).
        lowercase: lower-case when training one; unread with tokenizer_from (default null: True).
        max_len: longest sequence in subwords, [CLS] and [SEP] included (default 256).
        limit_train, limit_val: use only N texts, a random subset drawn with ``seed``, 0 = all
            (default 0).
        batch_size: texts per batch (default 32).
        bucket: batch training texts of similar length together (default True).
        num_workers: DataLoader workers (default 0).
        seed: subset, shuffling and tokenizer seed (default 1234).
    """

    # evaluation loads the run's tokenizer and classes (setup_evaluation) and reads the whole split
    # in one fixed order: these shape the training data and the tokenizer trained for it only
    interface = "text_classification"  # the bert model (head sequence), the text_classification task

    def __init__(self, *, train_path: str = "", val_path: str = "", test_path: str = "",
                 text_field: str = "text", label_field: str = "label",
                 tokenizer_from: Optional[str] = None,
                 vocab_size: Optional[Annotated[int, Range(ge=6, what="the 5 special tokens and more")]] = None,
                 lowercase: Optional[bool] = None,
                 max_len: Annotated[int, Range(ge=3, what="[CLS], a subword, [SEP]")] = 256,
                 limit_train: NonNegativeInt = 0,
                 limit_val: NonNegativeInt = 0, batch_size: PositiveInt = 32, bucket: bool = True,
                 num_workers: NonNegativeInt = 0, seed: int = 1234):
        super().__init__()
        for name, value in (("train_path", train_path), ("val_path", val_path)):
            if not value:
                raise ValueError(f"{OWNER}: '{name}' is required (a .jsonl or label<TAB>text file)")
        unread = [n for n, v in (("vocab_size", vocab_size), ("lowercase", lowercase)) if v is not None]
        if tokenizer_from and unread:
            warnings.warn(f"{OWNER}: {', '.join(unread)} unread: the tokenizer comes from "
                          f"tokenizer_from={tokenizer_from}", AttnflowWarning, stacklevel=2)
        self.paths = {"train": Path(train_path), "val": Path(val_path),
                      "test": Path(test_path) if test_path else None}
        self.text_field, self.label_field = text_field, label_field
        self.tokenizer_from = tokenizer_from or None
        self.vocab = vocab_size or DEFAULT_VOCAB
        self.lowercase = True if lowercase is None else lowercase
        self.max_len = max_len
        self.limits = {"train": limit_train, "val": limit_val, "test": 0}
        self.batch_size, self.bucket, self.num_workers, self.seed = batch_size, bucket, num_workers, seed
        self.run_dir: Optional[Path] = None
        self.tokenizer = None
        self.rows: Dict[str, List[tuple]] = {}
        self.label_values: List = []
        self.splits: Dict[str, EncodedTexts] = {}

    @property
    def has_test(self) -> bool:
        return self.paths["test"] is not None and self.paths["test"].is_file()

    # -- files, labels, tokenizer ------------------------------------------------------------------
    def set_run_dir(self, run_dir) -> None:
        """Where the tokenizer is saved (``<run_dir>/tokenizer/``), and loaded from if there."""
        self.run_dir = Path(run_dir)

    def read(self) -> None:
        """Read the files and the label values (every file now: a bad one fails before any work)."""
        if self.rows:
            return
        for s in ("train", "val"):
            self.rows[s] = read_labelled(self.paths[s], self.text_field, self.label_field,
                                         self.limits[s], self.seed)
        if self.has_test:
            self.rows["test"] = read_labelled(self.paths["test"], self.text_field, self.label_field)
        elif self.paths["test"] is not None:
            log.info("%s: no test split (%s is absent)", OWNER, self.paths["test"])
        try:
            self.label_values = sorted({y for _, y in self.rows["train"]})
        except TypeError:
            raise DataError(f"{OWNER}: label field '{self.label_field}' of {self.paths['train']} "
                            f"mixes types") from None
        if len(self.label_values) < 2:
            raise DataError(f"{OWNER}: {self.paths['train']} has one label value "
                            f"{self.label_values} in '{self.label_field}'; classification needs two")

    def prepare_tokenizer(self) -> None:
        """This run's saved tokenizer (resume), else the pretraining run's, else train one."""
        if self.tokenizer is not None:
            return
        from tokenizers import Tokenizer

        saved = self.run_dir / "tokenizer" / TOKENIZER_FILE if self.run_dir else None
        if saved is not None and saved.is_file():
            self.tokenizer = Tokenizer.from_file(str(saved))
        elif self.tokenizer_from:
            self.tokenizer = load_tokenizer(self.tokenizer_from)
        else:
            self.read()
            self.tokenizer = train_wordpiece([clean(t) for t, _ in self.rows["train"]], self.vocab,
                                             self.lowercase)
        if self.run_dir:
            self.save_artifacts(self.run_dir)

    def save_artifacts(self, run_dir) -> Path:
        """The tokenizer with the run (``pretraining.save_tokenizer``)."""
        self.prepare_tokenizer()
        return save_tokenizer(self.tokenizer, run_dir)

    def artifacts(self) -> dict:
        """What using the weights needs besides them (stored in checkpoints): the tokenizer as
        JSON text, the special ids, the classes and the fields."""
        self.setup()
        return {"tokenizer": self.tokenizer.to_str(), "specials": dict(zip(SPECIALS, range(len(SPECIALS)))),
                "class_names": [str(v) for v in self.label_values], "label_values": self.label_values,
                "label_field": self.label_field, "text_field": self.text_field, "max_len": self.max_len}

    # -- what models and tasks need ----------------------------------------------------------------
    @classmethod
    def longest_positions(cls, fields: Mapping[str, Any]) -> Tuple[int, str]:
        """The most positions a model is given ([CLS] and [SEP] included), and why (``{at}``: the
        data config's path); the models' config checks compare it with theirs."""
        return fields["max_len"], f"{{at}}max_len={fields['max_len']}"

    @classmethod
    def placeholder_context(cls, fields: Mapping[str, Any]) -> Optional[dict]:
        """:meth:`model_context` with stand-in sizes (:func:`attnflow.training.validate.check_model_builds`)."""
        return {"vocab_size": fields["vocab_size"] or DEFAULT_VOCAB, "pad_id": PAD, "num_classes": 2}

    def model_context(self) -> dict:
        self.read()
        self.prepare_tokenizer()
        return {"vocab_size": self.tokenizer.get_vocab_size(), "pad_id": PAD,
                "num_classes": len(self.label_values)}

    def task_context(self) -> dict:
        self.read()
        return {"num_classes": len(self.label_values), "class_names": [str(v) for v in self.label_values]}

    # -- data --------------------------------------------------------------------------------------
    def _labels(self, raw: Sequence, split: str) -> List[int]:
        index = {v: i for i, v in enumerate(self.label_values)}
        for n, v in enumerate(raw):
            if v not in index:
                raise DataError(f"{OWNER}: {split} text {n + 1} ({self.paths[split]}) has "
                                f"{self.label_field}={v!r}, not seen in training; training values: "
                                f"{self.label_values}")
        return [index[v] for v in raw]

    def _encode(self, split: str, rows: List[tuple]) -> EncodedTexts:
        ids, cut = encode_texts(self.tokenizer, [t for t, _ in rows], self.max_len)
        log.info("%s %s: %d texts, %d cut to max_len=%d subwords", OWNER, split, len(ids), cut, self.max_len)
        return EncodedTexts(ids, self._labels([y for _, y in rows], split))

    def setup(self, stage: Optional[str] = None) -> None:
        self.read()
        self.prepare_tokenizer()
        for split, rows in self.rows.items():
            if split not in self.splits:
                self.splits[split] = self._encode(split, rows)

    def setup_evaluation(self, run_dir, artifacts: dict, split: str) -> None:
        """Only what evaluating a trained run on ``split`` needs: the run's tokenizer and classes
        and that split's file (the training file is not read, no tokenizer is trained)."""
        from tokenizers import Tokenizer

        path = self.paths.get(split)
        if path is None:
            raise ValueError(f"{OWNER}: no {split} file; set data.{split}_path")
        saved = Path(run_dir) / "tokenizer" / TOKENIZER_FILE
        if saved.is_file():
            self.tokenizer = Tokenizer.from_file(str(saved))
        elif artifacts.get("tokenizer"):
            self.tokenizer = Tokenizer.from_str(artifacts["tokenizer"])
        else:
            raise ValueError(f"{OWNER}: the run has no tokenizer ({saved} is missing and its "
                             f"checkpoint carries none)")
        if "label_values" not in artifacts:
            raise ValueError(f"{OWNER}: the run's checkpoint carries no label values")
        self.label_values = list(artifacts["label_values"])
        self.splits[split] = self._encode(split, read_labelled(path, self.text_field, self.label_field))

    def _loader(self, split: str, train: bool) -> DataLoader:
        self.setup()
        data = self.splits[split]
        # IMDB texts run from 10 to 1,000 subwords: bucketed by length when training
        return self._sized_loader(data, lambda: [len(i) for i in data.ids], collate_texts, train)

    def missing_test(self) -> Optional[str]:
        if not self.has_test:
            return (f"{OWNER}: no test split (test_path={str(self.paths['test'] or '')!r} "
                    "is absent); run with test=false")
        return None

    def example_batch(self, n: int, split: str = "val") -> Dict[str, torch.Tensor]:
        """``n`` texts of a split as a batch, taken across the labels (dashboards)."""
        from attnflow.data.examples import spread_over_labels

        self.setup()
        data = self.splits[split]
        return collate_texts([data[i] for i in spread_over_labels(data.labels, n).tolist()])
