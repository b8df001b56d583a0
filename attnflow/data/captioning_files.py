"""The data module ``captions``: real image–caption sets (Flickr8k, Flickr30k, COCO), read by
:mod:`attnflow.data.captions`. ``captions`` is one Karpathy-split JSON (Karpathy & Fei-Fei 2015)
whose images ``<split>_split`` picks; ``<split>_captions`` is a split's own file and wins. Train
items are (image, caption) pairs; val/test items are images with all their captions as references.
Inputs are pixels or, with ``features``, (L, D) arrays per image (``.npy`` files or one ``.npz``).
"""

from __future__ import annotations

import logging
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
from torch.utils.data import Dataset

from attnflow.data.captioning import CaptioningDataModule, frame_targets, tokenize_caption
from attnflow.data.captions import load_image, read_captions
from attnflow.data.errors import DataError, DataFileNotFoundError, missing_data
from attnflow.data.shapes import Vocab
from attnflow.config.registry import DATA, ConfigError, NonNegativeInt, PositiveInt
from attnflow.io.console import warn_unread

log = logging.getLogger(__name__)

OWNER = "data 'captions'"
SPLITS = ("train", "val", "test")


class FeatureStore:
    """(L, D) region features per image: ``<dir>/<image stem>.npy``, or one ``.npz`` keyed by
    image file name (opened once per process)."""

    def __init__(self, path: Path):
        self.path = path
        self.npz_keys: Optional[set] = None
        self._npz = None
        if path.is_file() and path.name.endswith(".npz"):
            try:
                with np.load(path, allow_pickle=False) as npz:
                    self.npz_keys = set(npz.files)
            except (OSError, ValueError, zipfile.BadZipFile) as err:
                raise DataError(f"{OWNER}: features={path} is not a readable .npz: {err}") from None
        elif not path.is_dir():
            raise missing_data(OWNER, f"features={path} not found: expected a directory of <image "
                                      f"stem>.npy arrays or one .npz keyed by image file name")

    def source(self, image: Path) -> str:
        """Where the features of ``image`` are, for messages."""
        if self.npz_keys is None:
            return str(self.path / f"{image.stem}.npy")
        return f"{self.path}['{image.name}']"

    def shape(self, image: Path, where: str, zf: Optional[zipfile.ZipFile] = None) -> tuple:
        """(shape, dtype) of the image's array, read from its header; a missing one is an error."""
        try:
            if self.npz_keys is None:
                file = self.path / f"{image.stem}.npy"
                if not file.is_file():
                    raise DataFileNotFoundError(f"{OWNER}: no features for image {image.name} "
                                                f"(named in {where}): {file} does not exist")
                arr = np.load(file, mmap_mode="r", allow_pickle=False)
                return arr.shape, arr.dtype
            if image.name not in self.npz_keys:
                raise DataError(f"{OWNER}: no features for image {image.name} (named in "
                                f"{where}): {self.path} has no array '{image.name}'")
            with zf.open(f"{image.name}.npy") as fp:
                version = np.lib.format.read_magic(fp)
                read = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                    np.lib.format.read_array_header_2_0
                shape, _, dtype = read(fp)
            return shape, dtype
        except DataError:
            raise
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as err:
            raise DataError(f"{OWNER}: cannot read features {self.source(image)}: {err}") from None

    def check(self, images: Dict[Path, str]) -> Tuple[int, int]:
        """(L, D) shared by the 2-D numeric arrays of ``images`` ({path: where named})."""
        first: Optional[tuple] = None
        zf = zipfile.ZipFile(self.path) if self.npz_keys is not None else None
        try:
            for image, where in images.items():
                shape, dtype = self.shape(image, where, zf)
                src = self.source(image)
                if len(shape) != 2 or np.dtype(dtype).kind not in "biuf":
                    raise DataError(f"{OWNER}: features {src} hold a {np.dtype(dtype)} array of shape "
                                    f"{tuple(shape)}; expected numbers of shape (L regions, D)")
                if first is None:
                    first = (tuple(shape), src)
                elif tuple(shape) != first[0]:
                    raise DataError(f"{OWNER}: features {src} have shape (L, D) = {tuple(shape)} but "
                                    f"{first[1]} has {first[0]}; every image needs the same number "
                                    f"of regions L and feature size D")
        finally:
            if zf is not None:
                zf.close()
        return first[0]

    def load(self, image: Path) -> torch.Tensor:
        if self.npz_keys is None:
            arr = np.load(self.path / f"{image.stem}.npy", allow_pickle=False)
        else:
            if self._npz is None:
                self._npz = np.load(self.path, allow_pickle=False)
            arr = self._npz[image.name]
        return torch.from_numpy(np.asarray(arr, dtype=np.float32))

    def __getstate__(self):  # DataLoader workers: each opens the .npz itself
        return {**self.__dict__, "_npz": None}


