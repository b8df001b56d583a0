"""A generated graph for node classification: a stochastic block model of N nodes in C
communities (edge probability ``p_in`` within, ``p_out`` across; undirected), features the node's
community centroids plus Gaussian noise. ``multi_label``: a second community with probability
``extra_label_prob`` and y (N, C) 0/1, as PPI in Veličković et al. 2018. Deterministic in ``seed``.
"""

from __future__ import annotations

from typing import Annotated, List, Literal, Sequence

import torch
from torch_geometric.data import Data

from attnflow.data.graph import GraphDataModule
from attnflow.config.registry import DATA, ConfigError, NonNegativeFloat, PositiveInt, Probability, Range


def make_sbm_graph(num_nodes: int, num_classes: int, feature_dim: int, p_in: float, p_out: float,
                   noise: float, multi_label: bool, extra_label_prob: float,
                   split: List[float], seed: int) -> Data:
    g = torch.Generator().manual_seed(seed)
    N, C = num_nodes, num_classes
    member = torch.zeros(N, C)
    member[torch.arange(N), torch.randint(0, C, (N,), generator=g)] = 1.0
    if multi_label:
        extra = torch.rand(N, generator=g) < extra_label_prob
        member[extra.nonzero().view(-1), torch.randint(0, C, (int(extra.sum()),), generator=g)] = 1.0
    share = (member @ member.t()) > 0
    prob = torch.where(share, torch.tensor(p_in), torch.tensor(p_out))
    upper = torch.triu(torch.rand(N, N, generator=g) < prob, diagonal=1)
    row, col = upper.nonzero().t()
    edge_index = torch.cat([torch.stack([row, col]), torch.stack([col, row])], dim=1)
    centroids = torch.randn(C, feature_dim, generator=g)
    x = member @ centroids + noise * torch.randn(N, feature_dim, generator=g)
    y = member.long() if multi_label else member.argmax(-1)
    perm = torch.randperm(N, generator=g)
    n_train, n_val = int(split[0] * N), int(split[1] * N)
    masks = {}
    for name, idx in (("train", perm[:n_train]), ("val", perm[n_train:n_train + n_val]),
                      ("test", perm[n_train + n_val:])):
        masks[name] = torch.zeros(N, dtype=torch.bool)
        masks[name][idx] = True
    return Data(x=x, edge_index=edge_index, y=y, train_mask=masks["train"],
                val_mask=masks["val"], test_mask=masks["test"])


def _check_split(split: Sequence[float], num_nodes: int) -> None:
    """``split`` = [train, val] fractions that leave every split of ``num_nodes`` non-empty."""
    if len(split) != 2 or min(split) <= 0 or sum(split) >= 1:
        raise ConfigError(f"data 'synthetic_graph': field 'split' (at 'data.split') must be [train, "
                          f"val] fractions with train + val < 1, got {list(split)}")
    n_train, n_val = int(split[0] * num_nodes), int(split[1] * num_nodes)
    if min(n_train, n_val, num_nodes - n_train - n_val) < 1:
        raise ConfigError(f"data 'synthetic_graph': split {list(split)} of {num_nodes} nodes leaves "
                          f"an empty split ({n_train} train, {n_val} val, "
                          f"{num_nodes - n_train - n_val} test); raise data.num_nodes or the "
                          f"fractions of data.split")


@DATA.register("synthetic_graph")
class SyntheticGraphDataModule(GraphDataModule):
    """A stochastic-block-model graph; ``split``: train and val fractions, the rest test."""

    name = "synthetic_graph"
    def __init__(self, *, num_nodes: Annotated[int, Range(ge=4)] = 400,
                 num_classes: Annotated[int, Range(ge=2)] = 4, feature_dim: PositiveInt = 16,
                 p_in: Annotated[float, Range(ge=0, le=1)] = 0.05,
                 p_out: Annotated[float, Range(ge=0, le=1)] = 0.005, noise: NonNegativeFloat = 1.0,
                 multi_label: bool = False, extra_label_prob: Probability = 0.5,
                 split: List[float] = [0.5, 0.25],  # noqa: B006
                 loader: Literal["full", "khop", "neighbor"] = "full",
                 batch_size: PositiveInt = 64, num_hops: PositiveInt = 2,
                 num_neighbors: List[int] = [10, 10],  # noqa: B006
                 seed: int = 1234):
        super().__init__(loader=loader, batch_size=batch_size, num_hops=num_hops,
                         num_neighbors=num_neighbors, seed=seed)
        _check_split(split, num_nodes)
        self.kw = dict(num_nodes=num_nodes, num_classes=num_classes, feature_dim=feature_dim,
                       p_in=p_in, p_out=p_out, noise=noise, multi_label=multi_label,
                       extra_label_prob=extra_label_prob, split=list(split), seed=seed)

    def load(self) -> Data:
        return make_sbm_graph(**self.kw)
