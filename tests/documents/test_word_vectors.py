"""Word vectors from the training documents (attnflow/data/word_vectors.py): co-occurrence counts
and PPMI against dense hand computations, the SVD vectors' Gram matrix against the dense rank-k
approximation, shared contexts → similar vectors, and the data.word_vectors wiring (the model's
initial embedding, refusals before any work)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attnflow.data.documents import DocumentDataModule
from attnflow.data.word_vectors import (WordVectorsConfig, cooccurrence, flatten, ppmi, svd_vectors,
                                        train_word_vectors)
from attnflow.models.self_attentive import SelfAttentive
from attnflow.config.registry import DATA, MODELS, ConfigError
from attnflow.training.validate import resolve_config
from attnflow.training.run import train
from support import compose_cfg

CORPUS = [[2, 3, 4, 5, 2], [3, 3, 6], [7], [4, 0, 5, 2, 6, 7, 1], [6, 5, 4, 3, 2]]  # 0 = ⟨pad⟩


def dense_counts(sentences, V, window, weighting):
    c = np.zeros((V, V))
    for s in sentences:
        for i, a in enumerate(s):
            for j, b in enumerate(s):
                d = abs(i - j)
                if 0 < d <= window and a != 0 and b != 0:
                    c[a, b] += 1.0 if weighting == "uniform" else 1.0 / d
    return c


def dense_ppmi(c, alpha):
    total = c.sum()
    pw = c.sum(1) / total
    pc = c.sum(0) ** alpha / (c.sum(0) ** alpha).sum()
    out = np.zeros_like(c)
    for w in range(c.shape[0]):
        for k in range(c.shape[1]):
            if c[w, k] > 0:
                out[w, k] = max(0.0, np.log((c[w, k] / total) / (pw[w] * pc[k])))
    return out


@pytest.mark.parametrize("window,weighting,alpha", [(2, "uniform", 1.0), (3, "harmonic", 0.75)])
def test_counts_and_ppmi_match_a_dense_hand_computation(window, weighting, alpha):
    ids, lengths = flatten(CORPUS)
    counts = cooccurrence(ids, lengths, 8, window, weighting)
    expected = dense_counts(CORPUS, 8, window, weighting)
    np.testing.assert_allclose(counts.toarray(), expected)
    assert counts.toarray()[0].sum() == 0 and counts.toarray()[:, 0].sum() == 0  # ⟨pad⟩: no pairs
    np.testing.assert_allclose(ppmi(counts, alpha).toarray(), dense_ppmi(expected, alpha), atol=1e-12)


def _random_ppmi(V=40, seed=0):
    rng = np.random.default_rng(seed)
    sents = [rng.integers(1, V, size=rng.integers(3, 12)).tolist() for _ in range(200)]
    ids, lengths = flatten(sents)
    return ppmi(cooccurrence(ids, lengths, V, 4, "uniform"), 0.75)


@pytest.mark.parametrize("dim", [6, 40])  # ARPACK (k < V) and the dense fallback (k = V)
def test_svd_gram_matrix_is_the_rank_k_approximation(dim):
    m = _random_ppmi()
    u, s, vt = np.linalg.svd(m.toarray())
    mk = (u[:, :dim] * s[:dim]) @ vt[:dim]                              # rank-k PPMI
    w1 = svd_vectors(m, dim, eig=1.0)                                  # W = U Σ: W Wᵀ = M_k M_kᵀ
    np.testing.assert_allclose(w1 @ w1.T, mk @ mk.T, atol=1e-8)
    w_half = svd_vectors(m, dim, eig=0.5)                              # W = U √Σ: W Wᵀ = U Σ Uᵀ
    np.testing.assert_allclose(w_half @ w_half.T, (u[:, :dim] * s[:dim]) @ u[:, :dim].T, atol=1e-8)
    np.testing.assert_array_equal(w_half, svd_vectors(m, dim, eig=0.5))  # reproducible


def test_words_that_share_contexts_are_more_similar():
    # 2 'cat' and 3 'dog' share their contexts; 4 'car' and 5 'bus' share others
    rng = np.random.default_rng(1)
    pets, vehicles = [10, 11, 12, 13], [14, 15, 16, 17]
    sents = []
    for _ in range(300):
        for word, ctx in ((2, pets), (3, pets), (4, vehicles), (5, vehicles)):
            a, b = rng.choice(ctx, 2)
            sents.append([int(a), word, int(b)])
    ids, lengths = flatten(sents)
    w = train_word_vectors(ids, lengths, 18, WordVectorsConfig(dim=4, window=1, seed=3))
    w = torch.nn.functional.normalize(w, dim=1)

    def cos(i, j):
        return float(w[i] @ w[j])

    assert cos(2, 3) > 0.9 and cos(4, 5) > 0.9
    assert cos(2, 4) < 0.2 and cos(3, 5) < 0.2


def test_padding_row_zero_and_scale():
    ids, lengths = flatten(CORPUS)
    w = train_word_vectors(ids, lengths, 8, WordVectorsConfig(dim=3, window=2, scale=0.5))
    assert w.dtype == torch.float32 and w.shape == (8, 3)
    assert torch.count_nonzero(w[0]) == 0
    norms = w.norm(dim=1)
    assert abs(float(norms[norms > 0].mean()) - 0.5 * np.sqrt(3)) < 1e-5
    rare = train_word_vectors(ids, lengths, 8, WordVectorsConfig(dim=3, window=2, min_count=3))
    counts = np.bincount(ids, minlength=8)
    assert all(torch.count_nonzero(rare[i]) == 0 for i in range(8) if counts[i] < 3)


# -- data.word_vectors: the data module, the models, the config checks ---------------------------
TEXTS = ["A great film with a wonderful cast. I loved it.", "Awful, boring film. The worst cast.",
         "The story is moving and the acting great.", "Boring. Stupid plot, awful acting."] * 6


def _files(tmp_path):
    for split, n in (("train", 24), ("dev", 8)):
        with open(tmp_path / f"{split}.jsonl", "w") as f:
            for i in range(n):
                f.write(json.dumps({"text": TEXTS[i], "label": int(i % 2 == 0)}) + "\n")
    return [f"data.train_path={tmp_path / 'train.jsonl'}", f"data.val_path={tmp_path / 'dev.jsonl'}",
            "data.min_freq=1", "data.batch_size=8"]


TINY = ["experiment=han_imdb", "model.embed_dim=8", "model.word_encoder.hidden_dim=4",
        "model.sentence_encoder.hidden_dim=4", "pooling.dim=4", "trainer.max_epochs=1",
        "callbacks.progress_bar=none", "logger=csv", "trainer.accelerator=cpu",
        "trainer.enable_model_summary=false", "trainer.num_sanity_val_steps=0"]


@pytest.mark.slow
def test_han_starts_from_the_training_splits_vectors_and_the_run_evaluates(tmp_path):
    cfg = resolve_config(compose_cfg([*TINY, *_files(tmp_path),
                                      "data.word_vectors={dim:${model.embed_dim},window:2}"]))
    dm = DATA.build(cfg["data"], path="data")
    model = MODELS.build(cfg["model"], path="model", **dm.model_context())
    train_docs = dm.splits["train"]  # independently: the vectors of the training split only
    expected = train_word_vectors(np.concatenate(train_docs.ids), np.concatenate(train_docs.sent_lens),
                                  len(dm.vocab), WordVectorsConfig(dim=8, window=2))
    torch.testing.assert_close(model.embedding.weight.detach(), expected)
    assert torch.count_nonzero(model.embedding.weight[0]) == 0
    # a whole run trains, and evaluation rebuilds the model without the training split
    summary = train(compose_cfg([*TINY, *_files(tmp_path), "data.word_vectors={dim:8}"]), tmp_path / "run")
    from attnflow.cli.evaluate import main as eval_main

    out = tmp_path / "eval.json"
    assert eval_main([str(tmp_path / "run"), "split=val", "-o", str(out)]) == 0
    got = json.loads(out.read_text())
    metrics = got.get("metrics", got)
    assert abs(metrics["val/acc"] - summary["metrics"]["best/val/acc"]) < 1e-6


def test_self_attentive_takes_the_vectors_too():
    w = torch.randn(11, 6)
    w[0] = 0
    model = SelfAttentive(11, 2, 0, w, embed_dim=6, hops=2, mlp_dim=4,
                          encoder={"name": "rnn", "cell": "lstm", "hidden_dim": 3})
    torch.testing.assert_close(model.embedding.weight.detach(), w)
    with pytest.raises(ValueError, match=r"model 'self_attentive': word_vectors have shape \(11, 5\)"):
        SelfAttentive(11, 2, 0, torch.zeros(11, 5), embed_dim=6)


@pytest.mark.slow
def test_refusals_before_any_work(tmp_path):
    files = _files(tmp_path)
    with pytest.raises(ConfigError, match=r"word_vectors have shape \(1000, 16\).*\(1000, 8\)"):
        train(compose_cfg([*TINY, *files, "data.word_vectors={dim:16}"]), tmp_path / "r1")
    with pytest.raises(ConfigError, match=r"has no field 'windw' \(at 'data.word_vectors.windw'\)"
                                          r".*Did you mean 'window'"):
        train(compose_cfg([*TINY, *files, "data.word_vectors={dim:8,windw:2}"]), tmp_path / "r2")
    with pytest.raises(ConfigError, match=r"field 'weighting' \(at 'data.word_vectors.weighting'\) must be "
                                          r"one of 'uniform', 'harmonic'"):
        resolve_config(compose_cfg([*TINY, *files, "data.word_vectors={dim:8,weighting:idf}"]))
    assert not (tmp_path / "r1").exists() and not (tmp_path / "r2").exists()  # nothing was made
    for field, value, says in (("window", 0, ">= 1"), ("dim", 0, ">= 1"), ("min_count", 0, ">= 1"),
                               ("alpha", 0.0, "> 0"), ("scale", -1.0, "> 0"), ("eig", -0.5, ">= 0")):
        with pytest.raises(ConfigError, match=rf"field '{field}' \(at 'data.word_vectors.{field}'\) "
                                              rf"must be {says}, got {value}"):
            DocumentDataModule(train_path="t", val_path="v", word_vectors={"dim": 8, field: value})
    with pytest.raises(ConfigError, match="has no field 'dimm'"):  # built directly, too
        DocumentDataModule(train_path="t", val_path="v", word_vectors={"dimm": 3})
