"""Image captioning data (Show, Attend and Tell: Xu et al. 2015): what the captioning modules
share, and ``shapes``, the synthetic set of :mod:`attnflow.data.shapes`. Batches: ``images``
(pixels or (B, L, D) region features), ``tgt_in``/``tgt_out``, ``idx`` (for ``references``, BLEU's
multiple references) and, for ``shapes``, ``regions``: the pixels each word names.
"""

from __future__ import annotations

import json
import re
from functools import partial
from pathlib import Path
from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence

import torch
from torch.utils.data import DataLoader, Dataset

from attnflow.data.base import Columns, SplitDataModule, eval_sampler, frame_targets
from attnflow.data.examples import example_indices
from attnflow.data.resumable import ResumableDataLoader
from attnflow.data.shapes import (BOS, EOS, PAD, RELATIONS, UNK, ShapesCaptions, Vocab,
                                  all_captions, collate, make_splits)
from attnflow.config.registry import DATA, ConfigError, NonNegativeInt, PositiveInt

__all__ = ["CaptioningDataModule", "ShapesDataModule", "tokenize_caption", "frame_targets",
           "longest_shapes_caption", "PAD", "BOS", "EOS", "UNK"]

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")  # Unicode letters/digits; "man's" stays one word


def tokenize_caption(text: str) -> List[str]:
    """Lower-cased words without punctuation, as Karpathy's split files store captions:
    ``"A dog, running." -> ["a", "dog", "running"]``; ``"man's"`` stays whole."""
    return _WORD.findall(text.lower())


class CaptioningDataModule(SplitDataModule):
    """What the captioning modules share: a subclass sets ``vocab`` in ``setup()`` and gives
    ``dataset(split)``, ``collate_fn()``, ``references(split, idx)`` and ``image_size``."""

    interface = "captioning"  # images with captions: the captioner model, the captioning task
    owner = "data 'captioning'"
    input_kind = "pixels"  # or "features"
    vocab: Optional[Vocab] = None

    @property
    def feature_dim(self) -> Optional[int]:
        return None

    @classmethod
    def placeholder_context(cls, fields: Mapping[str, Any]) -> Optional[dict]:
        """Stand-in sizes; None for region features (their size is in the files)."""
        if fields.get("features"):
            return None
        return {"tgt_vocab": 32, "pad_id": PAD, "in_channels": 3, "feature_dim": None}

    def model_context(self) -> dict:
        self.setup()  # the runner builds the model next: every file is read and checked by now
        pixels = self.input_kind == "pixels"
        return {"tgt_vocab": len(self.vocab), "pad_id": PAD, "in_channels": 3 if pixels else None,
                "feature_dim": None if pixels else self.feature_dim}

    def task_context(self) -> dict:
        self.setup()
        return {"pad_id": PAD, "bos_id": BOS, "eos_id": EOS, "max_decode_len": self.max_decode_len,
                "itos": list(self.vocab.itos), "references": self.references}

    def artifacts(self) -> dict:
        """What captioning new images needs besides the weights (``<run>/vocab.json``)."""
        self.setup()
        pixels = self.input_kind == "pixels"
        return {"itos": list(self.vocab.itos), "input": self.input_kind,
                "image_size": self.image_size if pixels else None,
                "feature_dim": None if pixels else self.feature_dim,
                "max_decode_len": self.max_decode_len}

    def save_artifacts(self, run_dir) -> Path:
        path = Path(run_dir) / "vocab.json"
        path.write_text(json.dumps(self.artifacts()), encoding="utf-8")
        return path

    def run_vocab(self, run_dir, artifacts: dict) -> Vocab:
        """The trained run's vocabulary (its vocab.json or checkpoint), checked to fit this data."""
        itos = (artifacts or {}).get("itos")
        if not isinstance(itos, list) or not itos:
            raise ConfigError(f"{self.owner}: the run has no vocabulary ({Path(run_dir) / 'vocab.json'} "
                              f"is missing and its checkpoint carries none)")
        if artifacts.get("input", self.input_kind) != self.input_kind:
            raise ConfigError(f"{self.owner}: the run was trained on {artifacts['input']} but this "
                              f"data gives {self.input_kind}")
        try:
            return Vocab(itos)
        except ValueError as err:
            raise ConfigError(f"{self.owner}: the run's vocabulary is not a captioning one: {err}") from None

    def _loader(self, split: str, train: bool) -> DataLoader:
        self.setup()
        data = self.dataset(split)
        return (ResumableDataLoader if train else DataLoader)(
            data, batch_size=self.batch_size, shuffle=train,
            sampler=None if train else eval_sampler(data), collate_fn=self.collate_fn(),
            num_workers=self.num_workers)

    def example_batch(self, n: int, split: str = "val",
                      ids: Optional[Sequence[int]] = None) -> Dict[str, torch.Tensor]:
        """The first ``n`` items of a split (or ``ids``) as one batch (attention maps, dashboards)."""
        self.setup()
        data = self.dataset(split)
        return self.collate_fn()([data[i] for i in example_indices(len(data), n, ids)])


