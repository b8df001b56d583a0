"""BERT pretraining data (Devlin et al. 2019, §3.1, §A.1–A.2): sentence pairs with masked-LM and
next-sentence labels. Instances as the authors' ``create_pretraining_data.py`` makes them: a
document's sentences packed into chunks of up to ``max_len - 3`` subwords (shorter with
probability ``short_seq_prob``), cut at a random sentence boundary into A and B; with probability
½ B comes from another document (``nsp_labels`` 1). Masking is drawn anew for every training
batch (dynamic, Liu et al. 2019) and seeded by the instances in evaluation.
"""

from __future__ import annotations

import logging
import random
from typing import Annotated, Any, Dict, List, Literal, Mapping, Optional, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader

from attnflow.data.base import Columns, FileDataModule, eval_sampler
from attnflow.data.buckets import BucketBatchSampler
from attnflow.data.corpus import (CLS, MASK, PAD, SEP, SPECIALS, WordPieceData, read_documents,
                                  run_tokenizer, sentences_of)
from attnflow.data.documents import clean
from attnflow.data.errors import DataError
from attnflow.data.examples import example_indices
from attnflow.data.hf_datasets import DEFAULT_SPLITS, hf_source
from attnflow.data.resumable import ResumableDataLoader
from attnflow.config.registry import DATA, NonNegativeInt, PositiveInt, Probability, Range
from attnflow.io.console import warn_unread

log = logging.getLogger(__name__)

OWNER = "data 'bert_pretraining'"
DEFAULT_VOCAB = 30522  # BERT's WordPiece size, when a tokenizer is trained here
IGNORE = -100  # the label CrossEntropyLoss ignores (its ignore_index default, HF's convention)


def _truncate_pair(a: list, b: list, max_tokens: int, rng: random.Random) -> None:
    """Cut the longer segment at a random end until the pair fits (the authors' truncate_seq_pair)."""
    while len(a) + len(b) > max_tokens:
        longer = a if len(a) > len(b) else b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def make_instances(docs: Sequence[Sequence[np.ndarray]], max_len: int, short_seq_prob: float,
                   seed: int) -> List[tuple]:
    """``(tokens A, tokens B, nsp label, document, B's document)`` from documents given as lists
    of sentence id arrays (module docstring)."""
    rng = random.Random(seed)
    max_tokens = max_len - 3  # [CLS] A [SEP] B [SEP]
    if len(docs) < 2:
        raise DataError(f"{OWNER}: next-sentence prediction needs at least 2 documents "
                        f"(random second segments come from another document); got {len(docs)}")
    out = []
    for d, doc in enumerate(docs):
        target = rng.randint(2, max_tokens) if rng.random() < short_seq_prob else max_tokens
        chunk, length, i = [], 0, 0
        while i < len(doc):
            chunk.append(doc[i])
            length += len(doc[i])
            if i == len(doc) - 1 or length >= target:
                random_next = rng.random() < 0.5
                if length < 2:  # a one-token document: no pair of spans (either label)
                    chunk, length, i = [], 0, i + 1
                    continue
                if len(chunk) >= 2:
                    cut = rng.randint(1, len(chunk) - 1)
                    a = [t for s in chunk[:cut] for t in s.tolist()]
                    b = [t for s in chunk[cut:] for t in s.tolist()]
                else:  # one sentence: a true continuation is its own second part
                    ids = chunk[0].tolist()
                    cut = len(ids) if random_next else rng.randint(1, len(ids) - 1)
                    a, b = ids[:cut], ids[cut:]
                b_doc = d
                if random_next:
                    b_doc = rng.randrange(len(docs) - 1)
                    b_doc += b_doc >= d  # any other document
                    other = docs[b_doc]
                    b, want = [], max(1, target - len(a))
                    for s in other[rng.randrange(len(other)):]:
                        b.extend(s.tolist())
                        if len(b) >= want:
                            break
                    if len(chunk) >= 2:  # the unused true continuation goes back to the document
                        i -= len(chunk) - cut
                if a and b:
                    _truncate_pair(a, b, max_tokens, rng)
                    out.append((np.asarray(a, np.int64), np.asarray(b, np.int64), int(random_next), d, b_doc))
                target = rng.randint(2, max_tokens) if rng.random() < short_seq_prob else max_tokens
                chunk, length = [], 0
            i += 1
    return out


