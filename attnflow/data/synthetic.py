"""Synthetic sequence-to-sequence data: reverse (or copy, or sort) random token sequences; the
default experiment trains on it with no downloads. Validation and test sequences never occur in
training; deterministic in ``seed``. Ids 0 ⟨pad⟩, 1 ⟨bos⟩, 2 ⟨eos⟩, then the symbols (a, b, …).
"""

from __future__ import annotations

import functools
import random
import string
from typing import Annotated, Any, Dict, List, Literal, Mapping, Optional, Sequence, Tuple

import torch
from torch.utils.data import DataLoader

from attnflow.data.base import BOS, EOS, PAD, SplitDataModule, collate_seq2seq, eval_sampler
from attnflow.data.examples import example_indices
from attnflow.data.resumable import ResumableDataLoader
from attnflow.config.registry import DATA, ConfigError, NonNegativeInt, PositiveInt, Range

SPECIALS = ["<pad>", "<bos>", "<eos>"]


def _symbol_names(n: int) -> List[str]:
    letters = string.ascii_lowercase + string.ascii_uppercase
    return [letters[i] if i < len(letters) else f"s{i}" for i in range(n)]


def collate(pairs: Sequence[tuple]) -> Dict[str, torch.Tensor]:
    """(source ids, target ids) pairs -> a padded batch with ⟨bos⟩/⟨eos⟩ on the target."""
    return collate_seq2seq([s for s, _ in pairs], [t for _, t in pairs])


def target_of(task: str, x: tuple) -> tuple:
    return x[::-1] if task == "reverse" else tuple(sorted(x)) if task == "sort" else x


@functools.lru_cache(maxsize=4)  # (runs of one process, e.g. a sweep's jobs, share the draw)
def draw_splits(task: str, symbols: int, min_len: int, max_len: int, sizes: Tuple[int, int, int],
                seed: int) -> Dict[str, tuple]:
    """The (x, f(x)) pairs of each split; held-out splits never repeat a training sequence."""
    rng, seen, splits = random.Random(seed), set(), {}
    for split, size in zip(("train", "val", "test"), sizes):
        out, tries = [], 0
        while len(out) < size:
            tries += 1
            if tries > 50 * size + 1000:
                raise ValueError(
                    f"data 'reverse': cannot draw {size} distinct {split} sequences from {symbols} "
                    f"symbols of length {min_len}..{max_len}; raise symbols or max_len, or lower "
                    "the split sizes")
            x = tuple(rng.randrange(3, 3 + symbols) for _ in range(rng.randint(min_len, max_len)))
            if split == "train" or x not in seen:
                seen.add(x)
                out.append((x, target_of(task, x)))
        splits[split] = tuple(out)
    return splits


@DATA.register("reverse")
class ReverseDataModule(SplitDataModule):
    """Random sequences x of ``symbols`` symbols, lengths in [min_len, max_len]; target f(x):
    'reverse' (attention on the anti-diagonal), 'copy' (the diagonal) or 'sort'."""

    interface = "seq2seq"  # sequence pairs: seq2seq/transformer models, seq2seq/translation tasks
    def __init__(self, *, task: Literal["reverse", "copy", "sort"] = "reverse",
                 symbols: Annotated[int, Range(ge=2)] = 20, min_len: PositiveInt = 4,
                 max_len: PositiveInt = 16, train_size: PositiveInt = 20000,
                 val_size: PositiveInt = 500, test_size: NonNegativeInt = 500,
                 batch_size: PositiveInt = 64, seed: int = 1234):
        super().__init__()
        if min_len > max_len:
            raise ConfigError(f"data 'reverse': need 1 <= min_len <= max_len (at 'data.min_len', "
                              f"'data.max_len'), got {min_len}, {max_len}")
        self.task, self.symbols, self.min_len, self.max_len = task, symbols, min_len, max_len
        self.sizes = {"train": train_size, "val": val_size, "test": test_size}
        self.batch_size, self.seed = batch_size, seed
        self.itos = SPECIALS + _symbol_names(symbols)
        self.splits: Dict[str, list] = {}

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    @classmethod
    def one_vocabulary(cls, fields: Mapping[str, Any]) -> bool:
        """Source and target are sequences of the same symbols: one vocabulary."""
        return True

    @classmethod
    def longest_source_positions(cls, fields: Mapping[str, Any]) -> Tuple[int, str]:
        """The most positions an encoder is given, and why."""
        return fields["max_len"], f"{{at}}max_len={fields['max_len']}"

    @classmethod
    def longest_positions(cls, fields: Mapping[str, Any]) -> Tuple[int, str]:
        """The most positions a sequence model is given (outputs: ``max_len + 2``), and why."""
        n = fields["max_len"]
        return n + 2, f"{{at}}max_len={n}: outputs decoded to {n + 2} tokens"

    @classmethod
    def placeholder_context(cls, fields: Mapping[str, Any]) -> Optional[dict]:
        return {"src_vocab": 32, "tgt_vocab": 32, "pad_id": PAD}

    def model_context(self) -> dict:
        return {"src_vocab": self.vocab_size, "tgt_vocab": self.vocab_size, "pad_id": PAD}

    def task_context(self) -> dict:
        return {"pad_id": PAD, "bos_id": BOS, "eos_id": EOS, "max_decode_len": self.max_len + 2,
                "itos": self.itos}

    def setup(self, stage: str | None = None) -> None:
        if not self.splits:
            self.splits = {split: list(pairs) for split, pairs in draw_splits(
                self.task, self.symbols, self.min_len, self.max_len,
                tuple(self.sizes.values()), self.seed).items()}

    def missing_test(self) -> Optional[str]:
        if not self.sizes["test"]:
            return "data 'reverse': data.test_size=0, so there is no test split; run with test=false"
        return None

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        self.setup()
        return (ResumableDataLoader if shuffle else DataLoader)(
            self.splits[split], batch_size=self.batch_size, shuffle=shuffle,
            sampler=None if shuffle else eval_sampler(self.splits[split]), collate_fn=collate)

    def text_batch(self, lines: Sequence[str]) -> Dict[str, torch.Tensor]:
        """Sequences of symbols between spaces (``e b j h``) with their target f(x)."""
        index = {s: i for i, s in enumerate(self.itos) if i >= len(SPECIALS)}
        seqs = []
        for n, line in enumerate(lines, 1):
            unknown = [s for s in line.split() if s not in index]
            if unknown or not line.split():
                raise ValueError(f"text {n}: {' '.join(unknown) or 'empty'}: not a sequence of "
                                 f"the data's symbols {' '.join(self.itos[len(SPECIALS):])}")
            seqs.append(tuple(index[s] for s in line.split()))
        return collate([(x, target_of(self.task, x)) for x in seqs])

    def example_batch(self, n: int, split: str = "val",
                      ids: Optional[Sequence[int]] = None) -> Dict[str, torch.Tensor]:
        """The first ``n`` examples of a split (or ``ids``), as a batch (attention heat maps)."""
        self.setup()
        data = self.splits[split]
        return collate([data[i] for i in example_indices(len(data), n, ids)])
