"""Alignment error rate of attention against a gold word alignment (Och & Ney 2003, eq. 5):

    AER = 1 − (|A ∩ S| + |A ∩ P|) / (|A| + |S|)

A: each target word aligned to the source word its attention weighs most (a word's sub-word
columns summed, its sub-word rows averaged; special tokens such as ⟨eos⟩ left out). S: the gold
file's sure links, P ⊇ S its possible ones. The file is Pharaoh's format, one line per compared
example in their order: ``i-j`` pairs of 0-based source word i and target word j (``i?j``: a
possible link). Words are as the tokenizer splits them: a new word at a ``▁`` (Metaspace), at a
piece without ``##`` (WordPiece), at punctuation, else every token its own word.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from typing import List, Optional, Sequence, Set, Tuple

import numpy as np

from attnflow.compare.stats import CompareError

Links = Set[Tuple[int, int]]
_SPECIAL = re.compile(r"<[^<>\s]+>|\[[A-Z]+\]")


def read_pharaoh(path: Path | str, examples: int) -> List[Tuple[Links, Links]]:
    """(sure, possible ⊇ sure) links per line; a malformed pair or too few lines: one error."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    if len(lines) < examples:
        raise CompareError(f"--alignments {path}: {len(lines)} lines for {examples} examples; "
                           f"give one line of i-j pairs per compared example, in their order")
    out = []
    for n, line in enumerate(lines[:examples], 1):
        sure, possible = set(), set()
        for pair in line.split():
            m = re.fullmatch(r"(\d+)([-?])(\d+)", pair)
            if not m:
                raise CompareError(f"--alignments {path}, line {n}: '{pair}' is not an i-j "
                                   f"(or i?j) pair of word numbers")
            link = (int(m.group(1)), int(m.group(3)))
            possible.add(link)
            if m.group(2) == "-":
                sure.add(link)
        out.append((sure, possible))
    return out


def _punct(token: str) -> bool:
    return bool(token) and all(unicodedata.category(c).startswith("P") for c in token)


def word_ids(tokens: Sequence[str]) -> List[Optional[int]]:
    """Each token's 0-based word, None for a special token."""
    pieces = any(t.startswith("##") for t in tokens)
    meta = any(t.startswith("\u2581") for t in tokens)
    out: List[Optional[int]] = []
    word, prev_punct = -1, False
    for t in tokens:
        if _SPECIAL.fullmatch(t):
            out.append(None)
            continue
        starts = (not t.startswith("##") if pieces else t.startswith("\u2581") if meta else True)
        punct = _punct(t.lstrip("\u2581"))
        if word < 0 or starts or punct or prev_punct:
            word += 1
        out.append(word)
        prev_punct = punct
    return out


def word_alignment(alpha: np.ndarray, rows: Sequence[str], columns: Sequence[str]) -> Links:
    """A: (source word, target word) links of α (R, C) over ``rows`` (target) × ``columns``."""
    tw, sw = word_ids(rows), word_ids(columns)
    n_t, n_s = (max([w for w in ids if w is not None], default=-1) + 1 for ids in (tw, sw))
    if not n_t or not n_s:
        return set()
    to_s = np.zeros((len(columns), n_s))
    to_s[[c for c, w in enumerate(sw) if w is not None], [w for w in sw if w is not None]] = 1.0
    to_t = np.zeros((n_t, len(rows)))
    to_t[[w for w in tw if w is not None], [r for r, w in enumerate(tw) if w is not None]] = 1.0
    words = (to_t / to_t.sum(1, keepdims=True)) @ alpha[:, : len(columns)] @ to_s   # (n_t, n_s)
    return {(int(s), t) for t, s in enumerate(words.argmax(1))}


def aer(links: Sequence[Links], gold: Sequence[Tuple[Links, Links]]) -> float:
    """AER over the examples together (their link counts summed)."""
    a_s = sum(len(a & s) for a, (s, _) in zip(links, gold))
    a_p = sum(len(a & p) for a, (_, p) in zip(links, gold))
    size = sum(len(a) for a in links) + sum(len(s) for s, _ in gold)
    return 1.0 - (a_s + a_p) / size if size else float("nan")
