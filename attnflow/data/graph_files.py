"""Node classification on the user's own graph, named in YAML; one of three sources:

- ``dataset``: a ``torch_geometric.datasets`` class (``Amazon``, ``Coauthor``, ``WikiCS``, …)
  with ``dataset_args``, its raw files under ``root`` as the class lays them out. Nothing is
  downloaded: missing raw files are refused naming them; PyG's processed copy goes to a
  temporary folder, so ``root`` may be read-only.
- ``path``: a saved ``torch_geometric.data.Data`` or a dict of its tensors (``.pt``), read
  weights-only (PyG's data classes are the only globals allowed).
- ``nodes`` and ``edges``: a node table (an id, a label and feature columns) and an edge list
  (a source and a target id per row), each ``.csv``/``.tsv`` (a header row), ``.jsonl`` or
  ``.parquet`` (:mod:`attnflow.data.tables`). Ids may be strings; labels ints or strings
  (``labels``, else sorted); a node without a label is in no split.

Masks come with the graph (``train_mask``…; a 2-D mask: its first column) or a ``split`` column
of ``train``/``val``/``test``, else are drawn: ``split`` fractions of the labelled nodes, seeded.
"""

from __future__ import annotations

import inspect
import logging
import math
import pkgutil
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Literal, Mapping, Optional

import torch
import torch_geometric.datasets as datasets
from torch_geometric.data import Data, Dataset
from torch_geometric.utils import to_undirected

from attnflow.config.registry import DATA, ConfigError, PositiveInt, suggest
from attnflow.data.base import check_labels, class_label
from attnflow.data.errors import DataError, missing_data
from attnflow.data.graph import SPLITS, GraphDataModule
from attnflow.data.planetoid import normalize_rows
from attnflow.data.tables import rows
from attnflow.io.console import warn_unread

log = logging.getLogger(__name__)
OWNER = "data 'graph'"


def pyg_dataset(name: str, args: Mapping[str, Any], root: str) -> Data:
    """Graph 0 of the PyG data set class ``name`` from raw files already under ``root`` (a class
    that takes no ``root`` holds its graph in its code)."""
    classes = {n: c for n, c in vars(datasets).items() if isinstance(c, type) and issubclass(c, Dataset)}
    if name not in classes:
        raise ConfigError(f"{OWNER}: torch_geometric.datasets has no class '{name}' (at "
                          f"'data.dataset').{suggest(name, sorted(classes))}")
    cache = tempfile.mkdtemp(prefix="attnflow-pyg-")

    def offline(self):
        missing = [p for p in self.raw_paths if not Path(p).exists()]
        raise missing_data(OWNER, f"{name} needs its raw files under data.root={root}; missing: "
                                  f"{', '.join(missing)}")

    local = type(name, (classes[name],), {"download": offline,
                                          "processed_dir": property(lambda self: cache)})
    files = "root" in inspect.signature(classes[name]).parameters  # (KarateClub: none to read)
    if root and not files:
        warn_unread(f"data.root={root}", f"{name} holds its graph in its code")
    try:
        return local(root=root, **args)[0] if files else classes[name](**args)[0]
    except (DataError, ConfigError):
        raise
    except TypeError as err:  # an argument the class does not take
        raise ConfigError(f"{OWNER}: data.dataset_args for {name}: {err}") from None
    except Exception as err:  # noqa: BLE001 — PyG's reading of the user's files: one line
        raise DataError(f"{OWNER}: cannot read {name} under {root}: {type(err).__name__}: {err}") from None


def saved_graph(path: str) -> Data:
    """A ``Data`` (or a dict of its tensors) saved with ``torch.save``, read weights-only."""
    file = Path(path)
    if not file.is_file():
        raise missing_data(OWNER, f"file not found: {file} (at 'data.path')")
    unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(file)
    foreign = [g for g in unsafe if not g.startswith("torch_geometric.data.")]
    if foreign:
        raise DataError(f"{OWNER}: {file} holds {foreign[0]}, not only tensors and PyG's data "
                        f"classes; save data.to_dict() or a Data")
    allowed = [pkgutil.resolve_name(g) for g in unsafe]
    try:
        with torch.serialization.safe_globals(allowed):
            obj = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 — a damaged file: one line
        raise DataError(f"{OWNER}: cannot read {file}: {str(err).splitlines()[0]}") from None
    if isinstance(obj, dict):
        obj = Data(**obj)
    if not isinstance(obj, Data):
        raise DataError(f"{OWNER}: {file} holds a {type(obj).__name__}, not a torch_geometric Data")
    return obj


def _float(value: Any, where: str, column: str, node: Any) -> List[float]:
    values = value if isinstance(value, list) else [value]
    try:
        out = [float(v) for v in values]
    except (TypeError, ValueError):
        raise DataError(f"{where}: {column}={value!r} is not a number (a feature column); name "
                        f"the feature columns with data.feature_fields") from None
    for k, v in enumerate(out):
        if not math.isfinite(v):
            item = f" (item {k})" if isinstance(value, list) else ""
            raise DataError(f"{where}: node {node!r}, column '{column}'{item} is {v}: features "
                            f"must be finite numbers")
    return out


