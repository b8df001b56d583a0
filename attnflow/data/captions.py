"""Image–caption pairs in the common layouts (an image folder plus one captions file, ``.gz``
allowed), for image captioning (Show, Attend and Tell: Xu et al. 2015):

* text (``.tsv``/``.txt``): ``image<TAB>caption`` per line; Flickr8k's ``name.jpg#k`` suffix is
  stripped (Hodosh et al. 2013);
* COCO JSON (Lin et al. 2014): ``images`` [{id, file_name}], ``annotations`` [{image_id, caption}];
* Karpathy-split JSON (Karpathy & Fei-Fei 2015): ``images`` [{filename, filepath?, split,
  sentences: [{raw}]}], the only layout with splits.

A malformed file raises :class:`~attnflow.data.errors.DataError` naming the file and line or field.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Iterable, List, Optional, Union

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from attnflow.data.errors import DataError, DataFileNotFoundError, missing_data, numbered_lines

OWNER = "captions"
_CAPTION_NO = re.compile(r"#\d+$")  # Flickr8k.token.txt: "name.jpg#3"


class Pair(tuple):
    """``(image path, caption)``, a plain 2-tuple that also carries ``where``: the file and line
    (or JSON entry) it came from, for errors."""

    where: str

    def __new__(cls, image: Path, caption: str, where: str):
        pair = super().__new__(cls, (image, caption))
        pair.where = where
        return pair

    def __getnewargs__(self):  # pickling (DataLoader workers) keeps ``where``
        return (self[0], self[1], self.where)


class _Images:
    """Image names resolved against ``image_dir``, each checked to exist once."""

    def __init__(self, image_dir: Path):
        self.dir = Path(image_dir)
        if not self.dir.is_dir():
            raise missing_data(OWNER, f"image folder not found: {self.dir}")
        self.seen = set()

    def __call__(self, name: str, where: str) -> Path:
        path = self.dir / name
        if path not in self.seen:
            if not path.is_file():
                raise DataFileNotFoundError(f"{OWNER}: {where} names image {name!r}, but "
                                            f"{path} does not exist")
            self.seen.add(path)
        return path


def _caption(text, where: str) -> str:
    if not isinstance(text, str):
        raise DataError(f"{OWNER}: {where}: the caption is not a string ({type(text).__name__})")
    text = " ".join(text.split())
    if not text:
        raise DataError(f"{OWNER}: {where}: empty caption")
    return text


def _read_text(path: Path, images: _Images) -> List[Pair]:
    pairs = []
    for n, line in numbered_lines(path, OWNER):
        if not line.strip():
            continue
        name, tab, text = line.partition("\t")
        where = f"{path} line {n}"
        if not tab:
            raise DataError(f"{OWNER}: {where} has no tab; expected image<TAB>caption")
        name = _CAPTION_NO.sub("", name.strip())
        if not name:
            raise DataError(f"{OWNER}: {where}: empty image name before the tab")
        pairs.append(Pair(images(name, where), _caption(text, where), where))
    return pairs


def _field(obj, key: str, where: str, path: Path, kind=None):
    if not isinstance(obj, dict) or key not in obj:
        raise DataError(f"{OWNER}: {path}: {where} lacks the field '{key}'")
    value = obj[key]
    if kind is not None and not isinstance(value, kind):
        raise DataError(f"{OWNER}: {path}: {where}.{key} should be a {kind.__name__}, got "
                        f"{type(value).__name__}")
    return value


def _id(value, where: str, path: Path):
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise DataError(f"{OWNER}: {path}: {where} should be an integer or a string, got "
                        f"{type(value).__name__}")
    return value


def _read_coco(data: dict, path: Path, images: _Images) -> List[Pair]:
    files = {}
    for i, image in enumerate(_field(data, "images", "the top level", path, list)):
        where = f"images[{i}]"
        image_id = _id(_field(image, "id", where, path), f"{where}.id", path)
        files[image_id] = (_field(image, "file_name", where, path, str), where)
    pairs = []
    for i, ann in enumerate(_field(data, "annotations", "the top level", path, list)):
        where = f"annotations[{i}]"
        image_id = _id(_field(ann, "image_id", where, path), f"{where}.image_id", path)
        if image_id not in files:
            raise DataError(f"{OWNER}: {path}: {where}.image_id {image_id!r} has no image in "
                            f"'images'")
        name, image_where = files[image_id]
        text = _field(ann, "caption", where, path)
        pairs.append(Pair(images(name, f"{path} {image_where}"),
                          _caption(text, f"{path} {where}"), f"{path} {where}"))
    return pairs


def _read_karpathy(data: dict, path: Path, images: _Images, splits) -> List[Pair]:
    pairs = []
    for i, image in enumerate(_field(data, "images", "the top level", path, list)):
        where = f"images[{i}]"
        split = _field(image, "split", where, path) if splits is not None else None
        if splits is not None and split not in splits:
            continue
        name = _field(image, "filename", where, path, str)
        file = images(str(Path(str(image.get("filepath") or "")) / name), f"{path} {where}")
        for j, sentence in enumerate(_field(image, "sentences", where, path, list)):
            s_where = f"{where}.sentences[{j}]"
            text = _field(sentence, "raw", s_where, path)
            pairs.append(Pair(file, _caption(text, f"{path} {s_where}"), f"{path} {s_where}"))
    return pairs


def _load_json(path: Path):
    text = "\n".join(line for _, line in numbered_lines(path, OWNER))
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise DataError(f"{OWNER}: {path} line {err.lineno} column {err.colno} is not valid "
                        f"JSON ({err.msg})") from None


def read_captions(path: Union[Path, str], image_dir: Union[Path, str],
                  split: Optional[Union[str, Iterable[str]]] = None) -> List[Pair]:
    """``[(image path, caption)]`` of a captions file, images under ``image_dir`` checked to
    exist; ``split`` (Karpathy JSON only): the split name or names to keep."""
    path = Path(path)
    if not path.is_file():
        raise missing_data(OWNER, f"captions file not found: {path}")
    splits = None
    if split is not None:
        splits = {split} if isinstance(split, str) else set(split)
    images = _Images(Path(image_dir))
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    if name.endswith(".json"):
        data = _load_json(path)
        if not isinstance(data, dict) or "images" not in data:
            raise DataError(f"{OWNER}: {path}: expected a JSON object with an 'images' field "
                            f"(COCO or Karpathy-split layout)")
        if "annotations" in data:
            if splits is not None:
                raise DataError(f"{OWNER}: {path} is COCO-style and has no splits; split="
                                f"{split!r} needs a Karpathy-split JSON (a 'split' per image)")
            pairs = _read_coco(data, path, images)
        else:
            pairs = _read_karpathy(data, path, images, splits)
    elif name.endswith(".tsv") or name.endswith(".txt"):
        if splits is not None:
            raise DataError(f"{OWNER}: {path} is an image<TAB>caption file and has no splits; "
                            f"split={split!r} needs a Karpathy-split JSON")
        pairs = _read_text(path, images)
    else:
        raise DataError(f"{OWNER}: {path}: unknown format; use .tsv/.txt (image<TAB>caption per "
                        f"line) or .json (COCO or Karpathy-split), optionally .gz")
    if not pairs:
        kept = f" for split {sorted(splits)}" if splits is not None else ""
        raise DataError(f"{OWNER}: {path} holds no captions{kept}")
    return pairs


def load_image(path: Union[Path, str], size: int, where: Optional[str] = None) -> torch.Tensor:
    """The image at ``path`` as RGB ``(3, size, size)`` floats in [0, 1], resized (bilinear) to
    the square input of the CNN encoder; ``where`` names the reference to it in errors."""
    path = Path(path)
    ref = f" (named in {where})" if where else ""
    if not path.is_file():
        raise DataFileNotFoundError(f"{OWNER}: image file not found: {path}{ref}")
    try:
        with Image.open(path) as img:
            img = img.convert("RGB").resize((size, size), Image.Resampling.BILINEAR)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, struct.error,
            Image.DecompressionBombError) as err:  # PIL's ways of saying "corrupt"
        reason = " ".join(str(err).split()) or type(err).__name__
        raise DataError(f"{OWNER}: cannot read image {path}{ref}: {reason}") from None
    pixels = torch.from_numpy(np.asarray(img, dtype=np.uint8).copy())
    return pixels.permute(2, 0, 1).float().div_(255.0)
