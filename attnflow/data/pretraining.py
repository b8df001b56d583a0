"""BERT pretraining data: sentence-pair instances with masked-language-model and next-sentence
labels (Devlin et al. 2019, "BERT", §3.1 and §A.1–A.2).

Corpus. ``.jsonl`` / ``.jsonl.gz`` files with a text field (IMDB: ``text``), or ``.txt`` /
``.txt.gz`` files holding one document per line (``documents=line``) or documents separated by
blank lines (``documents=blank_line``). Markup is removed as for the document classifiers
(``<br />`` becomes a sentence break, other tags are dropped: :func:`attnflow.data.documents.clean`)
and documents are split into sentences with the same splitter. A file that is missing, empty,
cut short or not UTF-8 raises :class:`~attnflow.data.errors.DataError` naming the file (and line).

Tokenizer. WordPiece (HF ``tokenizers``, the normaliser and pre-tokeniser of
:mod:`attnflow.data.parallel`), trained on the training texts only and saved as
``<run_dir>/tokenizer/wordpiece.json`` (read back from there when present: resume, evaluation).
Ids 0 ``[PAD]``, 1 ``[UNK]``, 2 ``[CLS]``, 3 ``[SEP]``, 4 ``[MASK]``, as in HF's BERT vocabularies
by name.

Instances (§A.2, as the authors' ``create_pretraining_data.py``): the sentences of a document are
packed, in order, into a chunk of up to ``max_len - 3`` subwords (shorter with probability
``short_seq_prob``); the chunk is cut at a random sentence boundary into segment A and the rest,
B (a chunk of one sentence is cut inside it). With probability ½ B is replaced by consecutive
sentences of another, random document (``nsp_labels`` 1; the unused sentences of the chunk go back
to the document), else B is the true continuation (``nsp_labels`` 0, HF's
``next_sentence_label``). A pair longer than ``max_len - 3`` loses subwords of its longer segment
at a random end. Instances are made once per split at ``setup`` (seeded); masking is not: it is
drawn anew for every training batch in :class:`MaskingCollate` (dynamic masking, Liu et al. 2019).

Masking (§3.1, §A.1): of each sequence's non-special, non-padding tokens, ``round(0.15 n)`` (at
least 1) are selected uniformly; of those 80% become ``[MASK]``, 10% a random non-special token,
10% stay. ``mlm_labels`` holds the original id at the selected positions, -100 elsewhere.
Validation and test batches are masked with a generator seeded by the batch's instances, so every
evaluation scores the same masks.

Batch: ``input_ids`` (B, T) ``[CLS] A [SEP] B [SEP]`` then padding, ``segment_ids`` (0 for
``[CLS]``, A and the first ``[SEP]``; 1 for B and the second ``[SEP]``; 0 at padding),
``attention_mask`` (B, T) bool, ``mlm_labels`` (B, T), ``nsp_labels`` (B,), ``idx`` (B,).
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Annotated, Any, Dict, List, Literal, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
from torch.utils.data import DataLoader

from attnflow.data.base import SplitDataModule
from attnflow.data.buckets import BucketBatchSampler
from attnflow.data.corpus import (CLS, MASK, PAD, SEP, SPECIALS, TOKENIZER_FILE, read_documents, save_tokenizer, sentences_of, train_wordpiece)
from attnflow.data.documents import clean
from attnflow.data.errors import DataError
from attnflow.data.sampling import eval_sampler
from attnflow.config.registry import DATA, NonNegativeInt, PositiveInt, Probability, Range

log = logging.getLogger(__name__)

OWNER = "data 'bert_pretraining'"
IGNORE = -100  # the label CrossEntropyLoss ignores (its ignore_index default, HF's convention)


# -- instances (Devlin et al. 2019 §A.2) -------------------------------------------------------------
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
    """``(tokens A, tokens B, nsp label, document, B's document)`` pairs from documents given as
    lists of sentence id arrays (see the module docstring). Loops over sentences, not tokens."""
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


# -- batches ---------------------------------------------------------------------------------------
def pad_rows(rows: Sequence[np.ndarray], fill: int = PAD) -> tuple:
    """(ids (B, T) int64: the rows left-aligned, ``fill`` after each row's end; real (B, T) bool:
    the positions a row has), T the longest row (1 for no rows): one scatter, no loop over
    tokens. The batches of pretraining, fine-tuning and ``attnflow-predict`` are padded here."""
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
    """BERT's masking (Devlin et al. 2019 §3.1): ``(masked input ids, mlm labels)``.

    Per sequence ``max(1, round(mlm_prob · n))`` of its n eligible tokens (not special, not
    padding) are selected uniformly (the rank of a random score among the eligible positions);
    of those 80% → ``[MASK]``, 10% → a uniformly random non-special id, 10% unchanged."""
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
    """Collate pairs and mask them: training batches with the global torch generator (fresh masks
    every batch and epoch, reproducible under ``seed``, restored on resume), evaluation batches
    with a generator seeded by the batch's instances (the same masks at every evaluation)."""

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


class Instances(torch.utils.data.Dataset):
    """Instances as ``(index, A ids, B ids, nsp label)``; ``pairs`` also keeps each instance's
    source documents (A's, B's) for checks."""

    def __init__(self, pairs: Sequence[tuple]):
        self.pairs = list(pairs)

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int):
        a, b, y = self.pairs[i][:3]
        return i, a, b, y

    def sizes(self) -> List[int]:
        return [len(p[0]) + len(p[1]) for p in self.pairs]


