"""Registered data modules for image captioning with visual attention (Show, Attend and Tell:
Xu et al. 2015): what both share, and ``shapes``, the synthetic set the package draws itself.

Every captioning module has ``interface = "captioning"`` and gives batches of

* ``images``: (B, 3, H, W) float pixels in [0, 1] (encoder ``cnn``), or (B, L, D) region
  features (data ``captions`` with ``features`` set; encoder ``features``);
* ``tgt_in`` = ⟨bos⟩ w1 … wn ⟨pad⟩…, ``tgt_out`` = w1 … wn ⟨eos⟩ ⟨pad⟩… (B, T) long, as the
  translation data frames targets, so the same attention decoders and decoding run on them;
* ``idx`` (B,): the item's index in its split; the task asks ``references(split, idx)`` for every
  reference caption of those items (multi-reference BLEU, as the captioning tutorials compute it);
* ``shapes`` only: ``regions`` (B, T, H, W) bool, the pixels of the shape each ``tgt_out`` word
  names (all False for words that name none): the ground truth of the grounding test.

Token ids follow :mod:`attnflow.data.shapes`: 0 ⟨pad⟩, 1 ⟨bos⟩, 2 ⟨eos⟩, 3 ⟨unk⟩, then the words
of the training captions, most frequent first. ``artifacts()`` (saved as ``<run>/vocab.json`` and
in checkpoints) holds what captioning a new image needs besides the weights: the vocabulary, the
input kind, the image size or feature size and the decoding length.
"""

from __future__ import annotations

import json
import re
from functools import partial
from pathlib import Path
from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence

import torch
from torch.utils.data import DataLoader, Dataset

from attnflow.data.base import SplitDataModule
from attnflow.data.shapes import (BOS, EOS, PAD, RELATIONS, UNK, ShapesCaptions, Vocab,
                                  all_captions, check_options, collate, make_splits)
from attnflow.data.sampling import eval_sampler
from attnflow.config.registry import DATA, ConfigError, NonNegativeInt, PositiveInt

__all__ = ["CaptioningDataModule", "ShapesDataModule", "tokenize_caption", "frame_targets",
           "longest_shapes_caption", "PAD", "BOS", "EOS", "UNK"]

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")  # Unicode letters/digits; "man's" stays one word


def tokenize_caption(text: str) -> List[str]:
    """Lower-cased words without punctuation, as the captioning tutorials tokenise (Karpathy's
    split files store captions this way): ``"A dog, running." -> ["a", "dog", "running"]``;
    an apostrophe inside a word keeps it whole (``"man's"``)."""
    return _WORD.findall(text.lower())


def frame_targets(seqs: Sequence[Sequence[int]]) -> tuple:
    """(tgt_in, tgt_out), (B, T) long with T = longest + 1: ⟨bos⟩ w… and w… ⟨eos⟩, ⟨pad⟩ after."""
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


class CaptioningDataModule(SplitDataModule):
    """What the captioning modules share: contexts, artifacts, loaders, example batches.

    A subclass sets ``vocab`` (a :class:`~attnflow.data.shapes.Vocab`) in ``setup()`` (or
    ``setup_evaluation``), ``max_decode_len``, ``batch_size``, ``num_workers``, and implements
    ``dataset(split)``, ``collate_fn()``, ``references(split, idx)`` and ``image_size``."""

    interface = "captioning"  # images with captions: the captioner model, the captioning task
    owner = "data 'captioning'"
    input_kind = "pixels"  # or "features"
    vocab: Optional[Vocab] = None

    def dataset(self, split: str) -> Dataset:
        raise NotImplementedError

    def collate_fn(self):
        raise NotImplementedError

    def references(self, split: str, idx: Sequence[int]) -> List[List[str]]:
        raise NotImplementedError

    @property
    def image_size(self) -> Optional[int]:
        raise NotImplementedError

    @property
    def feature_dim(self) -> Optional[int]:
        return None

    # -- what models and tasks need ---------------------------------------------------------------
    @classmethod
    def placeholder_context(cls, fields: Mapping[str, Any]) -> Optional[dict]:
        """:meth:`model_context` with stand-in sizes (:func:`attnflow.training.validate.check_model_builds`);
        None for region features: their size is read from the files."""
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

    # -- loaders ----------------------------------------------------------------------------------
    def _loader(self, split: str, train: bool) -> DataLoader:
        self.setup()
        data = self.dataset(split)
        return DataLoader(data, batch_size=self.batch_size, shuffle=train,
                          sampler=None if train else eval_sampler(data),
                          collate_fn=self.collate_fn(), num_workers=self.num_workers)

    def example_batch(self, n: int, split: str = "val") -> Dict[str, torch.Tensor]:
        """The first ``n`` items of a split as one batch (attention maps, dashboards)."""
        self.setup()
        data = self.dataset(split)
        return self.collate_fn()([data[i] for i in range(min(n, len(data)))])


