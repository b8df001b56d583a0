"""Planetoid citation graphs (Cora, CiteSeer, PubMed) with the public split of Yang, Cohen &
Salakhutdinov 2016 (20 labelled nodes per class, 500 validation, 1000 test), as GAT (Veličković et
al. 2018) uses them. Read from PyG's raw layout ``<root>/<Name>/raw/ind.<name>.*`` with PyG's own
reader, the pickles unpickled with NumPy and SciPy classes only (no code run), made undirected as the GAT
authors' loader reads it; features row-normalised as in their code. Nothing is downloaded.
"""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path
from typing import Any, List, Literal, Mapping, Optional
from unittest import mock

import scipy.sparse
import torch
from torch_geometric.data import Data
from torch_geometric.io import planetoid as pyg_planetoid
from torch_geometric.utils import to_undirected

from attnflow.data.errors import DataError, missing_data
from attnflow.data.graph import GraphDataModule
from attnflow.config.registry import DATA, PositiveInt

NAMES = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}
RAW_FILES = ["x", "tx", "allx", "y", "ty", "ally", "graph", "test.index"]


# what the Planetoid raw files hold: NumPy arrays, SciPy sparse matrices, a defaultdict of lists
_ALLOWED = {("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "_reconstruct"),
            ("numpy._core.multiarray", "_reconstruct"), ("collections", "defaultdict"),
            ("builtins", "list"), ("__builtin__", "list"), ("builtins", "dict"), ("__builtin__", "dict"),
            ("_codecs", "encode")}  # str → bytes: how Python 3 writes array bytes at protocol 2
# the sparse matrices, from any scipy.sparse module path a SciPy version pickled them under
_SPARSE = {"csr_matrix": scipy.sparse.csr_matrix, "csc_matrix": scipy.sparse.csc_matrix}


class _Unpickler(pickle.Unpickler):
    """Loads only the types the raw files hold, so a crafted file cannot run code."""

    def find_class(self, module, name):
        if module.startswith("scipy.sparse") and name in _SPARSE:
            return _SPARSE[name]
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(
                f"a Planetoid raw file may hold only NumPy arrays, SciPy sparse matrices and lists; "
                f"it asks for {module}.{name}, which is not loaded")
        return super().find_class(module, name)


class _PickleShim:  # what torch_geometric.io.planetoid calls as ``pickle.load``
    @staticmethod
    def load(f, encoding="ASCII"):
        try:
            return _Unpickler(f, encoding=encoding).load()
        except (pickle.UnpicklingError, EOFError, ValueError) as err:
            what = "the file ends early: it is truncated or empty" if isinstance(err, EOFError) else err
            raise DataError(f"data 'planetoid': cannot read {getattr(f, 'name', 'a raw file')}: "
                            f"{what}") from None


# raw files that hold one row per node of the same node set: their row counts must agree
_SAME_ROWS = [("x", "y"), ("allx", "ally"), ("tx", "ty", "test.index")]


def _counting(read_file, folder: Path, key: str):
    """PyG's ``read_file`` that checks, once test.index is read, that the files of each node set
    have as many rows (a file cut at a line end parses without error, into a wrong graph)."""
    rows: dict = {}

    def read(folder_, prefix, name):
        try:
            out = read_file(folder_, prefix, name)
        except (RuntimeError, ValueError) as err:  # test.index: not a column of integers
            if isinstance(err, DataError):
                raise
            raise DataError(f"data 'planetoid': cannot read {folder / f'ind.{key}.{name}'}: {err}") from None
        if name != "graph":
            rows[name] = int(out.size(0)) if out.dim() else 0
        if name == RAW_FILES[-1]:
            for group in _SAME_ROWS:
                counts = [rows[n] for n in group]
                if len(set(counts)) > 1 or 0 in counts:
                    usual = max(set(counts), key=counts.count)
                    odd = [n for n, c in zip(group, counts) if c != usual or c == 0]
                    raise DataError(
                        f"data 'planetoid': {folder / f'ind.{key}.{odd[0]}'} looks truncated or empty: "
                        + ", ".join(f"ind.{key}.{n} has {c} rows" for n, c in zip(group, counts))
                        + " (each must have one row per node of the same set)")
        return out

    return read


def raw_folder(root: str | Path, name: str) -> Path:
    """``<root>/<Name>/raw`` of the graph ``name`` (Cora, CiteSeer or PubMed; any case), its raw
    files all there (else a :class:`~attnflow.data.errors.DataFileNotFoundError` naming them)."""
    key = name.lower()
    if key not in NAMES:
        raise ValueError(f"data 'planetoid': unknown data set '{name}' (at 'data.dataset'); "
                         f"known: {', '.join(NAMES.values())}")
    folder = Path(root) / NAMES[key] / "raw"
    missing = [f"ind.{key}.{s}" for s in RAW_FILES if not (folder / f"ind.{key}.{s}").is_file()]
    if missing:
        raise missing_data("data 'planetoid'", f"{NAMES[key]} is missing from {folder} (data.root="
                           f"{root}): no {', '.join(missing)}")
    return folder


def read_planetoid(root: str | Path, name: str) -> Data:
    """The graph ``name`` (Cora, CiteSeer or PubMed; any case) from ``<root>/<Name>/raw``."""
    folder, key = raw_folder(root, name), name.lower()
    with warnings.catch_warnings(), mock.patch.object(pyg_planetoid, "pickle", _PickleShim), \
            mock.patch.object(pyg_planetoid, "read_file", _counting(pyg_planetoid.read_file, folder, key)):
        warnings.simplefilter("ignore")
        data = pyg_planetoid.read_planetoid_data(str(folder), key)
    edges, n = data.edge_index.long().reshape(2, -1), data.num_nodes  # (none: a float tensor)
    outside = ((edges < 0) | (edges >= n)).any(0).nonzero()
    if len(outside):
        src, dst = edges[:, outside[0, 0]].tolist()
        raise DataError(f"data 'planetoid': {folder / f'ind.{key}.graph'}: node {src} lists neighbour "
                        f"{dst}, but the graph has {n} nodes (ids 0 to {n - 1})")
    # the authors' loader (networkx.from_dict_of_lists) reads i → j as undirected; PyG would not.
    # A graph without edges stays one: the attention's self-loops give each node itself
    data.edge_index = to_undirected(edges, num_nodes=n)
    return data


def normalize_rows(x: torch.Tensor) -> torch.Tensor:
    """x_i / Σ_f x_if (rows that sum to 0 stay 0)."""
    return x / x.sum(-1, keepdim=True).clamp(min=1e-12)


@DATA.register("planetoid")
class PlanetoidDataModule(GraphDataModule):
    """Cora, CiteSeer or PubMed with the public split, as one graph; ``root`` holds
    ``<Name>/raw/``; loader fields as in :mod:`attnflow.data.graph`."""

    source_fields = ("dataset",)

    known_multi_label = False  # Cora, CiteSeer, PubMed: one class per node
    # (features, classes) of each set (Yang et al. 2016, Table 1; Kipf & Welling 2017, Table 1)
    SIZES = {"Cora": (1433, 7), "CiteSeer": (3703, 6), "PubMed": (500, 3)}

    @classmethod
    def placeholder_context(cls, fields: Mapping[str, Any]) -> Optional[dict]:
        """The set's own sizes, for a build before the data is read."""
        in_dim, num_classes = cls.SIZES[fields.get("dataset", "Cora")]
        return {"in_dim": in_dim, "num_classes": num_classes}

    name = "planetoid"

    def __init__(self, *, dataset: Literal["Cora", "CiteSeer", "PubMed"] = "Cora", root: str = ".",
                 normalize_features: bool = True,
                 loader: Literal["full", "khop", "neighbor"] = "full",
                 batch_size: PositiveInt = 512, num_hops: PositiveInt = 2,
                 num_neighbors: List[int] = [10, 10],  # noqa: B006
                 seed: int = 1234):
        super().__init__(loader=loader, batch_size=batch_size, num_hops=num_hops,
                         num_neighbors=num_neighbors, seed=seed)
        self.dataset_name, self.root, self.normalize_features = dataset, root, normalize_features

    @classmethod
    def check_files(cls, fields: Mapping[str, Any], test: bool = True) -> None:
        """The raw files are there (nothing read): before a sweep's first job."""
        raw_folder(fields["root"], fields["dataset"])

    def load(self) -> Data:
        data = read_planetoid(self.root, self.dataset_name)
        if self.normalize_features:
            data.x = normalize_rows(data.x)
        return data
