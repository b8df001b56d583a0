"""Node classification on one graph: the LightningDataModule the graph data sets share.

A subclass's ``load()`` gives a ``torch_geometric.data.Data`` with ``x`` (N, F), ``edge_index``,
``y`` ((N,) ids or (N, C) 0/1) and boolean ``<split>_mask``; each batch is such a ``Data`` whose
``<split>_mask`` marks the nodes the split's loss and metrics count. ``loader``: ``full`` (the
whole graph each step, as Veličković et al. 2018 train), ``khop`` (seed batches of ``batch_size``
with their ``num_hops``-hop subgraph: a ``num_hops``-layer model sees each seed's whole receptive
field) or ``neighbor`` (PyG's ``NeighborLoader``; needs pyg-lib or torch-sparse).
"""

from __future__ import annotations

import inspect
from typing import Any, List, Mapping, Optional, Sequence

import pytorch_lightning as pl
import torch
import torch_geometric.typing as pyg_typing
from torch.utils.data import DataLoader, Dataset
from torch_geometric.data import Data
from torch_geometric.loader import NeighborLoader
from torch_geometric.utils import k_hop_subgraph

from attnflow.config.contracts import DataContract
from attnflow.config.registry import ConfigError
from attnflow.data.base import eval_sampler
from attnflow.data.examples import example_indices, spread_over_labels
from attnflow.data.neighbors import ResumableNeighborLoader
from attnflow.data.resumable import ResumableDataLoader
from attnflow.io.console import warn_unread

SPLITS = ("train", "val", "test")


def _first(items):
    return items[0]


def neighbor_sampling_available() -> bool:
    return bool(pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE)


class KHopBatches(Dataset):
    """Item b: the ``num_hops``-hop subgraph around seed batch b, seeds marked by ``<split>_mask``."""

    def __init__(self, data: Data, split: str, batch_size: int, num_hops: int, seed: int):
        self.data, self.split, self.num_hops = data, split, num_hops
        nodes = data[f"{split}_mask"].nonzero().view(-1)
        g = torch.Generator().manual_seed(seed)
        nodes = nodes[torch.randperm(nodes.numel(), generator=g)] if split == "train" else nodes
        self.batches = list(nodes.split(max(1, batch_size)))

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, b: int) -> Data:
        seeds = self.batches[b]
        subset, edge_index, mapping, _ = k_hop_subgraph(
            seeds, self.num_hops, self.data.edge_index, relabel_nodes=True,
            num_nodes=self.data.num_nodes)
        out = Data(x=self.data.x[subset], edge_index=edge_index, y=self.data.y[subset])
        for s in SPLITS:
            out[f"{s}_mask"] = torch.zeros(subset.numel(), dtype=torch.bool)
        out[f"{self.split}_mask"][mapping] = True
        out.n_id = subset
        return out


def class_names(graph: Data, num_classes: int) -> List[str]:
    """The graph's class names where its files give some, else 0 … C−1."""
    return [str(c) for c in (graph.class_names if "class_names" in graph else range(num_classes))]


class GraphDataModule(DataContract, pl.LightningDataModule):
    """Base class: one graph, full-batch or mini-batch loaders (see the module docstring)."""

    name = "graph"
    interface = "graph"  # graphs: the gat model, the node_classification task

    def __init__(self, *, loader: str = "full", batch_size: int = 512, num_hops: int = 2,
                 num_neighbors: Optional[List[int]] = None, seed: int = 1234):
        super().__init__()
        if loader == "neighbor" and not neighbor_sampling_available():
            raise ConfigError(
                f"data '{self.name}': data.loader=neighbor (PyG's NeighborLoader) needs pyg-lib or "
                "torch-sparse, neither installed: pip install pyg-lib -f https://data.pyg.org/whl/"
                "torch-2.13.0+cpu.html (or +cu128), or use data.loader=khop (no extra packages).")
        # (not the seed: it follows the run's seed, so a seed sweep would warn in every job)
        given = {"batch_size": batch_size, "num_hops": num_hops, "num_neighbors": num_neighbors}
        read = {"batch_size": loader != "full", "num_hops": loader == "khop",
                "num_neighbors": loader == "neighbor"}
        defaults = inspect.signature(type(self).__init__).parameters
        for field, value in given.items():
            if not read[field] and value is not None and value != defaults[field].default:
                warn_unread(f"data '{self.name}': {field}={value}", f"loader={loader} does not read it")
        self.loader, self.batch_size, self.num_hops = loader, batch_size, num_hops
        self.num_neighbors = list(num_neighbors or [10, 10])
        self.seed = seed
        self.data: Optional[Data] = None

    def load(self) -> Data:
        raise NotImplementedError

    def _graph(self) -> Data:
        if self.data is None:
            self.data = self.load()
        return self.data

    @property
    def multi_label(self) -> bool:
        return self._graph().y.dim() == 2

    @property
    def num_classes(self) -> int:
        y = self._graph().y
        return int(y.shape[1]) if y.dim() == 2 else int(y.max()) + 1

    @classmethod
    def placeholder_context(cls, fields: Mapping[str, Any]) -> Optional[dict]:
        return {"in_dim": fields.get("feature_dim", 16), "num_classes": fields.get("num_classes", 3)}

    def model_context(self) -> dict:
        return {"in_dim": int(self._graph().x.shape[1]), "num_classes": self.num_classes}

    def task_context(self) -> dict:
        return {"num_classes": self.num_classes, "multi_label_data": self.multi_label}

    def label_names(self) -> List[str]:
        return class_names(self._graph(), self.num_classes)

    def setup(self, stage: Optional[str] = None) -> None:
        self._graph()

    def _loader(self, split: str) -> DataLoader:
        data, train = self._graph(), split == "train"
        loader = ResumableDataLoader if train else DataLoader
        if self.loader == "full":
            return loader([data], batch_size=1, collate_fn=_first)
        if self.loader == "khop":
            ds = KHopBatches(data, split, self.batch_size, self.num_hops, self.seed)
            sampler = None if train else eval_sampler(ds)  # DDP: each seed once
            return loader(ds, batch_size=1, shuffle=train, sampler=sampler, collate_fn=_first)

        def mark_seeds(batch: Data) -> Data:
            for s in SPLITS:
                batch[f"{s}_mask"] = torch.zeros(batch.num_nodes, dtype=torch.bool)
            batch[f"{split}_mask"][: batch.batch_size] = True
            return batch

        return (ResumableNeighborLoader if train else NeighborLoader)(
            data, num_neighbors=self.num_neighbors, batch_size=self.batch_size,
            input_nodes=data[f"{split}_mask"], shuffle=train, transform=mark_seeds)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train")

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")

    def full_graph(self) -> Data:
        """The whole graph (for pictures and analysis)."""
        return self._graph()

    def example_batch(self, n: int, split: str = "val", ids: Optional[Sequence[int]] = None) -> dict:
        """``{"graph": the whole graph, "nodes": n node ids of the split}`` for dashboards, the
        nodes taken across the classes (multi-label: by each node's first class); ``ids``:
        those nodes of the graph instead."""
        data = self._graph()
        if ids is not None:
            return {"graph": data, "nodes": torch.tensor(example_indices(data.num_nodes, n, ids))}
        nodes = data[f"{split}_mask"].nonzero().flatten()
        y = data.y[nodes]
        return {"graph": data, "nodes": nodes[spread_over_labels(y.argmax(-1) if y.dim() == 2 else y, n)]}