# -- shapes -----------------------------------------------------------------------------------------
def longest_shapes_caption(max_shapes: int) -> int:
    """Words of the longest caption the grammar of :mod:`attnflow.data.shapes` can write with
    ``max_shapes`` shapes: "a C S", then per other shape the longest relation and "a C S", with
    "and" before every relation after the first."""
    rel = max(len(r.split()) for r in RELATIONS)
    return 3 + (max_shapes - 1) * (rel + 3) + max(0, max_shapes - 2)


class _Indexed(Dataset):
    """(index, example) pairs of a dataset: the batch carries ``idx``."""

    def __init__(self, data: Dataset):
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int):
        return i, self.data[i]


def collate_shapes(items: Sequence[tuple], vocab: Vocab) -> Dict[str, torch.Tensor]:
    """:func:`attnflow.data.shapes.collate` of (index, example) pairs, plus ``idx``."""
    batch = collate([e for _, e in items], vocab)
    batch["idx"] = torch.tensor([i for i, _ in items], dtype=torch.long)
    return batch


@DATA.register("shapes")
class ShapesDataModule(CaptioningDataModule):
    """Synthetic captioning: coloured shapes and captions naming them, every word's pixels known.

    The images and the grammar of :mod:`attnflow.data.shapes`. Examples are drawn
    on access from their own seeds (0.5 ms each on one CPU core; about 7% of a training step of
    the default CNN, so they are not cached). The vocabulary is built from the train captions.

    Args:
        train_size, val_size, test_size: images per split; test_size 0 = no test split
            (default 5000, 500, 500).
        size: image height and width in pixels (default 64).
        grid: cells per side of the layout, one shape per cell (default 3).
        min_shapes, max_shapes: shapes per image, inclusive (default 1, 3).
        background: canvas 'black', 'grey' or 'mixed' (each image picks one) (default 'black').
        batch_size: images per batch (default 64).
        num_workers: DataLoader workers (default 0).
        seed: seed of the drawing; the splits use disjoint seed ranges (default 1234).
    """

    owner = "data 'shapes'"
    @classmethod
    def image_side(cls, fields) -> tuple:
        """(the field, the side in pixels) of the images this config gives (captioner.check_config)."""
        return "data.size", fields["size"]

    def __init__(self, *, train_size: PositiveInt = 5000, val_size: PositiveInt = 500,
                 test_size: NonNegativeInt = 500,
                 size: PositiveInt = 64, grid: PositiveInt = 3, min_shapes: PositiveInt = 1,
                 max_shapes: PositiveInt = 3,
                 background: Literal["black", "grey", "mixed"] = "black",
                 batch_size: PositiveInt = 64,
                 num_workers: NonNegativeInt = 0, seed: int = 1234):
        super().__init__()
        try:
            self.sets: Dict[str, ShapesCaptions] = make_splits(
                train_size, val_size, test_size, seed, size=size, grid=grid,
                min_shapes=min_shapes, max_shapes=max_shapes, background=background)
        except ValueError as err:  # shapes.py's checks name the field: a config error, exit 2
            raise ConfigError(str(err)) from None
        self.size, self.batch_size, self.num_workers, self.seed = size, batch_size, num_workers, seed
        self.max_decode_len = longest_shapes_caption(max_shapes) + 2
        self._captions: Dict[str, List[List[str]]] = {}

    @classmethod
    def check_config(cls, cfg: dict) -> None:
        """The drawing options fit together (shapes.py's checks, each naming its field)."""
        fields = cfg["data"]
        try:
            check_options(**{k: fields[k] for k in ("size", "grid", "min_shapes", "max_shapes",
                                                    "background")})
        except ValueError as err:
            raise ConfigError(str(err)) from None

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
        return _Indexed(self.sets[split])

    def collate_fn(self):
        return partial(collate_shapes, vocab=self.vocab)

    def references(self, split: str, idx: Sequence[int]) -> List[List[str]]:
        """Every caption the grammar allows for each item's image, its drawn caption first
        (:func:`attnflow.data.shapes.all_captions`: another subject, order or true relation is
        as correct as the drawn one); made once per split, then kept."""
        if split not in self._captions:
            self._captions[split] = [[" ".join(w) for w in all_captions(self.sets[split][i])]
                                     for i in range(len(self.sets[split]))]
        return [list(self._captions[split][int(i)]) for i in idx]

    def missing_test(self) -> Optional[str]:
        if len(self.sets["test"]) == 0:
            return f"{self.owner}: test_size=0, so there is no test split; run with test=false"
        return None
