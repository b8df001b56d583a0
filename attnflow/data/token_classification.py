"""Tagged sentences as WordPiece ids ``[CLS] pieces [SEP]`` with one label per word on its first
piece, for fine-tuning BERT on token classification such as named-entity recognition (Devlin
et al. 2019, §4.3). ``token_classification`` reads CoNLL-style or JSON-lines files
(:mod:`attnflow.data.tagged`); ``synthetic_ner`` generates a tagged set
(:mod:`attnflow.data.synthetic_ner`). The tokenizer is the pretraining run's (``tokenizer_from``),
else trained on the training words; it is saved with the run, and the tags travel in its
checkpoints.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from torch.utils.data import DataLoader

from attnflow.config.registry import DATA, NonNegativeInt, PositiveInt, Range
from attnflow.data.base import Columns, FileDataModule, check_labels
from attnflow.data.corpus import PAD, SPECIALS, WordPieceData, run_tokenizer
from attnflow.data.errors import DataError
from attnflow.data.examples import example_indices
from attnflow.data.hf_datasets import DEFAULT_SPLITS, class_names, hf_source
from attnflow.data.synthetic_ner import TAGS, draw_splits
from attnflow.data.tagged import Tagged, collate_tagged, encode_tagged, read_tagged, tag_values
from attnflow.data.pretraining import DEFAULT_VOCAB
from attnflow.io.console import warn_unread

log = logging.getLogger(__name__)

OWNER = "data 'token_classification'"
MaxLen = Annotated[int, Range(ge=3, what="[CLS], a subword, [SEP]")]
VocabSize = Optional[Annotated[int, Range(ge=6, what="the 5 special tokens and more")]]


class TaggedDataModule(WordPieceData, FileDataModule):
    """What the file and the generated tagged data share (not registered): a subclass gives
    :meth:`sentences`. ``vocab_size`` (null: 30522) and ``lowercase`` (null: True) shape a
    tokenizer trained here, unread with ``tokenizer_from``; ``max_len`` counts [CLS] and [SEP]."""

    source_fields = ("train_path", "tags_field", "hf_dataset")

    interface = "token_classification"  # the bert model (head token), the token_classification task
    default_vocab = DEFAULT_VOCAB  # the WordPiece size of vocab_size null

    def __init__(self, *, tokenizer_from: Optional[str], vocab_size: Optional[int],
                 lowercase: Optional[bool], max_len: int, batch_size: int, bucket: bool,
                 num_workers: int, seed: int, labels: Optional[List[str]],
                 limits: Tuple[int, int] = (0, 0)):
        super().__init__()
        self.labels = check_labels(labels, self.owner)
        if self.labels is not None and not all(isinstance(t, str) for t in self.labels):
            raise ValueError(f"{self.owner}: labels={self.labels} must be tag strings (O, B-PER, ...)")
        for name, value in (("vocab_size", vocab_size), ("lowercase", lowercase)):
            if tokenizer_from and value is not None:
                warn_unread(f"{self.owner}: {name}={value}",
                            f"the tokenizer comes from tokenizer_from={tokenizer_from}")
        self.tokenizer_from = tokenizer_from or None
        self.vocab = vocab_size or self.default_vocab
        self.lowercase = True if lowercase is None else lowercase
        self.max_len, self.limits = max_len, {"train": limits[0], "val": limits[1], "test": 0}
        self.batch_size, self.bucket, self.num_workers = batch_size, bucket, num_workers
        self.seed = seed
        self.tokenizer = None
        self.rows: Dict[str, List[Tagged]] = {}
        self.tag_names: List[str] = []
        self.splits: Dict[str, Columns] = {}

    def sentences(self, split: str, tags: Optional[tuple], limit: int = 0) -> List[Tagged]:
        """The (words, tags) of ``split``; a tag not of ``tags`` (values, whence) is an error."""
        raise NotImplementedError

    def declared_tags(self) -> Optional[List[str]]:
        """The tags in the order the training data declares them (an HF ``ClassLabel`` list's
        names); None: the tags seen, sorted."""
        return None

    def read(self) -> None:
        """Every split's sentences and the tags (all now: a bad file fails before any work)."""
        if self.rows:
            return
        self.rows["train"] = self.sentences("train", self.classes(), self.limits["train"])
        self.tag_names = tag_values(self.rows["train"], self.labels if self.labels is not None
                                    else self.declared_tags())
        if len(self.tag_names) < 2:
            raise DataError(f"{self.owner}: the training sentences have one tag {self.tag_names}; "
                            f"token classification needs two")
        tags = self.classes(self.tag_names)
        self.rows["val"] = self.sentences("val", tags, self.limits["val"])
        if self.has_test:
            self.rows["test"] = self.sentences("test", tags)

    def class_list(self) -> list:
        self.read()
        return self.tag_names

    def training_texts(self) -> List[str]:
        self.read()
        return [" ".join(w) for w, _ in self.rows["train"]]

    def artifacts(self) -> dict:
        """What using the weights needs besides them (stored in checkpoints)."""
        self.setup()
        return {"tokenizer": self.tokenizer.to_str(),
                "specials": dict(zip(SPECIALS, range(len(SPECIALS)))),
                "class_names": list(self.tag_names), "label_values": list(self.tag_names),
                "max_len": self.max_len, **self.input_fields()}

    def input_fields(self) -> dict:
        """The fields naming an input's parts (JSON lines), for attnflow-predict."""
        return {}

    @classmethod
    def placeholder_context(cls, fields: Mapping[str, Any]) -> Optional[dict]:
        return {"vocab_size": fields["vocab_size"] or cls.default_vocab, "pad_id": PAD,
                "num_classes": len(fields.get("labels") or TAGS)}

    def _encode(self, split: str, rows: List[Tagged]) -> Columns:
        index = {t: i for i, t in enumerate(self.tag_names)}
        tag_ids = [np.array([index[t] for t in tags], np.int64) for _, tags in rows]
        ids, labels, cut = encode_tagged(self.tokenizer, [w for w, _ in rows], tag_ids, self.max_len)
        log.info("%s %s: %d sentences, %d words; %d sentences cut to max_len=%d subwords, %d words "
                 "left untagged", self.owner, split, len(rows), sum(len(t) for t in tag_ids),
                 sum(c > 0 for c in cut), self.max_len, sum(cut))
        return Columns(ids=ids, labels=labels)

    def setup_evaluation(self, run_dir, artifacts: dict, split: str) -> None:
        """The run's tokenizer and tags and ``split``'s sentences only (attnflow-eval): the
        training files need not be there."""
        self.tokenizer = run_tokenizer(run_dir, artifacts, self.owner)
        if "label_values" not in artifacts:
            raise ValueError(f"{self.owner}: the run's checkpoint carries no tags")
        self.tag_names = list(artifacts["label_values"])
        self.rows = {split: self.sentences(split, (self.tag_names, "the run's tags"))}
        self.splits[split] = self._encode(split, self.rows[split])  # (read() now reads nothing)

    def _loader(self, split: str, train: bool) -> DataLoader:
        self.setup()
        data = self.splits[split]
        return self._sized_loader(data, lambda: [len(i) for i in data.ids], self.collate, train)

    def example_batch(self, n: int, split: str = "val", ids: Optional[Sequence[int]] = None) -> dict:
        """The first ``n`` sentences of a split (or ``ids``) as a batch (dashboards)."""
        self.setup()
        data = self.splits[split]
        return self.collate([data[i] for i in example_indices(len(data), n, ids)])

    collate = staticmethod(collate_tagged)


