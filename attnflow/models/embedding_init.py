"""Starting a model's word embedding from given vectors (the ``word_vectors`` context a data
module offers, e.g. :mod:`attnflow.data.word_vectors`); the models import it from here, so no
model depends on a data module."""

from __future__ import annotations

import torch


def init_embedding(embedding: torch.nn.Embedding, vectors, owner: str) -> None:
    """Copy ``vectors`` (V, dim) into ``embedding``; a shape that differs is a ValueError."""
    if vectors is None:
        return
    vectors = torch.as_tensor(vectors, dtype=embedding.weight.dtype)
    if tuple(vectors.shape) != tuple(embedding.weight.shape):
        raise ValueError(f"{owner}: word_vectors have shape {tuple(vectors.shape)}, the embedding "
                         f"(vocab_size, embed_dim) is {tuple(embedding.weight.shape)}")
    with torch.no_grad():
        embedding.weight.copy_(vectors)
