"""Count-based word vectors from the training documents (no external data), as HAN (Yang et al.
2016) starts its embedding from word2vec trained on the task's texts: an SVD of the PPMI
word–context matrix, which matches SGNS with word2vec's tricks (Levy, Goldberg & Dagan 2015):

1. counts ``#(w, c)`` within a symmetric ``window`` inside each sentence, each pair weighted 1
   (``uniform``) or 1/distance (``harmonic``);
2. PPMI with context distribution smoothing (§3.1): ``P_α(c) = #(c)^α / Σ_c' #(c')^α``,
   ``PPMI(w, c) = max(0, log P(w, c) / (P(w) P_α(c)))``;
3. truncated SVD ``PPMI ≈ U Σ Vᵀ``, vectors ``W = U Σ^p`` (eigenvalue weighting p, §3.3).

The ⟨pad⟩ row is zero; rows are rescaled to a mean norm of ``scale · √dim`` (an N(0, 1) row's).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Literal, Sequence

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.linalg import svds

from attnflow.config.registry import NonNegativeFloat, PositiveFloat, PositiveInt

log = logging.getLogger(__name__)


@dataclasses.dataclass
class WordVectorsConfig:
    """``data.word_vectors`` (null = off); ``min_count``: rarer words get a zero vector;
    ``scale``: the rows' mean norm over √dim; ``seed``: the SVD's start vector."""

    dim: PositiveInt = 200
    window: PositiveInt = 5
    alpha: PositiveFloat = 0.75
    eig: NonNegativeFloat = 0.5
    min_count: PositiveInt = 1
    weighting: Literal["uniform", "harmonic"] = "harmonic"
    scale: PositiveFloat = 1.0
    seed: int = 0


def flatten(sentences: Sequence[Sequence[int]]):
    """(ids, lengths) of a list of id sentences."""
    lengths = np.array([len(s) for s in sentences], dtype=np.int64)
    ids = np.concatenate([np.asarray(s, dtype=np.int64) for s in sentences]) if len(sentences) \
        else np.zeros(0, np.int64)
    return ids, lengths


def cooccurrence(ids: np.ndarray, lengths: np.ndarray, vocab_size: int, window: int,
                 weighting: str = "harmonic", pad_id: int = 0):
    """Symmetric (V, V) co-occurrence counts (CSR) of ids within ``window`` positions inside one
    sentence (``ids`` one sentence after another, ``lengths`` words per sentence); one vectorised
    mask per offset; pairs with ``pad_id`` dropped."""
    ids = np.asarray(ids, dtype=np.int64)
    sent_of = np.repeat(np.arange(len(lengths)), lengths)
    rows, cols, vals = [], [], []
    for d in range(1, window + 1):
        same = sent_of[:-d] == sent_of[d:] if ids.size > d else np.zeros(0, bool)
        a, b = ids[:-d][same], ids[d:][same]
        keep = (a != pad_id) & (b != pad_id)
        a, b = a[keep], b[keep]
        w = 1.0 if weighting == "uniform" else 1.0 / d
        rows += [a, b]
        cols += [b, a]
        vals.append(np.full(2 * a.size, w))
    if not rows:
        return sp.csr_matrix((vocab_size, vocab_size))
    counts = sp.coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                           shape=(vocab_size, vocab_size))
    return counts.tocsr()  # duplicates summed


def ppmi(counts, alpha: float = 0.75):
    """``max(0, log(#(w,c) · Σ_c' #(c')^α / (#(w) · #(c)^α)))`` of the stored counts."""
    counts = sp.csr_matrix(counts, dtype=np.float64)
    counts.eliminate_zeros()  # stored zeros would give log(0)
    row = np.asarray(counts.sum(axis=1)).ravel()                     # #(w)
    col = np.asarray(counts.sum(axis=0)).ravel() ** alpha            # #(c)^α
    coo = counts.tocoo()
    pmi = np.log(coo.data) + np.log(col.sum()) - np.log(row[coo.row]) - np.log(col[coo.col])
    keep = pmi > 0
    return sp.csr_matrix((pmi[keep], (coo.row[keep], coo.col[keep])), shape=counts.shape)


def svd_vectors(matrix, dim: int, eig: float = 0.5, seed: int = 0) -> np.ndarray:
    """``U Σ^eig`` of the top ``dim`` singular triplets (ARPACK, start vector from ``seed``),
    ordered by σ, signs fixed (each column's largest entry positive): reproducible."""
    n = min(matrix.shape)
    if matrix.nnz == 0:
        return np.zeros((matrix.shape[0], dim))
    if dim >= n:  # ARPACK needs k < min(shape): a dense SVD for tiny vocabularies
        u, s, _ = np.linalg.svd(matrix.toarray())
        u, s = u[:, :dim], s[:dim]
        u = np.pad(u, ((0, 0), (0, dim - u.shape[1])))
        s = np.pad(s, (0, dim - s.size))
    else:
        v0 = np.random.default_rng(seed).standard_normal(n)
        u, s, _ = svds(matrix, k=dim, v0=v0)
        order = np.argsort(-s)
        u, s = u[:, order], s[order]
    sign = np.sign(u[np.abs(u).argmax(axis=0), np.arange(u.shape[1])])
    sign[sign == 0] = 1
    return (u * sign) * (s ** eig)


def train_word_vectors(ids: np.ndarray, lengths: np.ndarray, vocab_size: int,
                       cfg: WordVectorsConfig, pad_id: int = 0) -> torch.Tensor:
    """(vocab_size, cfg.dim) float32 word vectors of the id sentences (module docstring)."""
    start = time.perf_counter()
    counts = cooccurrence(ids, lengths, vocab_size, cfg.window, cfg.weighting, pad_id)
    if cfg.min_count > 1:
        rare = np.bincount(ids, minlength=vocab_size) < cfg.min_count
        keep = sp.diags((~rare).astype(np.float64))
        counts = (keep @ counts @ keep).tocsr()
        counts.eliminate_zeros()
    matrix = ppmi(counts, cfg.alpha)
    vectors = svd_vectors(matrix, cfg.dim, cfg.eig, cfg.seed)
    vectors[matrix.getnnz(axis=1) == 0] = 0.0  # no positive context (rare, unseen): exactly zero,
    vectors[pad_id] = 0.0                      # not the SVD's round-off
    norms = np.linalg.norm(vectors, axis=1)
    used = norms > 0
    if used.any():
        vectors *= cfg.scale * np.sqrt(cfg.dim) / norms[used].mean()
    log.info("word vectors: %d×%d from %d sentences (%d words with a vector), %.1f s",
             vocab_size, cfg.dim, len(lengths), int(used.sum()), time.perf_counter() - start)
    return torch.from_numpy(vectors.astype(np.float32))
