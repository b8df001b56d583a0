"""Entity-level scores of IOB2 tag sequences, as seqeval computes them in strict mode
(``seqeval.metrics.f1_score(y_true, y_pred, mode="strict", scheme=IOB2)``; Tjong Kim Sang &
De Meulder 2003, the CoNLL-2003 evaluation).

An entity is a maximal span ``B-X I-X … I-X`` (strict IOB2: an ``I-X`` without its ``B-X`` opens
none); a predicted entity is correct when its type, start and end all match a true one. Over a
split, with c correct, p predicted and t true entities (micro average over the types):

    P = c / p,    R = c / t,    F1 = 2PR / (P + R) = 2c / (p + t)    (0 where a denominator is 0)

The counts add up over batches (and DDP ranks), so an epoch's scores are those of seqeval on the
whole split; a batch's sentences are scored by seqeval's own entity extraction.
"""

from __future__ import annotations

from itertools import chain
from typing import Dict, List, Sequence, Tuple

import torch
from seqeval.scheme import IOB2, Entities
from torchmetrics import Metric

SCORES = ("precision", "recall", "f1")


def iob2_errors(names: Sequence[str]) -> List[str]:
    """The tag names that are not IOB2 (``O``, ``B-<type>``, ``I-<type>``)."""
    return [n for n in names if n != "O" and not (n[:2] in ("B-", "I-") and len(n) > 2)]


def word_tags(pred: torch.Tensor, target: torch.Tensor, names: Sequence[str],
              ignore: int = -100) -> Tuple[List[List[str]], List[List[str]]]:
    """(true, predicted) tag names per sentence at the labelled positions (each word's first
    piece) of (B, T) class ids; ``target == ignore`` elsewhere."""
    keep = target != ignore
    counts = keep.sum(1).tolist()
    true = [names[i] for i in target[keep].tolist()]
    guess = [names[i] for i in pred[keep].tolist()]
    bounds = [0, *torch.tensor(counts).cumsum(0).tolist()]
    return ([true[a:b] for a, b in zip(bounds, bounds[1:])],
            [guess[a:b] for a, b in zip(bounds, bounds[1:])])


def entity_counts(true: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> Tuple[int, int, int]:
    """(correct, predicted, true) entities of sentence-aligned tag sequences (strict IOB2)."""
    gold = set(chain(*Entities([list(s) for s in true], IOB2).entities))
    guess = set(chain(*Entities([list(s) for s in pred], IOB2).entities))
    return len(gold & guess), len(guess), len(gold)


def entity_scores(correct: int, predicted: int, true: int) -> Dict[str, float]:
    """Micro precision, recall and F1 of the counts (module docstring)."""
    return {"precision": correct / predicted if predicted else 0.0,
            "recall": correct / true if true else 0.0,
            "f1": 2 * correct / (predicted + true) if predicted + true else 0.0}


class EntityScore(Metric):
    """One of :data:`SCORES` over the entity counts given to :meth:`update` (summed over batches
    and ranks, computed at the end of the epoch)."""

    full_state_update = False
    higher_is_better = True

    def __init__(self, score: str):
        super().__init__()
        if score not in SCORES:
            raise ValueError(f"score must be one of {', '.join(SCORES)}, got {score!r}")
        self.score = score
        self.add_state("counts", torch.zeros(3, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, counts: torch.Tensor) -> None:
        """``counts``: (correct, predicted, true) of a batch (:func:`entity_counts`)."""
        self.counts += torch.as_tensor(counts, dtype=torch.long, device=self.counts.device)

    def compute(self) -> torch.Tensor:
        return torch.tensor(entity_scores(*self.counts.tolist())[self.score])