@DATA.register("token_classification")
class TokenClassificationDataModule(TaggedDataModule):
    """Tagged sentences from CoNLL-style or JSON-lines files (:mod:`attnflow.data.tagged`), or an
    HF data set's splits (``hf_dataset``). The tags: ``labels`` (their order is the classifier's),
    else the names of an HF ``ClassLabel`` list, else the training file's sorted, ``O`` first;
    ``limit_*``: a random subset of sentences."""

    owner = OWNER

    def __init__(self, *, train_path: str = "", val_path: str = "", test_path: Optional[str] = "",
                 tokens_field: str = "tokens", tags_field: str = "tags",
                 tokenizer_from: Optional[str] = None, vocab_size: VocabSize = None,
                 lowercase: Optional[bool] = None, max_len: MaxLen = 128,
                 limit_train: NonNegativeInt = 0, limit_val: NonNegativeInt = 0,
                 batch_size: PositiveInt = 32, bucket: bool = True, num_workers: NonNegativeInt = 0,
                 seed: int = 1234, labels: Optional[List[str]] = None,
                 hf_dataset: Optional[str] = None, hf_config: Optional[str] = None,
                 hf_splits: List[Optional[str]] = DEFAULT_SPLITS):
        super().__init__(tokenizer_from=tokenizer_from, vocab_size=vocab_size, lowercase=lowercase,
                         max_len=max_len, batch_size=batch_size, bucket=bucket,
                         num_workers=num_workers, seed=seed, labels=labels,
                         limits=(limit_train, limit_val))
        self.set_paths("a CoNLL-style or .jsonl file", train_path, val_path, test_path,
                       hf_source(hf_dataset, hf_config, hf_splits, self.owner))
        self.tokens_field, self.tags_field = tokens_field, tags_field

    def declared_tags(self) -> Optional[List[str]]:
        return class_names(self.paths["train"], self.tags_field)

    def sentences(self, split: str, tags: Optional[tuple], limit: int = 0) -> List[Tagged]:
        return read_tagged(self.eval_path(split), self.owner, self.tokens_field, self.tags_field,
                           limit, self.seed, tags)

    def input_fields(self) -> dict:
        return {"tokens_field": self.tokens_field, "tags_field": self.tags_field}


@DATA.register("synthetic_ner")
class SyntheticNerDataModule(TaggedDataModule):
    """The generated NER set of :mod:`attnflow.data.synthetic_ner` (IOB2 tags of people, places
    and organisations); ``test_size=0``: no test split. ``vocab_size`` null: 200, a WordPiece
    vocabulary small enough that many names are split into pieces (about 2 a word)."""

    owner = "data 'synthetic_ner'"
    default_vocab = 200

    def __init__(self, *, train_size: PositiveInt = 2000, val_size: PositiveInt = 300,
                 test_size: NonNegativeInt = 300, tokenizer_from: Optional[str] = None,
                 vocab_size: VocabSize = None, lowercase: Optional[bool] = None,
                 max_len: MaxLen = 64, batch_size: PositiveInt = 32, bucket: bool = True,
                 num_workers: NonNegativeInt = 0, seed: int = 1234):
        super().__init__(tokenizer_from=tokenizer_from, vocab_size=vocab_size, lowercase=lowercase,
                         max_len=max_len, batch_size=batch_size, bucket=bucket,
                         num_workers=num_workers, seed=seed, labels=list(TAGS))
        self.sizes = (train_size, val_size, test_size)
        self.paths = {}

    @property
    def has_test(self) -> bool:
        return self.sizes[2] > 0

    def missing_test(self) -> Optional[str]:
        if self.has_test:
            return None
        return f"{self.owner}: data.test_size=0, so there is no test split; run with test=false"

    def sentences(self, split: str, tags: Optional[tuple], limit: int = 0) -> List[Tagged]:
        if split == "test" and not self.has_test:
            raise ValueError(self.missing_test())
        return list(draw_splits(self.sizes, self.seed)[split])
