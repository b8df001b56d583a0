"""One comparison: the same examples through every run's best checkpoint, their attention views,
the statistics over them, and the diagnostics of the literature (Jain & Wallace 2019 for
classifiers; AER or diagonality for translation)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from attnflow.compare.alignment import aer, read_pharaoh, word_alignment
from attnflow.compare.collect import collect
from attnflow.compare.jain_wallace import jain_wallace
from attnflow.compare.loading import load_task
from attnflow.compare.runs import Named, open_runs
from attnflow.compare.stats import CompareError, check_rows, pair_divergence, stats_table
from attnflow.compare.views import ExampleViews, pick
from attnflow.compare.words import per_word


@dataclass
class Choice:
    """What is compared: ``examples`` first validation examples, those of ``ids`` (nodes for a
    graph), or the texts ``texts`` (translation: ``source<TAB>reference``); the pictures'
    ``layer`` and ``head`` (0-based; None: last layer, mean over heads)."""

    examples: int = 8
    ids: Optional[List[int]] = None
    texts: Optional[List[str]] = None
    layer: Optional[int] = None
    head: Optional[int] = None
    permutations: int = 20
    alignments: Optional[Path] = None
    device: str = "cpu"


@dataclass
class Comparison:
    paths: Dict[str, Path]
    examples: Dict[str, List[ExampleViews]]
    columns: List[str]
    table: List[List]
    divergence: Dict
    diagnostics: Dict[str, Optional[dict]] = field(default_factory=dict)
    alignment: Dict[str, Optional[float]] = field(default_factory=dict)
    family: str = ""
    note: str = ""  # how the runs were lined up, where not token by token

    @property
    def labels(self) -> List[str]:
        return list(self.examples)

    def keys(self) -> List[str]:
        return [e.key for e in next(iter(self.examples.values()))]


def _views_of(run, choice: Choice):
    """(examples, Jain & Wallace's figures or None, family) of one run."""
    task, dm, _ = load_task(run, choice.device)
    if choice.texts:
        batch, keys = dm.text_batch(choice.texts), [f"text {i + 1}" for i in range(len(choice.texts))]
    else:
        batch = dm.example_batch(choice.examples, ids=choice.ids)
        keys = None if choice.ids is None else [f"val {i}" for i in choice.ids]
    views = collect(task, batch, choice.layer, choice.head, keys)
    if not views:
        raise CompareError(f"{run.run_dir}: no validation examples to compare")
    diagnosed = jain_wallace(task, batch, choice.permutations) if choice.permutations else None
    cfg = run.config
    return views, diagnosed, (f"model '{cfg['model'].get('name')}', task '{cfg['task'].get('name')}', "
                              f"data '{cfg['data'].get('name')}'")


def build_comparison(named: Named, choice: Choice) -> Comparison:
    """Every run of ``named`` on the chosen examples; refused in one line where runs differ in
    family, data set or tokenisation."""
    runs = open_runs(named, choice.device)
    examples, diagnostics, family = {}, {}, ""
    for label, run in runs.items():
        examples[label], diagnostics[label], family = _views_of(run, choice)
    examples, note = lined_up(examples)
    divergence = pair_divergence(examples)
    columns, table = stats_table(examples, divergence)
    out = Comparison({label: run.run_dir for label, run in runs.items()}, examples, columns, table,
                     divergence, diagnostics, family=family, note=note)
    if choice.alignments:
        out.alignment = {label: alignment_error(ex, choice) for label, ex in examples.items()}
    return out


def lined_up(examples: Dict[str, List[ExampleViews]]):
    """(examples, note): as they are where every run sees the same tokens, else per word where the
    runs only tokenise the same words differently; else refused, naming the words that differ."""
    try:
        check_rows(examples)
        return examples, ""
    except CompareError:
        words, left = per_word(examples)
        check_rows(words)  # (refused: what differs word by word)
    return words, ("compared per word: the runs tokenise differently (sub-word weights summed)"
                   + (f"; left out: {', '.join(left)}" if left else ""))


def alignment_error(examples: Sequence[ExampleViews], choice: Choice) -> Optional[float]:
    """AER of the chosen layer's cross-attention (mean over heads) against ``--alignments``."""
    gold = read_pharaoh(choice.alignments, len(examples))
    links = []
    for ex in examples:
        view = pick(ex.views, "cross", choice.layer)
        if view is None:
            raise CompareError("--alignments: the runs have no cross-attention (translation only)")
        links.append(word_alignment(view.weights.mean(0), view.rows, view.labels[0] if view.labels else []))
    return aer(links, gold)


def fmt(value) -> str:
    """A figure as shown: 3 decimals, '—' for none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, (float, np.floating)):
        return f"{value:.3f}"
    return str(value)
