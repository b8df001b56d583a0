"""attnflow-compare's statistics and alignment scores against independent computations."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import jensenshannon
from scipy.stats import entropy

from attnflow.compare.alignment import aer, read_pharaoh, word_alignment, word_ids
from attnflow.compare.stats import (CompareError, check_rows, diagonality, entropy_bits, js_bits,
                                    pair_divergence, run_stats)
from attnflow.compare.views import ExampleViews, View


def _view(w, kind="cross", rows=None, labels=None, lengths=None, layer=0, layers=1):
    w = np.asarray(w, dtype=float)
    H, R, C = w.shape
    lengths = np.full(R, C) if lengths is None else np.asarray(lengths)
    rows = rows or [f"t{r}" for r in range(R)]
    labels = labels or [[f"s{c}" for c in range(n)] for n in lengths]
    return View(kind, layer, layers, w, rows, labels, lengths)


def _rand_rows(rng, shape):
    w = rng.random(shape)
    return w / w.sum(-1, keepdims=True)


def test_entropy_and_js_match_scipy():
    rng = np.random.default_rng(0)
    p, q = _rand_rows(rng, (5, 7)), _rand_rows(rng, (5, 7))
    assert np.allclose(entropy_bits(p), [entropy(r, base=2) for r in p])
    assert np.allclose(js_bits(p, q), [jensenshannon(a, b, base=2) ** 2 for a, b in zip(p, q)])
    assert js_bits(p, p) == pytest.approx(np.zeros(5), abs=1e-12)
    one_hot = np.eye(3)
    assert js_bits(one_hot[0], one_hot[1]) == pytest.approx(1.0)  # disjoint: 1 bit


def test_diagonality_by_the_formula():
    rng = np.random.default_rng(1)
    w = _rand_rows(rng, (2, 4, 5))
    w[:, 3, 3:] = 0  # the last row over 3 columns
    w[:, 3] /= w[:, 3].sum(-1, keepdims=True)
    lengths = [5, 5, 5, 3]
    want = []
    for h in range(2):
        rows = [1 - sum(w[h, i, j] * abs((i + 1) / 4 - (j + 1) / n) for j in range(n))
                for i, n in enumerate(lengths)]
        want.append(np.mean(rows))
    assert np.allclose(diagonality(w, lengths), want)
    assert diagonality(np.eye(4)[None], [4] * 4)[0] == pytest.approx(1.0)
    assert diagonality(np.eye(4)[::-1][None].copy(), [4] * 4)[0] < 0.7  # a reversal


def test_run_stats_per_head_and_mean():
    rng = np.random.default_rng(2)
    w = _rand_rows(rng, (2, 3, 4))
    w[:, 2, 2:] = 0
    w[:, 2] /= w[:, 2].sum(-1, keepdims=True)
    ex = ExampleViews("val 0", "", [_view(w, lengths=[4, 4, 2])])
    stats = run_stats([ex])
    mean = w.mean(0)
    h = [entropy(mean[r, :n], base=2) for r, n in enumerate([4, 4, 2])]
    u = [np.log2(n) for n in (4, 4, 2)]
    got = stats[("cross", "mean")]
    assert got["entropy"] == pytest.approx(np.mean(h))
    assert got["ratio"] == pytest.approx(np.mean([a / b for a, b in zip(h, u)]))
    assert got["max"] == pytest.approx(np.mean([mean[r, :n].max() for r, n in enumerate([4, 4, 2])]))
    assert got["rows"] == 3 and set(stats) == {("cross", "1"), ("cross", "2"), ("cross", "mean")}


def test_pair_divergence_and_refusal():
    rng = np.random.default_rng(3)
    wa, wb = _rand_rows(rng, (1, 3, 4)), _rand_rows(rng, (1, 3, 4))
    runs = {"a": [ExampleViews("val 0", "", [_view(wa)])], "b": [ExampleViews("val 0", "", [_view(wb)])]}
    js = pair_divergence(runs)
    assert js[("a", "b", "cross", "1")] == pytest.approx(
        np.mean([jensenshannon(p, q, base=2) ** 2 for p, q in zip(wa[0], wb[0])]))
    check_rows(runs)
    runs["b"] = [ExampleViews("val 0", "", [_view(wb, rows=["x", "y", "z"])])]
    with pytest.raises(CompareError, match="see val 0 differently"):
        check_rows(runs)


def test_word_ids_of_tokenizers():
    assert word_ids(["\u2581the", "\u2581hous", "es", ".", "<eos>"]) == [0, 1, 1, 2, None]
    assert word_ids(["[CLS]", "the", "hous", "##es", "[SEP]"]) == [None, 0, 1, 1, None]
    assert word_ids(["a", "b", "c", "<eos>"]) == [0, 1, 2, None]


def test_aer_by_hand(tmp_path):
    gold_file = tmp_path / "gold.txt"
    gold_file.write_text("0-0 1?2\n0-1 1-0\n", encoding="utf-8")
    gold = read_pharaoh(gold_file, 2)
    assert gold[0] == ({(0, 0)}, {(0, 0), (1, 2)})
    links = [{(0, 0), (1, 1)}, {(0, 1), (1, 0)}]
    # |A∩S| = 1 + 2, |A∩P| = 1 + 2, |A| = 4, |S| = 1 + 2
    assert aer(links, gold) == pytest.approx(1 - (3 + 3) / (4 + 3))
    with pytest.raises(CompareError, match="line 1: '0_0'"):
        (tmp_path / "bad.txt").write_text("0_0\n", encoding="utf-8")
        read_pharaoh(tmp_path / "bad.txt", 1)


def test_word_alignment_sums_pieces():
    # target words: "▁ab" + "c" (one word), "<eos>"; source: "▁x", "▁y" + "z"
    alpha = np.array([[0.5, 0.3, 0.2],     # ab: x 0.5, yz 0.5
                      [0.1, 0.2, 0.7],     # c:  x 0.1, yz 0.9 → word mean: x 0.3, yz 0.7
                      [1.0, 0.0, 0.0]])    # <eos>: left out
    links = word_alignment(alpha, ["\u2581ab", "c", "<eos>"], ["\u2581x", "\u2581y", "z"])
    assert links == {(1, 0)}


def test_word_view_sums_columns_and_averages_rows_of_a_words_pieces():
    from attnflow.compare.words import per_word, units, word_view

    assert units(["\u2581a", "\u2581ho", "use", ".", "<eos>"]) == ([0, 1, 1, 2, 3], ["a", "house", ".", "<eos>"])
    rng = np.random.default_rng(4)
    w = _rand_rows(rng, (2, 3, 4))
    rows, cols = ["\u2581ab", "c", "<eos>"], ["\u2581x", "\u2581y", "z", "<eos>"]
    view = word_view(_view(w, rows=rows, labels=[cols] * 3))
    want = np.stack([np.stack([(w[h, 0] + w[h, 1]) / 2, w[h, 2]]) for h in range(2)])  # rows
    want = np.stack([want[..., 0], want[..., 1] + want[..., 2], want[..., 3]], -1)     # columns
    assert np.allclose(view.weights, want) and view.rows == ["abc", "<eos>"]
    assert view.labels == [["x", "yz", "<eos>"]] * 2 and view.lengths.tolist() == [3, 3]
    # two runs splitting the same words differently line up per word; a causal view is left out
    other = _view(np.ones((1, 2, 3)) / 3, rows=["\u2581abc", "<eos>"], labels=[["\u2581x", "\u2581yz", "<eos>"]] * 2)
    causal = _view(np.ones((1, 2, 2)) / 2, kind="decoder_self", rows=["a", "b"], labels=[["a"], ["a", "b"]],
                   lengths=[1, 2])
    runs, left = per_word({"a": [ExampleViews("val 0", "", [_view(w[:1], rows=rows, labels=[cols] * 3), causal])],
                           "b": [ExampleViews("val 0", "", [other])]})
    assert left == ["decoder_self"] and [len(e.views) for r in runs.values() for e in r] == [1, 1]
    assert runs["a"][0].views[0].labels[0] == runs["b"][0].views[0].labels[0] == ["x", "yz", "<eos>"]
    check_rows(runs)