def pad_rows(rows: Sequence[np.ndarray], fill: int = PAD) -> tuple:
    """(ids (B, T) int64, rows left-aligned and ``fill`` after; real (B, T) bool), T the longest
    row (1 for no rows)."""
    lens = np.array([len(r) for r in rows], dtype=np.int64)
    real = np.arange(int(lens.max()) if len(rows) else 1)[None, :] < lens[:, None]
    ids = np.full(real.shape, fill, np.int64)
    if len(rows):
        ids[real] = np.concatenate(rows)  # row-major: each row's tokens in order
    return ids, real


def pack_pairs(items: Sequence[tuple]) -> Dict[str, torch.Tensor]:
    """``[CLS] A [SEP] B [SEP]`` rows, segment ids, attention mask and NSP labels (no masking)."""
    ids, attention = pad_rows([np.concatenate(([CLS], a, [SEP], b, [SEP])) for _, a, b, _ in items])
    pos = np.arange(ids.shape[1])
    len_a = np.array([len(a) for _, a, _, _ in items])
    segments = (pos[None, :] > (len_a + 1)[:, None]) & attention  # after the first [SEP]
    return {"input_ids": torch.from_numpy(ids), "segment_ids": torch.from_numpy(segments.astype(np.int64)),
            "attention_mask": torch.from_numpy(attention),
            "nsp_labels": torch.tensor([y for _, _, _, y in items], dtype=torch.long),
            "idx": torch.tensor([j for j, _, _, _ in items], dtype=torch.long)}


def mask_tokens(input_ids: torch.Tensor, attention_mask: torch.Tensor, vocab_size: int,
                mlm_prob: float = 0.15, generator: Optional[torch.Generator] = None):
    """BERT's masking (Devlin et al. 2019 §3.1): ``(masked input ids, mlm labels)``. Per sequence
    ``max(1, round(mlm_prob · n))`` of its n non-special tokens are selected uniformly; of those
    80% → ``[MASK]``, 10% → a random non-special id, 10% unchanged."""
    eligible = attention_mask & (input_ids >= len(SPECIALS))
    n = eligible.sum(1, keepdim=True)
    k = torch.where(n > 0, torch.clamp(torch.floor(mlm_prob * n + 0.5), min=1), torch.zeros_like(n))
    scores = torch.rand(input_ids.shape, generator=generator).masked_fill(~eligible, 2.0)
    rank = scores.argsort(1).argsort(1)  # 0 = smallest score; ineligible positions rank last
    selected = eligible & (rank < k)
    labels = torch.where(selected, input_ids, torch.full_like(input_ids, IGNORE))
    u = torch.rand(input_ids.shape, generator=generator)
    random_ids = torch.randint(len(SPECIALS), vocab_size, input_ids.shape, generator=generator)
    out = torch.where(selected & (u < 0.8), torch.full_like(input_ids, MASK), input_ids)
    out = torch.where(selected & (u >= 0.8) & (u < 0.9), random_ids, out)
    return out, labels


class MaskingCollate:
    """Collate pairs and mask them: training batches with the global generator (fresh masks every
    batch), evaluation batches with one seeded by the batch's instances (the same every time)."""

    def __init__(self, vocab_size: int, mlm_prob: float, dynamic: bool, seed: int = 0):
        self.vocab_size, self.mlm_prob, self.dynamic, self.seed = vocab_size, mlm_prob, dynamic, seed

    def __call__(self, items: Sequence[tuple]) -> Dict[str, torch.Tensor]:
        batch = pack_pairs(items)
        gen = None
        if not self.dynamic:
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + int(batch["idx"].sum()) * 7919
                                                + int(batch["idx"][0]))
        batch["input_ids"], batch["mlm_labels"] = mask_tokens(
            batch["input_ids"], batch["attention_mask"], self.vocab_size, self.mlm_prob, gen)
        return batch