def check_finite(x: torch.Tensor, where: str, node_ids: Optional[List[str]] = None) -> None:
    """Every feature of ``x`` (nodes, features) finite, else a :class:`DataError` naming the
    first node (index, and id where known) and column that is not."""
    bad = (~torch.isfinite(x.float())).nonzero()
    if len(bad):
        node, column = (int(i) for i in bad[0])
        name = f" ({node_ids[node]!r})" if node_ids and node < len(node_ids) else ""
        raise DataError(f"{OWNER}: {where}: node {node}{name}, feature column {column} is "
                        f"{float(x[node, column])}: x must be finite ({len(bad)} value(s) are not)")


class _Fields:
    """The node table's and edge list's field names (``data.*_field``)."""

    def __init__(self, id_field: str, label_field: str, split_field: str, source_field: str,
                 target_field: str, feature_fields: Optional[List[str]]):
        self.id, self.label, self.split = id_field, label_field, split_field
        self.source, self.target, self.features = source_field, target_field, feature_fields


def table_graph(nodes: str, edges: str, f: _Fields, labels: Optional[list]) -> Data:
    """The graph of a node table and an edge list (module docstring)."""
    table = list(rows(nodes, [f.id, f.label], OWNER))
    if not table:
        raise DataError(f"{OWNER}: {nodes} has no nodes")
    columns = list(table[0][1])
    features = f.features or [c for c in columns if c not in (f.id, f.label, f.split)]
    index, xs, raw, splits = {}, [], [], []
    for where, row in table:
        at = f"{OWNER}: {nodes} {where}"
        for field in (f.id, f.label, *features):
            if field not in row:
                raise DataError(f"{at} has no column '{field}' (columns: {', '.join(map(str, row))})")
        if row[f.id] in index:
            raise DataError(f"{at}: node {row[f.id]!r} is listed twice")
        index[row[f.id]] = len(index)
        xs.append([v for c in features for v in _float(row[c], at, c, row[f.id])])
        raw.append(None if row[f.label] in (None, "") else row[f.label])
        splits.append(row.get(f.split))
    known = check_labels(labels, OWNER)
    first, classes = None, (known, "data.labels") if known else None
    for i, (value, (where, _)) in enumerate(zip(raw, table)):
        if value is not None:
            raw[i] = first = class_label(value, classes, f"{OWNER}: {nodes} {where}", f.label, first)
    values = known or sorted({v for v in raw if v is not None})
    ids = {v: i for i, v in enumerate(values)}
    data = Data(x=torch.tensor(xs, dtype=torch.float), y=torch.tensor([ids.get(v, -1) for v in raw]),
                edge_index=_edges(edges, f, index, nodes))
    data.class_names, data.node_ids = [str(v) for v in values], [str(i) for i in index]
    if any(s not in (None, "") for s in splits):
        for name in SPLITS:
            data[f"{name}_mask"] = torch.tensor([s == name for s in splits])
    return data


def _edges(edges: str, f: _Fields, index: Dict[Any, int], nodes: str) -> torch.Tensor:
    pairs = []
    for where, row in rows(edges, [f.source, f.target], OWNER):
        pair = []
        for field, setting in ((f.source, "source_field"), (f.target, "target_field")):
            if field not in row:
                raise DataError(f"{OWNER}: {edges} {where} has no column '{field}' (columns: "
                                f"{', '.join(map(str, row))}); set data.{setting}")
            if row[field] not in index:
                raise DataError(f"{OWNER}: {edges} {where}: {field}={row[field]!r} is not a node of {nodes}")
            pair.append(index[row[field]])
        pairs.append(pair)
    return torch.tensor(pairs, dtype=torch.long).t().reshape(2, -1)


def draw_masks(y: torch.Tensor, fractions: List[float], seed: int) -> Dict[str, torch.Tensor]:
    """``fractions`` (train, val, test) of the labelled nodes (y ≥ 0), a seeded permutation."""
    labelled = (y >= 0).nonzero().flatten() if y.dim() == 1 else torch.arange(y.shape[0])
    order = labelled[torch.randperm(len(labelled), generator=torch.Generator().manual_seed(seed))]
    sizes = [int(round(p * len(order))) for p in fractions]
    masks, start = {}, 0
    for name, size in zip(SPLITS, sizes):
        masks[f"{name}_mask"] = torch.zeros(y.shape[0], dtype=torch.bool)
        masks[f"{name}_mask"][order[start:start + size]] = True
        start += size
    return masks


