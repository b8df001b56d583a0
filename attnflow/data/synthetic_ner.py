"""A generated named-entity set (no downloads): sentences from templates whose slots hold people,
places and organisations drawn from small lists, tagged in IOB2 (Ramshaw & Marcus 1995; B- opens
an entity, I- continues it, O is outside any).

    Anna Meyer flew from New York to Jordan .
    B-PER I-PER O    O    B-LOC I-LOC O B-LOC O

Some names are both a person and a place (Jordan, Paris, Washington, Sydney), so a tagger has to
read the context, and multi-word names exercise I- tags. Deterministic in ``seed``; the splits are
consecutive draws of one random stream. ``python -m attnflow.data.synthetic_ner OUT_DIR`` writes
``train.conll``, ``dev.conll`` and ``test.conll`` (token<TAB>tag lines) for
``data=token_classification``.
"""

from __future__ import annotations

import argparse
import functools
import random
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from attnflow.data.tagged import write_conll

TAGS = ("O", "B-LOC", "B-ORG", "B-PER", "I-LOC", "I-ORG", "I-PER")  # as read from files: O, sorted

PEOPLE = ["Anna", "Anna Meyer", "Omar", "Omar Haddad", "Li Wei", "Maria Lopez", "John Smith",
          "Jordan", "Paris Hilton", "George Washington", "Sydney", "Kofi Mensah", "Elena",
          "Elena Petrova", "Ravi Kumar", "Yuki Tanaka", "Lucas", "Sofia Rossi"]
PLACES = ["Paris", "Berlin", "Lagos", "Jordan", "Washington", "Sydney", "New York", "Buenos Aires",
          "Tokyo", "Cairo", "San Francisco", "Lima", "Oslo", "Rio de Janeiro", "Delhi", "Kyoto"]
ORGS = ["Acme", "Acme Corp", "United Nations", "Red Cross", "Globex", "World Bank", "Initech",
        "Oslo University", "Tokyo Electric", "Nordic Rail"]
SLOTS = {"PER": PEOPLE, "LOC": PLACES, "ORG": ORGS}
TEMPLATES = [
    "PER lives in LOC .",
    "PER met PER in LOC yesterday .",
    "PER works for ORG in LOC .",
    "ORG opened an office in LOC .",
    "yesterday PER flew from LOC to LOC .",
    "the weather in LOC was cold today .",
    "PER said the ORG report was late .",
    "we visited LOC with PER last summer .",
    "PER called ORG about the meeting .",
    "the new office of ORG is near the station .",
    "nobody came to the meeting today .",
    "PER and PER moved to LOC .",
    "PER wrote to PER from LOC .",
]


def draw_sentence(rng: random.Random) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    """One (words, IOB2 tags) from a random template with random fillers."""
    words, tags = [], []
    for slot in rng.choice(TEMPLATES).split():
        if slot not in SLOTS:
            words.append(slot)
            tags.append("O")
            continue
        name = rng.choice(SLOTS[slot]).split()
        words += name
        tags += [f"B-{slot}"] + [f"I-{slot}"] * (len(name) - 1)
    return tuple(words), tuple(tags)


@functools.lru_cache(maxsize=4)
def draw_splits(sizes: Tuple[int, int, int], seed: int) -> Dict[str, tuple]:
    """{'train', 'val', 'test'}: that many sentences each, consecutive draws with ``seed``."""
    rng = random.Random(seed)
    return {split: tuple(draw_sentence(rng) for _ in range(n))
            for split, n in zip(("train", "val", "test"), sizes)}


def write_splits(folder: Path | str, sizes: Sequence[int] = (2000, 300, 300),
                 seed: int = 1234) -> List[Path]:
    """``train.conll``, ``dev.conll`` and ``test.conll`` in ``folder`` (:func:`draw_splits`)."""
    splits = draw_splits(tuple(sizes), seed)
    return [write_conll(Path(folder) / f"{name}.conll", splits[split])
            for split, name in (("train", "train"), ("val", "dev"), ("test", "test"))]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m attnflow.data.synthetic_ner",
                                description="write the generated NER set as CoNLL files")
    p.add_argument("folder")
    p.add_argument("--sizes", type=int, nargs=3, default=(2000, 300, 300),
                   metavar=("TRAIN", "DEV", "TEST"))
    p.add_argument("--seed", type=int, default=1234)
    args = p.parse_args(argv)
    for path in write_splits(args.folder, args.sizes, args.seed):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
