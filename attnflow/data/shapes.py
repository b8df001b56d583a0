"""Synthetic image captioning for Show, Attend and Tell (Xu et al. 2015): coloured shapes, each
whole in its own cell of a ``grid`` × ``grid`` layout, and a caption naming them; every named
shape's pixels are known (the ground truth of the grounding test). The grammar::

    caption  := object ( relation object ( "and" relation object )* )?
    object   := "a" COLOUR SHAPE
    relation := "left of" | "right of" | "above" | "below"

Example ``i`` is drawn from its own ``random.Random(seed + i)``.
"""

from __future__ import annotations

import random
from collections import Counter
from itertools import permutations, product
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import torch
from torch.utils.data import Dataset

from attnflow.config.registry import ConfigError
from attnflow.data.base import BOS, EOS, PAD, frame_targets

UNK = 3
SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]

SHAPES = ("circle", "square", "triangle")
COLOURS: Dict[str, Tuple[float, float, float]] = {
    "red": (1.0, 0.0, 0.0), "green": (0.0, 1.0, 0.0), "blue": (0.0, 0.0, 1.0),
    "yellow": (1.0, 1.0, 0.0)}
BACKGROUNDS: Dict[str, float] = {"black": 0.0, "grey": 0.5}
RELATIONS = ("left of", "right of", "above", "below")
# Distance between splits' seed ranges: split k uses seeds seed + k * SPLIT_STRIDE + i.
SPLIT_STRIDE = 10_000_000


@dataclass
class Shape:
    """One drawn shape; ``box`` = inclusive (x_min, y_min, x_max, y_max) of ``mask``."""

    kind: str
    colour: str
    cell: Tuple[int, int]  # (row, col) in the grid
    centre: Tuple[float, float]  # (x, y) in pixels, x along columns, y along rows (downwards)
    radius: float
    box: Tuple[int, int, int, int]
    mask: torch.Tensor  # (H, W) bool


@dataclass
class ShapesExample:
    """An image, its caption's words, and for each word the shape it names (or -1)."""

    image: torch.Tensor  # (3, H, W) float32 in [0, 1]
    words: List[str]
    shapes: List[Shape]
    word_shape: List[int] = field(default_factory=list)  # per word: index into shapes, or -1
    background: str = "black"

    @property
    def caption(self) -> str:
        return " ".join(self.words)

    def region(self, t: int) -> Optional[Tuple[Tuple[int, int, int, int], torch.Tensor]]:
        """(box, mask) of the shape word ``t`` names, or None for words that name no shape."""
        j = self.word_shape[t]
        return None if j < 0 else (self.shapes[j].box, self.shapes[j].mask)

    def word_masks(self) -> torch.Tensor:
        """(T, H, W) bool: per word the named shape's mask (all False for other words)."""
        H, W = self.image.shape[1:]
        out = torch.zeros(len(self.words), H, W, dtype=torch.bool)
        for t, j in enumerate(self.word_shape):
            if j >= 0:
                out[t] = self.shapes[j].mask
        return out


def _shape_mask(kind: str, cx: float, cy: float, r: float, xx: torch.Tensor,
                yy: torch.Tensor) -> torch.Tensor:
    """Boolean mask of a shape centred at (cx, cy) with 'radius' r, on pixel-centre grids xx, yy."""
    dx, dy = xx - cx, yy - cy
    if kind == "circle":
        return dx * dx + dy * dy <= r * r
    if kind == "square":
        h = 0.85 * r  # same area scale as the circle, roughly
        return (dx.abs() <= h) & (dy.abs() <= h)
    # Upward isosceles triangle: apex at (cx, cy - r), base at y = cy + r, base width 2r.
    return (dy >= -r) & (dy <= r) & (dx.abs() <= (dy + r) / 2)


def _box(mask: torch.Tensor) -> Tuple[int, int, int, int]:
    rows = mask.any(dim=1).nonzero().flatten()
    cols = mask.any(dim=0).nonzero().flatten()
    return int(cols[0]), int(rows[0]), int(cols[-1]), int(rows[-1])


def relation(subject: Shape, other: Shape) -> List[str]:
    """The relations that hold for "subject REL other" (cell order is centre order)."""
    (r0, c0), (r1, c1) = subject.cell, other.cell
    out = []
    if c0 != c1:
        out.append("left of" if c0 < c1 else "right of")
    if r0 != r1:
        out.append("above" if r0 < r1 else "below")
    return out


def make_example(seed: int, *, size: int = 64, grid: int = 3, min_shapes: int = 1,
                 max_shapes: int = 3, background: str = "black") -> ShapesExample:
    """One example from ``random.Random(seed)`` alone; ``background`` 'mixed': each image
    picks black or grey."""
    rng = random.Random(seed)
    bg = rng.choice(sorted(BACKGROUNDS)) if background == "mixed" else background
    n = rng.randint(min_shapes, max_shapes)
    cells = rng.sample([(r, c) for r in range(grid) for c in range(grid)], n)
    colours = rng.sample(sorted(COLOURS), n)  # distinct: a colour finds its shape's pixels
    cell = size / grid
    coords = torch.arange(size, dtype=torch.float32) + 0.5  # pixel centres
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    image = torch.full((3, size, size), BACKGROUNDS[bg])
    shapes: List[Shape] = []
    for (row, col), colour in zip(cells, colours):
        kind = rng.choice(SHAPES)
        r = rng.uniform(0.25, 0.4) * cell  # the shape spans at most 0.8 of its cell
        slack = cell / 2 - r - 0.5  # keep it whole inside its cell, with half a pixel margin
        cx = (col + 0.5) * cell + rng.uniform(-slack, slack)
        cy = (row + 0.5) * cell + rng.uniform(-slack, slack)
        mask = _shape_mask(kind, cx, cy, r, xx, yy)
        image[:, mask] = torch.tensor(COLOURS[colour]).unsqueeze(1)
        shapes.append(Shape(kind, colour, (row, col), (cx, cy), r, _box(mask), mask))
    rels = [rng.choice(relation(shapes[0], other)) for other in shapes[1:]]
    words, word_shape = caption_words(shapes, list(range(n)), rels)
    return ShapesExample(image, words, shapes, word_shape, bg)


