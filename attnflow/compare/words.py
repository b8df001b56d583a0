"""Runs tokenised differently, compared per word: a word's sub-word columns summed (the weight it
gets) and its sub-word rows averaged (each still a distribution), special tokens kept as units of
their own. Only views whose rows share one list of columns are turned (translation, BERT); the
others (a causal decoder's self-attention) are left out, and said so."""

from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Sequence, Tuple

import numpy as np

from attnflow.compare.alignment import word_ids
from attnflow.compare.views import ExampleViews, View


def units(tokens: Sequence[str]) -> Tuple[List[int], List[str]]:
    """Each token's unit (its word, or itself for a special token) and the units' texts."""
    out: List[int] = []
    texts: List[str] = []
    last = None
    for token, word in zip(tokens, word_ids(tokens)):
        piece = token[2:] if token.startswith("##") else token.lstrip("\u2581")
        if word is None or word != last:
            texts.append(piece)
        else:
            texts[-1] += piece
        out.append(len(texts) - 1)
        last = word
    return out, [text or "\u2581" for text in texts]


def _matrix(index: Sequence[int], n: int) -> np.ndarray:
    """(len(index), n): row t one-hot at index[t]."""
    m = np.zeros((len(index), n))
    m[np.arange(len(index)), index] = 1.0
    return m


def word_view(view: View) -> View:
    """``view`` over words (its rows share their columns)."""
    cols, col_text = units(view.labels[0])
    rows, row_text = units(view.rows)
    to_cols = _matrix(cols, len(col_text))                       # (C, C′)
    to_rows = _matrix(rows, len(row_text)).T                     # (R′, R)
    to_rows /= to_rows.sum(1, keepdims=True)
    weights = np.einsum("rs,hsc,cd->hrd", to_rows, view.weights[:, :, : len(cols)], to_cols)
    return replace(view, weights=weights, rows=row_text, labels=[col_text] * len(row_text),
                   lengths=np.full(len(row_text), len(col_text)))


def shared_columns(view: View) -> bool:
    return all(labels == view.labels[0] for labels in view.labels)


def per_word(runs: Dict[str, List[ExampleViews]]) -> Tuple[Dict[str, List[ExampleViews]], List[str]]:
    """Every run's views over words, and the names of the views left out."""
    left = sorted({v.name() for examples in runs.values() for e in examples for v in e.views
                   if not shared_columns(v)})
    turned = {label: [replace(e, views=[word_view(v) for v in e.views if shared_columns(v)])
                      for e in examples] for label, examples in runs.items()}
    return turned, left