@DATA.register("graph")
class GraphFilesDataModule(GraphDataModule):
    """One graph from the user's files (module docstring); loader fields as in
    :mod:`attnflow.data.graph`; ``split``: train, val, test fractions where no masks are given."""

    source_fields = ("dataset", "path", "nodes", "edges", "label_field")

    name = "graph"

    @classmethod
    def placeholder_context(cls, fields: Mapping[str, Any]) -> Optional[dict]:
        return None  # the sizes are the files'

    def __init__(self, *, dataset: Optional[str] = None, dataset_args: Dict[str, Any] = {},  # noqa: B006
                 root: str = "", path: str = "", nodes: str = "", edges: str = "",
                 id_field: str = "id", label_field: str = "label", split_field: str = "split",
                 feature_fields: Optional[List[str]] = None, source_field: str = "source",
                 target_field: str = "target", labels: Optional[List[Any]] = None,
                 split: List[float] = [0.6, 0.2, 0.2], undirected: bool = True,  # noqa: B006
                 normalize_features: bool = False,
                 loader: Literal["full", "khop", "neighbor"] = "full",
                 batch_size: PositiveInt = 512, num_hops: PositiveInt = 2,
                 num_neighbors: List[int] = [10, 10],  # noqa: B006
                 seed: int = 1234):
        super().__init__(loader=loader, batch_size=batch_size, num_hops=num_hops,
                         num_neighbors=num_neighbors, seed=seed)
        given = [k for k, v in (("dataset", dataset), ("path", path), ("nodes", nodes)) if v]
        if len(given) != 1 or bool(nodes) != bool(edges):
            raise ConfigError(f"{OWNER}: give one source: data.dataset (a PyG class), data.path "
                              f"(a saved Data) or data.nodes with data.edges; got "
                              f"{', '.join(given) or 'none'}" + (" without data.edges" if nodes and not edges else ""))
        if len(split) != 3 or min(split) < 0 or sum(split) > 1 + 1e-9:
            raise ConfigError(f"{OWNER}: split={split} must be three fractions (train, val, test) "
                              f"of at most 1 in all")
        self.source = dict(dataset=dataset, dataset_args=dict(dataset_args), root=root, path=path,
                           nodes=nodes, edges=edges, labels=labels)
        self.fields = _Fields(id_field, label_field, split_field, source_field, target_field, feature_fields)
        self.split, self.undirected, self.normalize = list(split), undirected, normalize_features

    @classmethod
    def check_files(cls, fields: Mapping[str, Any], test: bool = True) -> None:
        """The files named by data.path, data.nodes and data.edges are there (nothing read)."""
        for key in ("path", "nodes", "edges"):
            if fields[key] and not Path(fields[key]).is_file():
                raise missing_data(OWNER, f"file not found: {fields[key]} (at 'data.{key}')")

    def _read(self) -> Data:
        s = self.source
        if s["dataset"]:
            return pyg_dataset(s["dataset"], s["dataset_args"], s["root"])
        if s["path"]:
            return saved_graph(s["path"])
        return table_graph(s["nodes"], s["edges"], self.fields, s["labels"])

    def load(self) -> Data:
        data = self._read()
        where = self.source["dataset"] or self.source["path"] or self.source["nodes"]
        for key in ("x", "edge_index", "y"):
            if key not in data or data[key] is None:
                raise DataError(f"{OWNER}: {where} gives no '{key}'")
        n = data.x.shape[0]
        if data.x.dim() != 2 or data.y.shape[0] != n:
            raise DataError(f"{OWNER}: {where}: x must be (nodes, features) and y one row per "
                            f"node; got x {tuple(data.x.shape)}, y {tuple(data.y.shape)}")
        check_finite(data.x, where, data.node_ids if "node_ids" in data else None)
        edges = data.edge_index.long()
        if edges.numel() and (edges.min() < 0 or edges.max() >= n):
            raise DataError(f"{OWNER}: {where}: an edge names node {int(edges.max())}, but the "
                            f"graph has {n} nodes")
        out = Data(x=data.x.float(), y=data.y.long(),
                   edge_index=to_undirected(edges, num_nodes=n) if self.undirected else edges)
        for key in ("class_names", "node_ids"):  # (what attnflow-predict prints)
            if key in data:
                out[key] = data[key]
        if self.normalize:
            out.x = normalize_rows(out.x)
        out.update(self._masks(data, out.y))
        return out

    def _masks(self, data: Data, y: torch.Tensor) -> Dict[str, torch.Tensor]:
        given = {f"{s}_mask": data[f"{s}_mask"] for s in SPLITS if f"{s}_mask" in data}
        if len(given) == len(SPLITS):
            if self.split != [0.6, 0.2, 0.2]:
                warn_unread(f"{OWNER}: split={self.split}", "the graph comes with its masks")
            if any(m.dim() == 2 for m in given.values()):
                log.info("%s: 2-D masks (several splits): the first column is used", OWNER)
            masks = {k: (m[:, 0] if m.dim() == 2 else m).bool() for k, m in given.items()}
            for k, m in masks.items():
                if y.dim() == 1 and (y[m] < 0).any():
                    node = int((m & (y < 0)).nonzero()[0])
                    raise DataError(f"{OWNER}: node {node} is in the {k[:-5]} split but has no label")
            return masks
        return draw_masks(y, self.split, self.seed)
