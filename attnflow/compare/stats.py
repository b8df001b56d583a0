"""Numbers that say how attention differs, per run, layer and head over the same rows.

Per row p (a distribution over its n columns), in bits:

- entropy H(p) = −Σ_j p_j log₂ p_j against the uniform distribution's log₂ n (their ratio: 1 is
  uniform, 0 one column); rows with one column are left out of the ratio;
- the largest weight max_j p_j;
- the Jensen–Shannon divergence JS(p, q) = ½ KL(p‖m) + ½ KL(q‖m), m = ½(p + q), between two
  runs' rows of the same example (Lin 1991), in [0, 1];
- diagonality (translation) 1 − Σ_j p_ij |i/I − j/J|, i and j from 1, averaged over the I rows:
  1 when each row attends where a monotone alignment puts it; a reversal scores lower.

Each figure is the mean over every row of the chosen examples.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import combinations
from typing import Dict, Iterable, Iterator, List, Sequence, Tuple

import numpy as np

from attnflow.compare.views import ExampleViews, View
from attnflow.viz.runs import natural

MEAN = "mean"  # the head column of the mean over heads


class CompareError(ValueError):
    """Runs that cannot be compared; printed as one line."""


def _valid(view: View) -> np.ndarray:
    """(R, C) bool: the columns each row is a distribution over."""
    return np.arange(view.weights.shape[-1]) < np.asarray(view.lengths)[:, None]


def entropy_bits(p: np.ndarray) -> np.ndarray:
    """H of each row of ``p`` (…, C) in bits; 0 · log 0 = 0."""
    p = np.asarray(p, dtype=float)
    logs = np.log2(np.where(p > 0, p, 1.0))
    return -(p * logs).sum(-1)


def js_bits(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """JS(p, q) of each row pair (…, C), in bits."""
    p, q = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    m = (p + q) / 2
    return (entropy_bits(m) - (entropy_bits(p) + entropy_bits(q)) / 2).clip(min=0.0)


def diagonality(weights: np.ndarray, lengths: Sequence[int]) -> np.ndarray:
    """1 − Σ_j α_ij |i/I − j/J| per head, averaged over the rows: ``weights`` (H, R, C), row i
    over its first ``lengths[i]`` = J columns, I = R rows."""
    H, R, C = weights.shape
    i = (np.arange(R) + 1.0)[:, None] / R
    J = np.maximum(np.asarray(lengths, dtype=float), 1.0)[:, None]
    dist = np.abs(i - (np.arange(C) + 1.0)[None, :] / J)
    dist = np.where(np.arange(C)[None, :] < np.asarray(lengths)[:, None], dist, 0.0)
    return 1.0 - (weights * dist[None]).sum(-1).mean(-1)


def with_mean(view: View) -> List[Tuple[str, np.ndarray]]:
    """(head name, (R, C) rows) for each head, and the mean over heads where there are several."""
    heads = [(str(h + 1), view.weights[h]) for h in range(view.heads)]
    return heads + [(MEAN, view.weights.mean(0))] if view.heads > 1 else heads


def _rows(view: View, w: np.ndarray) -> Iterator[Tuple[float, float, float]]:
    """(entropy, log₂ n, largest weight) of each row with n ≥ 1 columns."""
    for r, n in enumerate(np.asarray(view.lengths).tolist()):
        if n > 0:
            p = w[r, :n]
            yield float(entropy_bits(p)), float(np.log2(n)), float(p.max())


def run_stats(examples: Iterable[ExampleViews]) -> Dict[Tuple[str, str], dict]:
    """{(view name, head): {entropy, uniform, ratio, max, rows[, diagonality]}} over every row."""
    acc: Dict[Tuple[str, str], dict] = defaultdict(lambda: defaultdict(list))
    for ex in examples:
        for view in ex.views:
            for head, w in with_mean(view):
                a = acc[(view.name(), head)]
                for h, u, top in _rows(view, w):
                    a["entropy"].append(h)
                    a["uniform"].append(u)
                    a["max"].append(top)
                    if u > 0:
                        a["ratio"].append(h / u)
                if view.kind == "cross":
                    a["diagonality"].append(float(diagonality(w[None], view.lengths)[0]))
    return {key: _means(a) for key, a in acc.items()}


def _means(a: dict) -> dict:
    out = {k: float(np.mean(v)) if v else float("nan") for k, v in a.items()}
    out["rows"] = len(a["entropy"])
    return out


def check_rows(runs: Dict[str, List[ExampleViews]]) -> None:
    """Refuse runs that see an example's rows or columns differently (other data or tokens)."""
    (first, base), *rest = runs.items()
    for name, examples in rest:
        for a, b in zip(base, examples):
            mine = {v.name(): v for v in a.views}
            for v in b.views:
                m = mine.get(v.name())
                if m is not None and (m.rows, m.labels) != (v.rows, v.labels):
                    what, x, y = (("rows", m.rows, v.rows) if m.rows != v.rows else
                                  ("columns", next(p for p, q in zip(m.labels, v.labels) if p != q),
                                   next(q for p, q in zip(m.labels, v.labels) if p != q)))
                    raise CompareError(
                        f"{first} and {name} see {a.key} differently ({v.name()} {what}: "
                        f"{' '.join(x[:8])} … against {' '.join(y[:8])} …): their data or "
                        f"tokenisation differ; compare runs trained on the same data")


def pair_divergence(runs: Dict[str, List[ExampleViews]]) -> Dict[Tuple[str, str, str, str], float]:
    """{(run a, run b, view name, head): mean JS over the rows both have}, for each pair of runs
    and each view and head they share (heads by position; ``mean`` the mean over heads)."""
    out: Dict[Tuple[str, str, str, str], float] = {}
    for a, b in combinations(runs, 2):
        sums: Dict[Tuple[str, str], List[float]] = defaultdict(list)
        for ea, eb in zip(runs[a], runs[b]):
            theirs = {v.name(): v for v in eb.views}
            for va in ea.views:
                vb = theirs.get(va.name())
                if vb is None or vb.weights.shape[1:] != va.weights.shape[1:]:
                    continue
                hb = dict(with_mean(vb))
                for head, wa in with_mean(va):
                    if head in hb:
                        valid = _valid(va).any(-1)
                        sums[(va.name(), head)].extend(js_bits(wa, hb[head])[valid].tolist())
        out.update({(a, b, *k): float(np.mean(v)) for k, v in sums.items() if v})
    return out


def stats_table(runs: Dict[str, List[ExampleViews]], divergence: Dict) -> Tuple[List[str], List[List]]:
    """One row per run, view and head: entropy, uniform, ratio, largest weight, diagonality
    (translation), and the JS divergence from each other run."""
    names = list(runs)
    cols = ["run", "view", "head", "rows", "entropy (bits)", "uniform (bits)", "H / uniform",
            "largest weight", "diagonality"] + [f"JS vs {n}" for n in names]
    rows = []
    for name in names:
        for (view, head), s in sorted(run_stats(runs[name]).items(), key=lambda kv: natural(" ".join(kv[0]))):
            js = [divergence.get((name, o, view, head), divergence.get((o, name, view, head)))
                  for o in names]
            rows.append([name, view, head, s["rows"], s["entropy"], s["uniform"], s["ratio"],
                         s["max"], s.get("diagonality")] + [None if o == name else v
                                                            for o, v in zip(names, js)])
    return cols, rows