@DATA.register("bert_pretraining")
class PretrainingDataModule(WordPieceData, FileDataModule):
    """Masked-LM + next-sentence pairs from a ``.txt`` or ``.jsonl`` corpus (module docstring);
    ``documents``: one per 'line' or 'blank_line'-separated in ``.txt`` files; ``max_len`` counts
    the specials (128: §A.2's first phase); ``limit_*``: a random subset of N documents;
    ``hf_dataset``: an HF data set's splits in place of the files (its ``text_field``)."""

    owner = OWNER
    interface = "pretraining"  # unlabelled text: the bert model, the bert_pretraining task

    def __init__(self, *, train_path: str = "", val_path: str = "", test_path: Optional[str] = "",
                 text_field: str = "text", documents: Literal["line", "blank_line"] = "line",
                 tokenizer_from: Optional[str] = None,
                 vocab_size: Optional[Annotated[int, Range(ge=6, what="the 5 special tokens and more")]] = None,
                 lowercase: Optional[bool] = None,
                 max_len: Annotated[int, Range(ge=5, what="3 specials and two segments")] = 128,
                 short_seq_prob: Probability = 0.1,
                 mlm_prob: Annotated[float, Range(gt=0, lt=1)] = 0.15,
                 limit_train: NonNegativeInt = 0, limit_val: NonNegativeInt = 0,
                 batch_size: PositiveInt = 32, num_workers: NonNegativeInt = 0, seed: int = 1234,
                 hf_dataset: Optional[str] = None, hf_config: Optional[str] = None,
                 hf_splits: List[Optional[str]] = DEFAULT_SPLITS):
        super().__init__()
        self.set_paths("a .txt or .jsonl corpus file", train_path, val_path, test_path,
                       hf_source(hf_dataset, hf_config, hf_splits, OWNER))
        self.text_field, self.documents = text_field, documents
        for name, value in (("vocab_size", vocab_size), ("lowercase", lowercase)):
            if tokenizer_from and value is not None:
                warn_unread(f"{OWNER}: {name}={value}", f"the tokenizer comes from tokenizer_from={tokenizer_from}")
        self.tokenizer_from = tokenizer_from or None
        self.vocab, self.max_len = vocab_size or DEFAULT_VOCAB, max_len
        self.lowercase = True if lowercase is None else lowercase
        self.short_seq_prob, self.mlm_prob = short_seq_prob, mlm_prob
        self.limits = {"train": limit_train, "val": limit_val, "test": 0}
        self.batch_size, self.num_workers, self.seed = batch_size, num_workers, seed
        self.tokenizer = None
        self.texts: Dict[str, List[str]] = {}
        self.splits: Dict[str, Columns] = {}  # (index, A ids, B ids, nsp label) items

    def split_texts(self, split: str) -> List[str]:
        if split not in self.texts:
            self.texts[split] = read_documents(self.paths[split], self.text_field, self.documents,
                                               self.limits[split], self.seed)
        return self.texts[split]

    def reads(self, split: str) -> bool:
        """Whether ``split`` is read: a file is named for it, or its HF data set's split is named
        (a test split the data set lacks: none)."""
        source = self.paths[split]
        return source is not None and (split != "test" or self.hf is None or self.has_test)

    def training_texts(self) -> List[str]:
        """The training texts, every split read first: a missing or broken file fails now."""
        for split in ("val", "test"):
            if self.reads(split):
                self.split_texts(split)
        return [clean(t) for t in self.split_texts("train")]

    def artifacts(self) -> dict:
        """What using the weights needs besides them (stored in checkpoints)."""
        self.prepare_tokenizer()
        return {"tokenizer": self.tokenizer.to_str(), "specials": dict(zip(SPECIALS, range(len(SPECIALS)))),
                "lowercase": self.lowercase, "max_len": self.max_len}

    @property
    def vocab_size(self) -> int:
        self.prepare_tokenizer()
        return self.tokenizer.get_vocab_size()

    @classmethod
    def placeholder_context(cls, fields: Mapping[str, Any]) -> Optional[dict]:
        return {"vocab_size": fields["vocab_size"] or DEFAULT_VOCAB, "pad_id": PAD}

    def model_context(self) -> dict:
        return {"vocab_size": self.vocab_size, "pad_id": PAD}

    def label_names(self) -> None:
        return None  # (unlabelled text)

    def task_context(self) -> dict:
        self.prepare_tokenizer()
        return {"mask_id": MASK, "itos": [self.tokenizer.id_to_token(i) for i in range(self.vocab_size)]}

    def encode_documents(self, texts: Sequence[str]) -> List[List[np.ndarray]]:
        """Documents → lists of sentence id arrays (one ``encode_batch`` over all sentences)."""
        self.prepare_tokenizer()
        sents = [sentences_of(t) for t in texts]
        flat = [s for doc in sents for s in doc]
        ids = [np.asarray(e.ids, np.int64) for e in self.tokenizer.encode_batch(flat, add_special_tokens=False)]
        out, start = [], 0
        for doc in sents:
            out.append([x for x in ids[start : start + len(doc)] if len(x)])
            start += len(doc)
        return [d for d in out if d]

    def make_split(self, split: str) -> Columns:
        docs = self.encode_documents(self.split_texts(split))
        offset = {"train": 0, "val": 1, "test": 2}[split]
        pairs = make_instances(docs, self.max_len, self.short_seq_prob, self.seed * 3 + offset)
        if not pairs:
            raise DataError(f"{OWNER}: {self.paths[split]} gives no sentence pairs")
        log.info("%s %s: %d documents, %d instances (%.1f%% random next)", OWNER, split, len(docs),
                 len(pairs), 100 * np.mean([p[2] for p in pairs]))
        return Columns(idx=list(range(len(pairs))), a=[p[0] for p in pairs],
                       b=[p[1] for p in pairs], nsp=[p[2] for p in pairs])

    def setup(self, stage: Optional[str] = None) -> None:
        self.prepare_tokenizer()
        for split in ("train", "val", "test"):
            if split not in self.splits and self.reads(split):
                self.splits[split] = self.make_split(split)

    def setup_evaluation(self, run_dir, artifacts: dict, split: str) -> None:
        """The run's tokenizer and ``split``'s file only (attnflow-eval)."""
        self.eval_path(split)
        self.tokenizer = run_tokenizer(run_dir, artifacts, OWNER)
        self.splits[split] = self.make_split(split)

    def collate(self, train: bool) -> MaskingCollate:
        return MaskingCollate(self.vocab_size, self.mlm_prob, dynamic=train, seed=self.seed)

    def _loader(self, split: str, train: bool) -> DataLoader:
        self.setup()
        data = self.splits[split]
        if not train and eval_sampler(data) is not None:  # DDP evaluation: each instance once
            return DataLoader(data, batch_size=self.batch_size, sampler=eval_sampler(data),
                              collate_fn=self.collate(False), num_workers=self.num_workers)
        if train:  # plain shuffling, not length buckets: full-length instances are mostly random
            # next (a document's last true pair is short), so buckets would skew NSP per batch
            return ResumableDataLoader(data, batch_size=self.batch_size, shuffle=True,
                                       collate_fn=self.collate(True), num_workers=self.num_workers)
        sizes = [len(a) + len(b) for a, b in zip(data.a, data.b)]
        sampler = BucketBatchSampler(sizes, self.batch_size, False, self.seed)
        return DataLoader(data, batch_sampler=sampler, collate_fn=self.collate(False),
                          num_workers=self.num_workers)

    def example_batch(self, n: int, split: str = "val",
                      ids: Optional[Sequence[int]] = None) -> Dict[str, torch.Tensor]:
        """The first ``n`` instances of a split (or ``ids``), masked as in evaluation (dashboards)."""
        self.setup()
        data = self.splits[split]
        return self.collate(False)([data[i] for i in example_indices(len(data), n, ids)])
