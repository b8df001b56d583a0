"""Document classification from JSON-lines, CSV, TSV or Parquet files (:mod:`attnflow.data.tables`,
fields ``text_field`` and ``label_field``): hierarchical batches (documents × sentences ×
words) for the hierarchical attention network (Yang et al. 2016) and the flat models. Markup is
removed, sentences split after ``.!?``, words lower-cased, the vocabulary built on the training
split and documents capped at ``max_sentences`` × ``max_words``; labels become classes in sorted
order. The documents may be an HF data set's splits (``hf_dataset``), and the words a Hugging
Face tokenizer's pieces (``tokenizer_from=hf:…``, :class:`SubwordVocabulary`).
"""

from __future__ import annotations

import functools
import html
import json
import logging
import re
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
from tokenizers import Tokenizer
from torch.utils.data import DataLoader

from attnflow.data.base import Columns, FileDataModule, check_labels
from attnflow.data.hf_datasets import DEFAULT_SPLITS, hf_source
from attnflow.data.hf_tokenizers import check_target, load_hf_tokenizer
from attnflow.data.tables import read_table
from attnflow.data.word_vectors import WordVectorsConfig, train_word_vectors
from attnflow.config.registry import DATA, NonNegativeInt, PositiveInt, build_config

log = logging.getLogger(__name__)

PAD, UNK = 0, 1
SPECIALS = ["<pad>", "<unk>"]

_TAG = re.compile(r"</?[A-Za-z][^<>]{0,40}>")  # a tag starts with a letter: "<3", "a < b" are text
_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
_SENT = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"\w+(?:['’]\w+)?|[^\w\s]")  # Unicode words (naïve, café), contractions


def clean(text: str) -> str:
    """Line breaks to newlines, other markup removed, entities decoded, whitespace collapsed."""
    text = _BREAK.sub("\n", text)
    text = html.unescape(_TAG.sub(" ", text))
    return "\n".join(" ".join(line.split()) for line in text.split("\n"))


def split_sentences(text: str) -> List[str]:
    return [s for s in (p.strip() for p in _SENT.split(text)) if s]


def tokenize(text: str, lowercase: bool = True) -> List[List[str]]:
    """Cleaned sentences of words: ``[[w, ...], ...]``; empty sentences dropped."""
    out = []
    for sent in split_sentences(clean(text)):
        words = _WORD.findall(sent.lower() if lowercase else sent)
        if words:
            out.append(words)
    return out


class Vocabulary:
    """word ↔ id with ⟨pad⟩ = 0 and ⟨unk⟩ = 1."""

    def __init__(self, itos: Sequence[str], lowercase: bool = True):
        self.itos = list(itos)
        self.stoi = {w: i for i, w in enumerate(self.itos)}
        self.lowercase = lowercase

    @classmethod
    def build(cls, docs: Sequence[List[List[str]]], min_freq: int, max_size: int,
              lowercase: bool = True) -> "Vocabulary":
        counts: Counter = Counter()
        for doc in docs:
            for sent in doc:
                counts.update(sent)
        words = [w for w, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if c >= min_freq]
        if max_size > 0:
            words = words[: max(0, max_size - len(SPECIALS))]
        return cls(SPECIALS + words, lowercase)

    def __len__(self) -> int:
        return len(self.itos)

    def tokenize(self, text: str) -> List[List[str]]:
        """A text's sentences of this vocabulary's words (:func:`tokenize`)."""
        return tokenize(text, self.lowercase)

    def encode(self, doc: List[List[str]]) -> List[List[int]]:
        get = self.stoi.get
        return [[get(w, UNK) for w in sent] for sent in doc]

    def to_json(self) -> dict:
        return {"itos": self.itos, "lowercase": self.lowercase}

    @classmethod
    def from_json(cls, data: dict) -> "Vocabulary":
        """The vocabulary saved by :meth:`to_json` (a :class:`SubwordVocabulary` with its tokenizer)."""
        if data.get("tokenizer"):
            return SubwordVocabulary(Tokenizer.from_str(data["tokenizer"]))
        return cls(data["itos"], data.get("lowercase", True))