@DATA.register("bert_pretraining")
class PretrainingDataModule(SplitDataModule):
    """Masked-LM + next-sentence pairs from a plain-text or JSON-lines corpus (module docstring).

    Args:
        train_path, val_path: corpus files, ``.txt`` or ``.jsonl`` (``.gz`` allowed)
            (default '': required).
        test_path: optional test corpus; '' = no test split (default '').
        text_field: the text field of JSON-lines files (default 'text').
        documents: in ``.txt`` files, one document per 'line' or 'blank_line'-separated
            (default 'line').
        vocab_size: WordPiece vocabulary size including the 5 specials (default 30522, BERT's).
        lowercase: lower-case before tokenising (default True, as bert-base-uncased).
        max_len: longest instance in subwords, specials included (default 128, §A.2's first phase).
        short_seq_prob: probability of a shorter random target length (default 0.1, §A.2).
        mlm_prob: the fraction of tokens selected for MLM (default 0.15).
        limit_train, limit_val: use only N documents, a random subset drawn with ``seed``, 0 = all
            (default 0).
        batch_size: instances per batch (default 32).
        num_workers: DataLoader workers (default 0).
        seed: instance creation, shuffling and evaluation-masking seed (default 1234).
    """

    # evaluation loads the run's tokenizer (setup_evaluation; its vocabulary, its lower-casing)
    # and reads only the evaluated split: these shape the training data and the tokenizer only
    interface = "pretraining"  # unlabelled text: the bert model, the bert_pretraining task

    def __init__(self, *, train_path: str = "", val_path: str = "", test_path: str = "",
                 text_field: str = "text", documents: Literal["line", "blank_line"] = "line",
                 vocab_size: Annotated[int, Range(ge=6, what="the 5 special tokens and more")] = 30522,
                 lowercase: bool = True,
                 max_len: Annotated[int, Range(ge=5, what="3 specials and two segments")] = 128,
                 short_seq_prob: Probability = 0.1,
                 mlm_prob: Annotated[float, Range(gt=0, lt=1)] = 0.15,
                 limit_train: NonNegativeInt = 0,
                 limit_val: NonNegativeInt = 0, batch_size: PositiveInt = 32,
                 num_workers: NonNegativeInt = 0, seed: int = 1234):
        super().__init__()
        for name, value in (("train_path", train_path), ("val_path", val_path)):
            if not value:
                raise ValueError(f"{OWNER}: '{name}' is required (a .txt or .jsonl corpus file)")
        self.paths = {"train": Path(train_path), "val": Path(val_path),
                      "test": Path(test_path) if test_path else None}
        self.text_field, self.documents = text_field, documents
        self.vocab, self.lowercase, self.max_len = vocab_size, lowercase, max_len
        self.short_seq_prob, self.mlm_prob = short_seq_prob, mlm_prob
        self.limits = {"train": limit_train, "val": limit_val, "test": 0}
        self.batch_size, self.num_workers, self.seed = batch_size, num_workers, seed
        self.run_dir: Optional[Path] = None
        self.tokenizer = None
        self.texts: Dict[str, List[str]] = {}
        self.splits: Dict[str, Instances] = {}

    # -- run directory and tokenizer -------------------------------------------------------------
    def set_run_dir(self, run_dir) -> None:
        """Where the tokenizer is saved (``<run_dir>/tokenizer/``), and loaded from if there."""
        self.run_dir = Path(run_dir)

    def split_texts(self, split: str) -> List[str]:
        if split not in self.texts:
            self.texts[split] = read_documents(self.paths[split], self.text_field, self.documents,
                                               self.limits[split], self.seed)
        return self.texts[split]

    def prepare_tokenizer(self) -> None:
        """Load the run's tokenizer if saved, else train it on the training texts (and save)."""
        if self.tokenizer is not None:
            return
        folder = self.run_dir / "tokenizer" if self.run_dir else None
        if folder and (folder / TOKENIZER_FILE).is_file():
            from tokenizers import Tokenizer

            self.tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
            return
        train = self.split_texts("train")
        for split in ("val", "test"):  # a missing or broken file fails now, before any work
            if self.paths[split] is not None:
                self.split_texts(split)
        self.tokenizer = train_wordpiece([clean(t) for t in train], self.vocab, self.lowercase)
        if folder:
            self.save_artifacts(self.run_dir)

    def save_artifacts(self, run_dir) -> Path:
        """The tokenizer with the run (:func:`save_tokenizer`)."""
        self.prepare_tokenizer()
        return save_tokenizer(self.tokenizer, run_dir)

    def artifacts(self) -> dict:
        """What using the weights needs besides them (stored in checkpoints): the tokenizer as
        JSON text and the special ids."""
        self.prepare_tokenizer()
        return {"tokenizer": self.tokenizer.to_str(), "specials": dict(zip(SPECIALS, range(len(SPECIALS)))),
                "lowercase": self.lowercase, "max_len": self.max_len}

    # -- what models and tasks need ----------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        self.prepare_tokenizer()
        return self.tokenizer.get_vocab_size()

    @classmethod
    def longest_positions(cls, fields: Mapping[str, Any]) -> Tuple[int, str]:
        """The most positions a model is given (an instance's specials included), and why
        (``{at}``: the data config's path); the models' config checks compare it with theirs."""
        return fields["max_len"], f"{{at}}max_len={fields['max_len']}"

    @classmethod
    def placeholder_context(cls, fields: Mapping[str, Any]) -> Optional[dict]:
        """:meth:`model_context` with stand-in sizes (:func:`attnflow.training.validate.check_model_builds`)."""
        return {"vocab_size": fields["vocab_size"], "pad_id": PAD}

    def model_context(self) -> dict:
        return {"vocab_size": self.vocab_size, "pad_id": PAD}

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

    # -- data --------------------------------------------------------------------------------------
    def make_split(self, split: str) -> Instances:
        docs = self.encode_documents(self.split_texts(split))
        offset = {"train": 0, "val": 1, "test": 2}[split]
        pairs = make_instances(docs, self.max_len, self.short_seq_prob, self.seed * 3 + offset)
        if not pairs:
            raise DataError(f"{OWNER}: {self.paths[split]} gives no sentence pairs")
        log.info("%s %s: %d documents, %d instances (%.1f%% random next)", OWNER, split, len(docs),
                 len(pairs), 100 * np.mean([p[2] for p in pairs]))
        return Instances(pairs)

    def setup(self, stage: Optional[str] = None) -> None:
        self.prepare_tokenizer()
        for split in ("train", "val", "test"):
            if split not in self.splits and self.paths[split] is not None:
                self.splits[split] = self.make_split(split)

    def setup_evaluation(self, run_dir, artifacts: dict, split: str) -> None:
        """Only what evaluating a trained run on ``split`` needs: the run's saved tokenizer and that
        split's file; the training file is not read and no tokenizer is trained."""
        if self.paths.get(split) is None:
            raise ValueError(f"{OWNER}: no {split} file; set data.{split}_path")
        folder = Path(run_dir) / "tokenizer"
        if (folder / TOKENIZER_FILE).is_file():
            from tokenizers import Tokenizer

            self.tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
        elif artifacts.get("tokenizer"):
            from tokenizers import Tokenizer

            self.tokenizer = Tokenizer.from_str(artifacts["tokenizer"])
        else:
            raise ValueError(f"{OWNER}: the run has no tokenizer ({folder / TOKENIZER_FILE} is "
                             f"missing and its checkpoint carries none)")
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
            return DataLoader(data, batch_size=self.batch_size, shuffle=True,
                              collate_fn=self.collate(True), num_workers=self.num_workers)
        sampler = BucketBatchSampler(data.sizes(), self.batch_size, False, self.seed)
        return DataLoader(data, batch_sampler=sampler, collate_fn=self.collate(False),
                          num_workers=self.num_workers)

    def missing_test(self) -> Optional[str]:
        if self.paths["test"] is None:
            return f"{OWNER}: no test split (test_path is empty); run with test=false"
        return None

    def example_batch(self, n: int, split: str = "val") -> Dict[str, torch.Tensor]:
        """The first ``n`` instances of a split, masked as in evaluation (dashboards)."""
        self.setup()
        data = self.splits[split]
        return self.collate(False)([data[i] for i in range(min(n, len(data)))])