def longest_shapes_caption(max_shapes: int) -> int:
    """Words of the longest caption of ``max_shapes`` shapes: "a C S", per other shape the
    longest relation and "a C S", "and" between relations."""
    rel = max(len(r.split()) for r in RELATIONS)
    return 3 + (max_shapes - 1) * (rel + 3) + max(0, max_shapes - 2)


def collate_shapes(items: Sequence[tuple], vocab: Vocab) -> Dict[str, torch.Tensor]:
    """:func:`attnflow.data.shapes.collate` of (index, example) pairs, plus ``idx``."""
    batch = collate([e for _, e in items], vocab)
    batch["idx"] = torch.tensor([i for i, _ in items], dtype=torch.long)
    return batch


@DATA.register("shapes")
class ShapesDataModule(CaptioningDataModule):
    """Synthetic captioning: coloured shapes and captions naming them, every word's pixels known
    (:mod:`attnflow.data.shapes`); drawn on access; the vocabulary from the train captions."""

    owner = "data 'shapes'"

    def __init__(self, *, train_size: PositiveInt = 5000, val_size: PositiveInt = 500,
                 test_size: NonNegativeInt = 500, size: PositiveInt = 64, grid: PositiveInt = 3,
                 min_shapes: PositiveInt = 1, max_shapes: PositiveInt = 3,
                 background: Literal["black", "grey", "mixed"] = "black",
                 batch_size: PositiveInt = 64, num_workers: NonNegativeInt = 0, seed: int = 1234):
        super().__init__()
        self.sets: Dict[str, ShapesCaptions] = make_splits(
            train_size, val_size, test_size, seed, size=size, grid=grid, min_shapes=min_shapes,
            max_shapes=max_shapes, background=background)
        self.size, self.batch_size, self.num_workers, self.seed = size, batch_size, num_workers, seed
        self.max_decode_len = longest_shapes_caption(max_shapes) + 2
        self._captions: Dict[str, List[List[str]]] = {}

    @property
    def image_size(self) -> int:
        return self.size

    def setup(self, stage: Optional[str] = None) -> None:
        if self.vocab is None:
            self.vocab = Vocab.build(self.sets["train"].captions())

    def setup_evaluation(self, run_dir, artifacts: dict, split: str) -> None:
        """The run's vocabulary; no training example is drawn."""
        self.vocab = self.run_vocab(run_dir, artifacts)

    def dataset(self, split: str) -> Dataset:
        return Columns(idx=range(len(self.sets[split])), example=self.sets[split])  # batches carry idx

    def collate_fn(self):
        return partial(collate_shapes, vocab=self.vocab)

    def references(self, split: str, idx: Sequence[int]) -> List[List[str]]:
        """Every true caption of each item's image, the drawn one first (made once per split)."""
        if split not in self._captions:
            self._captions[split] = [[" ".join(w) for w in all_captions(self.sets[split][i])]
                                     for i in range(len(self.sets[split]))]
        return [list(self._captions[split][int(i)]) for i in idx]

    def missing_test(self) -> Optional[str]:
        if len(self.sets["test"]) == 0:
            return f"{self.owner}: test_size=0, so there is no test split; run with test=false"
        return None