class SubwordVocabulary(Vocabulary):
    """A Hugging Face tokenizer's pieces as the words (``tokenizer_from=hf:…``): sentences split
    as :func:`tokenize` splits them, each into the tokenizer's pieces; its ⟨pad⟩ and ⟨unk⟩ at
    ids 0 and 1 (:func:`~attnflow.data.hf_tokenizers.load_hf_tokenizer`), its size the tokenizer's."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        super().__init__([tokenizer.id_to_token(i) for i in range(tokenizer.get_vocab_size())], False)

    @classmethod
    def load(cls, target: str, at: str) -> "SubwordVocabulary":
        return cls(load_hf_tokenizer(target, tuple(zip(("pad", "unk"), SPECIALS)), at))

    def tokenize(self, text: str) -> List[List[str]]:
        sentences = split_sentences(clean(text))
        encoded = self.tokenizer.encode_batch(sentences, add_special_tokens=False) if sentences else []
        return [e.tokens for e in encoded if e.tokens]

    def to_json(self) -> dict:
        return {"itos": self.itos, "tokenizer": self.tokenizer.to_str()}


def cap_document(doc: List[List[str]], max_sentences: int, max_words: int) -> List[List[str]]:
    """The first ``max_sentences`` sentences, each cut to ``max_words`` words (0 = no cap)."""
    doc = doc[:max_sentences] if max_sentences > 0 else doc
    return [s[:max_words] for s in doc] if max_words > 0 else list(doc)


def encode_documents(docs: Sequence[List[List[str]]], labels: Sequence[int], vocab: Vocabulary,
                     max_sentences: int, max_words: int) -> tuple:
    """Encode and cap: (Columns ids, sent_lens, labels; counts of what was cut)."""
    stats = Counter()
    ids_out, lens_out = [], []
    for doc in docs:
        kept = cap_document(doc, max_sentences, max_words)
        words, kept_words = sum(len(s) for s in doc), sum(len(s) for s in kept)
        stats.update(documents=1, sentences=len(doc), words=words, empty_documents=int(not doc),
                     sentences_cut=len(doc) - len(kept), words_cut=words - kept_words)
        enc = vocab.encode(kept)
        ids_out.append(np.fromiter((i for s in enc for i in s), dtype=np.int64))
        lens_out.append(np.array([len(s) for s in enc], dtype=np.int64))
    return Columns(ids=ids_out, sent_lens=lens_out, labels=list(labels)), dict(stats)


def collate_documents(items: Sequence[tuple]) -> Dict[str, torch.Tensor]:
    """Pad (ids, sentence lengths, label) triples into a hierarchical batch (one scatter of
    every word, no loop over sentences or words)."""
    B = len(items)
    doc_lengths = np.array([len(sl) for _, sl, _ in items], dtype=np.int64)
    all_lens = np.concatenate([sl for _, sl, _ in items]) if B else np.zeros(0, np.int64)
    S = max(1, int(doc_lengths.max()) if B else 1)
    W = max(1, int(all_lens.max()) if all_lens.size else 1)
    tokens = np.zeros((B, S, W), dtype=np.int64)
    sent_lengths = np.zeros((B, S), dtype=np.int64)
    if all_lens.size:
        doc_idx = np.repeat(np.arange(B), doc_lengths)                    # per sentence
        sent_idx = np.arange(all_lens.size) - np.repeat(np.cumsum(doc_lengths) - doc_lengths, doc_lengths)
        sent_lengths[doc_idx, sent_idx] = all_lens
        ids = np.concatenate([i for i, _, _ in items])
        w_doc = np.repeat(doc_idx, all_lens)
        w_sent = np.repeat(sent_idx, all_lens)
        w_pos = np.arange(ids.size) - np.repeat(np.cumsum(all_lens) - all_lens, all_lens)
        tokens[w_doc, w_sent, w_pos] = ids
    return {"tokens": torch.from_numpy(tokens), "sent_lengths": torch.from_numpy(sent_lengths),
            "doc_lengths": torch.from_numpy(doc_lengths),
            "labels": torch.tensor([y for _, _, y in items], dtype=torch.long)}


@DATA.register("documents")
class DocumentDataModule(FileDataModule):
    """Labelled documents as documents × sentences × words; ``max_vocab`` counts the specials
    (0: no cap); ``word_vectors``: null or :class:`~attnflow.data.word_vectors.WordVectorsConfig`
    fields, vectors from the training split that start the model's embedding; ``tokenizer_from``:
    ``hf:<dir|hub id>``, whose pieces are the words (``min_freq``, ``max_vocab`` and ``lowercase``
    then unread); ``hf_dataset``: an HF data set's splits in place of the files."""

    owner = "data 'documents'"
    interface = "documents"  # documents: han/self_attentive models, the classification task

    def __init__(self, *, train_path: str = "", val_path: str = "", test_path: Optional[str] = "",
                 text_field: str = "text", label_field: str = "label",
                 max_sentences: PositiveInt = 30, max_words: PositiveInt = 50,
                 min_freq: PositiveInt = 5, max_vocab: NonNegativeInt = 50000,
                 lowercase: bool = True, limit_train: NonNegativeInt = 0,
                 limit_val: NonNegativeInt = 0, batch_size: PositiveInt = 32, bucket: bool = True,
                 num_workers: NonNegativeInt = 0, seed: int = 1234,
                 word_vectors: Optional[Dict[str, Any]] = None, labels: Optional[List[Any]] = None,
                 tokenizer_from: Optional[str] = None, hf_dataset: Optional[str] = None,
                 hf_config: Optional[str] = None, hf_splits: List[Optional[str]] = DEFAULT_SPLITS):
        super().__init__()
        self.labels = check_labels(labels, self.owner)
        self.word_vectors_cfg = self.word_vectors_config(word_vectors)
        self._word_vectors: Optional[torch.Tensor] = None
        self.set_paths("a .jsonl, .csv, .tsv or .parquet file", train_path, val_path, test_path,
                       hf_source(hf_dataset, hf_config, hf_splits, self.owner))
        self.tokenizer_from = check_target(tokenizer_from, f"{self.owner}: tokenizer_from")
        self.text_field, self.label_field = text_field, label_field
        self.max_sentences, self.max_words = max_sentences, max_words
        self.min_freq, self.max_vocab, self.lowercase = min_freq, max_vocab, lowercase
        self.limits = {"train": limit_train, "val": limit_val, "test": 0}
        self.batch_size, self.bucket, self.num_workers, self.seed = batch_size, bucket, num_workers, seed
        self.vocab: Optional[Vocabulary] = None
        self.label_values: List = []
        self.splits: Dict[str, Columns] = {}
        self.stats: Dict[str, dict] = {}

    @staticmethod
    def word_vectors_config(value: Any, path: str = "data.word_vectors"):
        """``data.word_vectors`` as a WordVectorsConfig (None when off), checked by the registry."""
        if value is None:
            return None
        return build_config(WordVectorsConfig, value, path, "data 'documents' word_vectors config")

    def train_word_vectors(self) -> torch.Tensor:
        """(V, dim) vectors from the training split's capped sentences, computed once."""
        if self._word_vectors is None:
            train = self.splits["train"]
            ids = np.concatenate(train.ids) if len(train) else np.zeros(0, np.int64)
            lengths = np.concatenate(train.sent_lens) if len(train) else np.zeros(0, np.int64)
            self._word_vectors = train_word_vectors(ids, lengths, len(self.vocab),
                                                    self.word_vectors_cfg, PAD)
        return self._word_vectors

    @classmethod
    def longest_source_positions(cls, fields: Mapping[str, Any]) -> Tuple[int, str]:
        """The most positions a flat model's encoder is given, and why."""
        n, w = fields["max_sentences"], fields["max_words"]
        return n * w, f"{{at}}max_sentences={n} × {{at}}max_words={w} words of a document"

    @classmethod
    def placeholder_context(cls, fields: Mapping[str, Any]) -> Optional[dict]:
        ctx = {"vocab_size": 1000, "num_classes": 2, "pad_id": PAD}
        if fields.get("word_vectors"):  # the model refuses a dim other than its embed_dim
            ctx["word_vectors"] = torch.empty(
                1000, cls.word_vectors_config(fields["word_vectors"]).dim, device="meta")
        return ctx

    def model_context(self) -> dict:
        """Sizes, and ``word_vectors`` when set and the training split is read."""
        self.setup()
        ctx = {"vocab_size": len(self.vocab), "num_classes": len(self.label_values), "pad_id": PAD}
        if self.word_vectors_cfg is not None and "train" in self.splits:
            ctx["word_vectors"] = self.train_word_vectors()
        return ctx

    def task_context(self) -> dict:
        self.setup()
        return {"num_classes": len(self.label_values),
                "class_names": [str(v) for v in self.label_values], "itos": self.vocab.itos}

    def label_names(self) -> List[str]:
        self.setup()
        return [str(v) for v in self.label_values]

    def artifacts(self) -> dict:
        """What prediction needs besides the weights: vocabulary, labels, tokenisation caps."""
        self.setup()
        return {"vocab": self.vocab.to_json(), "class_names": [str(v) for v in self.label_values],
                "label_values": self.label_values, "label_field": self.label_field,
                "text_field": self.text_field, "max_sentences": self.max_sentences, "max_words": self.max_words}

    def save_artifacts(self, run_dir) -> Path:
        path = Path(run_dir) / "vocab.json"
        path.write_text(json.dumps(self.artifacts()))
        return path

    def setup_evaluation(self, run_dir, artifacts: dict, split: str) -> None:
        """The run's vocabulary and classes and ``split``'s file only (attnflow-eval)."""
        path = self.eval_path(split)
        if not artifacts.get("vocab"):
            raise ValueError(f"data 'documents': the run has no vocabulary ({Path(run_dir) / 'vocab.json'} "
                             f"is missing and its checkpoint carries none)")
        self.vocab = Vocabulary.from_json(artifacts["vocab"])
        self.label_values = list(artifacts["label_values"])
        rows = read_table(path, self.text_field, self.label_field,
                          classes=(self.label_values, "the run's classes"))
        self._encode(split, rows, [self.vocab.tokenize(t) for t, _ in rows])

    def text_batch(self, lines: Sequence[str]) -> Dict[str, torch.Tensor]:
        """Texts of your own, tokenised and capped as the run's documents; no label (-1)."""
        batch, _ = encode_texts(lines, self.vocab, self.max_sentences, self.max_words)
        return {**batch, "labels": torch.full((len(lines),), -1, dtype=torch.long)}

    def _encode(self, split: str, rows: List[tuple], tokenized: List) -> None:
        labels = self.label_ids([y for _, y in rows], self.label_values)
        self.splits[split], self.stats[split] = encode_documents(
            tokenized, labels, self.vocab, self.max_sentences, self.max_words)

    def setup(self, stage: Optional[str] = None) -> None:
        if self.splits:
            return
        read = functools.partial(read_table, text_field=self.text_field, label_field=self.label_field)
        rows = {"train": read(self.paths["train"], limit=self.limits["train"], seed=self.seed,
                              classes=self.classes())}
        self.label_values = self.class_values(rows["train"], self.labels, self.label_field)
        classes = self.classes(self.label_values)
        rows["val"] = read(self.paths["val"], limit=self.limits["val"], seed=self.seed, classes=classes)
        if self.has_test:
            rows["test"] = read(self.paths["test"], classes=classes)
        elif self.paths["test"] is not None:
            log.info("data 'documents': no test split (%s is absent)", self.paths["test"])
        given = (SubwordVocabulary.load(self.tokenizer_from, f"{self.owner}: tokenizer_from")
                 if self.tokenizer_from else None)
        split_words = given.tokenize if given else functools.partial(tokenize, lowercase=self.lowercase)
        tokenized = {s: [split_words(t) for t, _ in r] for s, r in rows.items()}
        self.vocab = given or Vocabulary.build(tokenized["train"], self.min_freq, self.max_vocab,
                                               self.lowercase)
        for s, r in rows.items():
            self._encode(s, r, tokenized[s])
            st = self.stats[s]
            log.info("data 'documents' %s: %d documents (%d empty); cut %d of %d sentences "
                     "(max_sentences=%d) and %d of %d words (max_words=%d)", s, st["documents"],
                     st.get("empty_documents", 0), st.get("sentences_cut", 0), st["sentences"],
                     self.max_sentences, st.get("words_cut", 0), st["words"], self.max_words)
        log.info("data 'documents': vocabulary %d words, %d classes %s", len(self.vocab),
                 len(self.label_values), self.label_values)

    def _loader(self, split: str, train: bool) -> DataLoader:
        self.setup()
        data = self.splits[split]
        return self._sized_loader(  # sentences, then the longest sentence: similar shapes together
            data, lambda: [len(sl) * 1000 + (int(sl.max()) if len(sl) else 0) for sl in data.sent_lens],
            self.collate, train)

    collate = staticmethod(collate_documents)


def encode_texts(texts: Sequence[str], vocab: Vocabulary, max_sentences: int, max_words: int):
    """(batch, tokenised documents as shown) for raw texts at prediction time."""
    docs = [vocab.tokenize(t) for t in texts]
    enc, _ = encode_documents(docs, [0] * len(docs), vocab, max_sentences, max_words)
    shown = [cap_document(d, max_sentences, max_words) for d in docs]
    return collate_documents([enc[i] for i in range(len(enc))]), shown
