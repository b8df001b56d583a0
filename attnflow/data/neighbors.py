"""PyG's ``NeighborLoader`` resumable mid-epoch (:mod:`attnflow.data.resumable`), in a module of
its own: PyG's loaders are imported only where ``data.loader=neighbor``."""

from __future__ import annotations

from torch_geometric.loader import NeighborLoader

from attnflow.data.resumable import Resumable


class ResumableNeighborLoader(Resumable, NeighborLoader):
    """A ``NeighborLoader`` (the same arguments) that resumes mid-epoch."""