@dataclass
class CaptionItems(Dataset):
    """A split's items (image, target ids, where named, references): (index, input, ids)."""

    images: List[Path]
    ids: List[List[int]]
    where: List[str]
    refs: List[List[str]]
    image_size: PositiveInt = 112
    features: Optional[FeatureStore] = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int):
        x = self.pixels(i) if self.features is None else self.features.load(self.images[i])
        return i, x, self.ids[i]

    def pixels(self, i: int) -> torch.Tensor:
        return load_image(self.images[i], self.image_size, where=self.where[i])


def collate_captions(items: Sequence[tuple]) -> Dict[str, torch.Tensor]:
    """Stack images (or features) and frame the targets; ``idx`` the items' split indices."""
    tgt_in, tgt_out = frame_targets([ids for _, _, ids in items])
    return {"images": torch.stack([x for _, x, _ in items]), "tgt_in": tgt_in, "tgt_out": tgt_out,
            "idx": torch.tensor([i for i, _, _ in items], dtype=torch.long)}


@DATA.register("captions")
class CaptionsDataModule(CaptioningDataModule):
    """Real image–caption sets: an image folder and captions files (module docstring); relative
    paths are under ``root``; ``max_len`` cuts targets (not references); ``seed`` is unread (the
    order follows the run's seed)."""

    source_fields = ("root", "captions", "train_captions", "image_dir", "features")

    owner = OWNER


    def __init__(self, *, root: str = "", captions: Optional[str] = "dataset_flickr8k.json",
                 train_captions: str = "", val_captions: str = "", test_captions: str = "",
                 train_split: List[str] = ["train", "restval"],  # noqa: B006
                 val_split: Optional[str] = "val", test_split: Optional[str] = "test",
                 image_dir: str = "Flicker8k_Dataset", image_size: PositiveInt = 112,
                 min_freq: PositiveInt = 5, max_len: PositiveInt = 50,
                 features: Optional[str] = None, batch_size: PositiveInt = 32,
                 num_workers: NonNegativeInt = 0, seed: int = 1234):
        super().__init__()
        self.root = Path(root or ".")
        self.captions = captions or None
        self.own = {"train": train_captions, "val": val_captions, "test": test_captions}
        self.split_names = {"train": [s for s in train_split if s], "val": [val_split] if val_split else [],
                            "test": [test_split] if test_split else []}
        self.image_dir = self._path(image_dir)
        self.size, self.min_freq, self.max_len = image_size, min_freq, max_len
        self.features_path = self._path(features) if features else None
        self.input_kind = "features" if features else "pixels"
        self.batch_size, self.num_workers, self.seed = batch_size, num_workers, seed
        self.max_decode_len = max_len + 2
        self.store: Optional[FeatureStore] = None
        self.shape: Optional[Tuple[int, int]] = None
        self.data: Dict[str, CaptionItems] = {}
        for split in ("train", "val"):
            if self._source(split) is None:
                raise ConfigError(self._no_source(split))
        given = {"train": list(train_split), "val": val_split, "test": test_split}
        defaults = {"train": ["train", "restval"], "val": "val", "test": "test"}
        for split, own in self.own.items():
            if own and given[split] != defaults[split]:
                warn_unread(f"{OWNER}: {split}_split={given[split]}",
                            f"{split}_captions={own} names the split's own file")

    @classmethod
    def check_files(cls, fields: Mapping[str, Any], test: bool = True) -> None:
        """The training and validation captions files and the images (or their features) are
        there (nothing read): before a sweep's first job."""
        root = Path(fields["root"] or ".")
        for split in ("train", "val"):
            key = f"{split}_captions" if fields[f"{split}_captions"] else "captions"
            if fields[key] and not (root / fields[key]).is_file():
                raise missing_data(OWNER, f"captions file not found: {root / fields[key]} (at 'data.{key}')")
        key = "features" if fields["features"] else "image_dir"
        if not (root / fields[key]).exists():
            raise missing_data(OWNER, f"{key}={root / fields[key]} not found (at 'data.{key}')")

    @staticmethod
    def _no_source(split: str) -> str:
        return (f"{OWNER}: the {split} split has no captions file: set data.{split}_captions, or "
                f"data.captions (a Karpathy-split JSON) with data.{split}_split")

    def _path(self, value: str) -> Path:
        return self.root / value  # an absolute value stays itself

    def _source(self, split: str) -> Optional[tuple]:
        """(fields named in errors, file, Karpathy split names or None) of a split, or None."""
        if self.own[split]:
            return f"data.{split}_captions", self._path(self.own[split]), None
        if self.captions and self.split_names[split]:
            return f"data.captions, data.{split}_split", self._path(self.captions), self.split_names[split]
        return None

    @property
    def image_size(self) -> int:
        return self.size

    @property
    def feature_dim(self) -> Optional[int]:
        return None if self.shape is None else self.shape[1]

    def _read(self, split: str) -> List[tuple]:
        """[(image, words, where)] of a split; errors name the file and the fields."""
        fields, path, names = self._source(split)
        try:
            pairs = read_captions(path, self.image_dir, names)
        except DataError as err:
            raise type(err)(f"{OWNER}: {split} split ({fields}): {err}") from None
        rows = []
        for pair in pairs:
            words = tokenize_caption(pair[1])
            if not words:
                raise DataError(f"{OWNER}: {pair.where}: the caption {pair[1]!r} has no words "
                                f"(after lower-casing and removing punctuation)")
            rows.append((pair[0], words, pair.where))
        return rows

    def _items(self, split: str, rows: List[tuple]) -> CaptionItems:
        """Train: one item per pair; val/test: one per image (first caption = target)."""
        if split != "train":
            by_image: Dict[Path, list] = {}
            for image, words, where in rows:
                by_image.setdefault(image, []).append((words, where))
            rows = [(image, caps[0][0], caps[0][1], [" ".join(w) for w, _ in caps])
                    for image, caps in by_image.items()]
        else:
            rows = [(image, words, where, [" ".join(words)]) for image, words, where in rows]
        return CaptionItems([r[0] for r in rows], [self.vocab.encode(r[1][: self.max_len]) for r in rows],
                            [r[2] for r in rows], [r[3] for r in rows], self.size, self.store)

    def _check_features(self, splits: Dict[str, List[tuple]]) -> None:
        if self.features_path is None:
            return
        self.store = FeatureStore(self.features_path)
        images = {image: where for rows in splits.values() for image, _, where in rows}
        self.shape = self.store.check(images)

    def setup(self, stage: Optional[str] = None) -> None:
        if self.vocab is not None:
            return
        rows = {s: self._read(s) for s in SPLITS if self._source(s) is not None}
        self._check_features(rows)
        self.vocab = Vocab.build((words for _, words, _ in rows["train"]), self.min_freq)
        for split, r in rows.items():
            self.data[split] = self._items(split, r)
            cut = sum(len(w) > self.max_len for _, w, _ in r)
            log.info("%s %s: %d items from %d captions (%d cut to max_len=%d)", OWNER, split,
                     len(self.data[split]), len(r), cut, self.max_len)
        log.info("%s: vocabulary %d words (min_freq=%d)", OWNER, len(self.vocab), self.min_freq)

    def setup_evaluation(self, run_dir, artifacts: dict, split: str) -> None:
        """The run's vocabulary and only ``split``'s captions (attnflow-eval)."""
        if self._source(split) is None:
            raise ConfigError(self._no_source(split))
        vocab = self.run_vocab(run_dir, artifacts)
        rows = self._read(split)
        self._check_features({split: rows})
        want = artifacts.get("feature_dim")
        if self.shape is not None and want is not None and self.shape[1] != want:
            raise DataError(f"{OWNER}: features={self.features_path} have D={self.shape[1]} but "
                            f"the run was trained on D={want}")
        self.vocab = vocab
        self.data = {split: self._items(split, rows)}

    def dataset(self, split: str) -> CaptionItems:
        return self.data[split]

    def collate_fn(self):
        return collate_captions

    def references(self, split: str, idx: Sequence[int]) -> List[List[str]]:
        refs = self.data[split].refs
        return [list(refs[int(i)]) for i in idx]

    def missing_test(self) -> Optional[str]:
        return None if self._source("test") else f"{self._no_source('test')}; or run with test=false"

    def example_batch(self, n: int, split: str = "val",
                      ids: Optional[Sequence[int]] = None) -> Dict[str, torch.Tensor]:
        """The first ``n`` items (or ``ids``); with features also ``pixels``, to draw attention over."""
        batch = super().example_batch(n, split, ids)
        if self.input_kind == "features":
            data = self.data[split]
            batch["pixels"] = torch.stack([data.pixels(int(i)) for i in batch["idx"]])
        return batch