def caption_words(shapes: Sequence[Shape], order: Sequence[int], rels: Sequence[str]
                  ) -> Tuple[List[str], List[int]]:
    """The grammar's words for subject ``order[0]`` and the rest with ``rels``, and per word the
    index of the shape it names (-1 for none)."""
    s = order[0]
    words, word_shape = ["a", shapes[s].colour, shapes[s].kind], [-1, s, s]
    for k, (j, rel) in enumerate(zip(order[1:], rels)):
        if k:
            words.append("and")
            word_shape.append(-1)
        rel_words = rel.split()
        words += rel_words + ["a", shapes[j].colour, shapes[j].kind]
        word_shape += [-1] * (len(rel_words) + 1) + [j, j]
    return words, word_shape


def all_captions(example: ShapesExample) -> List[List[str]]:
    """Every caption the grammar allows for the drawn shapes (any subject, order and true
    relation), the drawn one first: BLEU's references, as COCO scores against five captions."""
    out = [list(example.words)]
    seen = {tuple(example.words)}
    for order in permutations(range(len(example.shapes))):
        options = [relation(example.shapes[order[0]], example.shapes[j]) for j in order[1:]]
        for rels in product(*options):
            words, _ = caption_words(example.shapes, order, rels)
            if tuple(words) not in seen:
                seen.add(tuple(words))
                out.append(words)
    return out


def check_options(*, size: int, grid: int, min_shapes: int, max_shapes: int, **_) -> None:
    if grid < 2:
        raise ConfigError(f"data 'shapes': grid must be >= 2 (cells per side), got {grid}")
    if size < 16 * grid:  # cells under 16 px draw circles, squares, triangles alike
        raise ConfigError(f"data 'shapes': size must be >= 16 * grid = {16 * grid} pixels so the "
                          f"shapes stay distinguishable, got size={size} with grid={grid}")
    top = min(grid * grid, len(COLOURS))
    if not 1 <= min_shapes <= max_shapes <= top:
        raise ConfigError(f"data 'shapes': need 1 <= min_shapes <= max_shapes <= {top} (cells and "
                          f"distinct colours), got min_shapes={min_shapes}, max_shapes={max_shapes}")


class ShapesCaptions(Dataset):
    """``n`` examples; example i is ``make_example(seed + i, **options)``, drawn on access."""

    def __init__(self, n: int, seed: int = 1234, **options):
        check_options(**{**_DEFAULTS, **options})
        self.n, self.seed, self.options = n, seed, options

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> ShapesExample:
        if not -self.n <= i < self.n:
            raise IndexError(f"example {i} out of range for {self.n} examples")
        return make_example(self.seed + (i % self.n), **self.options)

    def captions(self) -> Iterable[List[str]]:
        return (self[i].words for i in range(self.n))


_DEFAULTS = dict(size=64, grid=3, min_shapes=1, max_shapes=3, background="black")


def make_splits(train_size: int = 5000, val_size: int = 500, test_size: int = 500,
                seed: int = 1234, **options) -> Dict[str, ShapesCaptions]:
    """Train/val/test sets; split k draws from seeds seed + k·SPLIT_STRIDE + i (disjoint)."""
    sizes = {"train": train_size, "val": val_size, "test": test_size}
    return {name: ShapesCaptions(n, seed + k * SPLIT_STRIDE, **options)
            for k, (name, n) in enumerate(sizes.items())}


class Vocab:
    """Words ↔ ids: the specials, then words seen ``min_freq`` times, most frequent first (ties
    alphabetical)."""

    def __init__(self, itos: Sequence[str]):
        if list(itos[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"vocabulary must start with {SPECIALS}, got {list(itos[:4])}")
        self.itos = list(itos)
        self.stoi = {w: i for i, w in enumerate(self.itos)}

    @classmethod
    def build(cls, captions: Iterable[Sequence[str]], min_freq: int = 1) -> "Vocab":
        counts = Counter(w for words in captions for w in words)
        words = sorted((w for w, c in counts.items() if c >= min_freq and w not in SPECIALS),
                       key=lambda w: (-counts[w], w))
        return cls(SPECIALS + words)

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, words: Sequence[str]) -> List[int]:
        return [self.stoi.get(w, UNK) for w in words]

    def decode(self, ids: Iterable[int]) -> List[str]:
        """Words up to the first ⟨eos⟩, without ⟨pad⟩/⟨bos⟩."""
        out = []
        for i in ids:
            i = int(i)
            if i == EOS:
                break
            if i not in (PAD, BOS):
                out.append(self.itos[i])
        return out


def collate(examples: Sequence[ShapesExample], vocab: Vocab) -> Dict[str, torch.Tensor]:
    """Images, framed captions, and ``regions`` (B, T, H, W): each ``tgt_out`` word's shape."""
    ids = [vocab.encode(e.words) for e in examples]
    tgt_in, tgt_out = frame_targets(ids)
    regions = torch.zeros(*tgt_out.shape, *examples[0].image.shape[1:], dtype=torch.bool)
    for i, e in enumerate(examples):
        regions[i, : len(ids[i])] = e.word_masks()
    return {"images": torch.stack([e.image for e in examples]), "tgt_in": tgt_in,
            "tgt_out": tgt_out, "regions": regions}
