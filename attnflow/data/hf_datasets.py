"""Splits of a Hugging Face ``datasets`` data set, read as the file readers read rows.

``data.hf_dataset``: a folder written by ``DatasetDict.save_to_disk`` (``load_from_disk``), else a
Hub name (``load_dataset(name, data.hf_config)``; with ``HF_DATASETS_OFFLINE=1`` only what its
cache holds: ``datasets`` honours that itself). ``data.hf_splits``: the names of the training,
validation and test splits (test null, or a name the data set lacks: no test split). A
``ClassLabel`` column, or a list of them (tags), is read as its names, which are then the
classes in their order (unless ``data.labels`` lists them). ``datasets`` is an optional extra
(``attnflow[hf-data]``), imported when a data set is opened.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from attnflow.config.registry import ConfigError
from attnflow.data.errors import DataError, missing_data
from attnflow.io.console import warn_unread

ROLES = ("train", "val", "test")
DEFAULT_SPLITS = ["train", "validation", "test"]  # load_dataset's names of the three


def _first_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0]}"


def open_dataset(name: str, config: Optional[str], owner: str):
    """The ``DatasetDict`` of a saved folder or Hub name (module docstring); one error line when
    ``datasets`` is missing, the folder unreadable, the Hub (or its cache) has no such data set,
    or the folder holds one ``Dataset`` without splits."""
    try:
        import datasets
    except ImportError:
        raise DataError(f"{owner}: data.hf_dataset={name} needs the datasets package (pip "
                        f"install 'attnflow[hf-data]')") from None
    path = Path(name).expanduser()
    try:
        if path.exists():
            if config:
                warn_unread(f"{owner}: hf_config={config}", f"{name} is a folder saved with save_to_disk")
            data = datasets.load_from_disk(str(path))
        else:
            data = datasets.load_dataset(name, config)
    except Exception as err:  # noqa: BLE001 — datasets' errors (offline, unknown name): one line
        if path.exists():
            raise DataError(f"{owner}: data.hf_dataset={name}: cannot read the folder (one written "
                            f"by save_to_disk): {_first_line(err)}") from None
        offline = " (HF_DATASETS_OFFLINE is set: only the cache is read)" if os.environ.get(
            "HF_DATASETS_OFFLINE", "0") not in ("", "0") else ""
        raise missing_data(owner, f"data.hf_dataset={name} is not a folder, and the Hub gave no "
                                  f"data set{offline}: {_first_line(err)}") from None
    if not isinstance(data, datasets.DatasetDict):
        raise DataError(f"{owner}: data.hf_dataset={name} holds one Dataset without splits; save "
                        f"a DatasetDict({{'train': ..., 'validation': ...}}) instead")
    return data


class HFDataset:
    """A data set named by ``data.hf_dataset``, opened on first use; its three splits by role."""

    def __init__(self, name: str, config: Optional[str], splits: Sequence[Optional[str]], owner: str):
        splits = list(splits)
        if len(splits) != 3 or not all(isinstance(s, str) and s for s in splits[:2]):
            raise ConfigError(f"{owner}: data.hf_splits={splits} must name the training, validation "
                              f"and test splits, [train, validation, test] (test may be null)")
        self.name, self.config, self.owner = name, config, owner
        self.names = dict(zip(ROLES, splits))
        self._data = None

    def __str__(self) -> str:
        return f"hf_dataset={self.name}" + (f" ({self.config})" if self.config else "")

    def load(self):
        if self._data is None:
            self._data = open_dataset(self.name, self.config, self.owner)
        return self._data

    def split(self, role: str) -> Optional["HFSplit"]:
        """The split of ``role`` (train, val, test); None where its name is null."""
        name = self.names[role]
        return None if name is None else HFSplit(self, name)


def _class_names(feature: Any) -> Optional[List[str]]:
    """The names of a ``ClassLabel`` feature or of a list of them; else None."""
    import datasets

    if isinstance(feature, (datasets.Sequence, datasets.LargeList)):
        feature = feature.feature
    return list(feature.names) if isinstance(feature, datasets.ClassLabel) else None


class HFSplit:
    """One split of an :class:`HFDataset`: what a reader asks of a file (rows naming where they
    are, the classes a column declares), named in errors as ``<data set> split '<name>'``."""

    def __init__(self, source: HFDataset, name: str):
        self.source, self.name = source, name

    def __str__(self) -> str:
        return f"{self.source} split '{self.name}'"

    def exists(self) -> bool:
        return self.name in self.source.load()

    def data(self):
        """The split's ``Dataset``; a split the data set lacks is an error naming those it has."""
        data = self.source.load()
        if self.name not in data:
            raise DataError(f"{self.source.owner}: {self.source} has no split '{self.name}' "
                            f"(splits: {', '.join(data)}); set data.hf_splits=[train, validation, "
                            f"test] to its names")
        return data[self.name]

    def check_columns(self, fields: Mapping[str, str]) -> None:
        """Each of ``fields`` ({column: the setting naming it}) is a column of the split."""
        columns = self.data().column_names
        for field, setting in fields.items():
            if field not in columns:
                raise DataError(f"{self.source.owner}: {self} has no column '{field}' (columns: "
                                f"{', '.join(columns)}); set data.{setting}")

    def class_names(self, field: str) -> Optional[List[str]]:
        """The names a ``ClassLabel`` column (or a column of lists of them) declares; else None."""
        features = self.data().features
        return _class_names(features[field]) if field in features else None

    def rows(self, fields: Mapping[str, str]) -> Iterator[Tuple[str, Dict[str, Any]]]:
        """``("row i", {column: value})`` of ``fields`` ({column: setting}, checked first), a
        class label as its name (-1, no label: None)."""
        self.check_columns(fields)
        data = self.data().select_columns(list(fields))
        named = {f: n for f in fields if (n := self.class_names(f)) is not None}
        for i, row in enumerate(data):
            for field, names in named.items():
                value = row[field]
                row[field] = ([_name(names, v) for v in value] if isinstance(value, list)
                              else _name(names, value))
            yield f"row {i}", row


def _name(names: List[str], value: Optional[int]) -> Optional[str]:
    return names[value] if value is not None and 0 <= value < len(names) else None


def hf_source(name: Optional[str], config: Optional[str], splits: Sequence[Optional[str]],
              owner: str) -> Optional[HFDataset]:
    """The :class:`HFDataset` of ``data.hf_dataset`` (None where it is not set)."""
    return HFDataset(name, config, splits, owner) if name else None


def class_names(source: Any, field: str) -> Optional[List[str]]:
    """The classes a split's ``field`` declares (an HF ``ClassLabel``); None for a file."""
    return source.class_names(field) if isinstance(source, HFSplit) else None


def translation_pairs(split: HFSplit, field: str, langs: Tuple[str, str]) -> Tuple[List[str], List[str]]:
    """(source texts, target texts) of a split: ``field``'s dicts keyed by language (WMT's
    ``translation``), else the columns named by the two languages."""
    columns = split.data().column_names
    owner = split.source.owner
    if field in columns:
        pairs = list(split.data()[field])
        bad = next((i for i, p in enumerate(pairs)
                    if not isinstance(p, dict) or not all(isinstance(p.get(k), str) for k in langs)), None)
        if bad is not None:
            raise DataError(f"{owner}: {split} row {bad}: '{field}' is {pairs[bad]!r:.80}, not a "
                            f"dict of {langs[0]!r} and {langs[1]!r} texts; set data.src_lang and "
                            f"data.tgt_lang to its keys")
        return [p[langs[0]] for p in pairs], [p[langs[1]] for p in pairs]
    if all(lang in columns for lang in langs):
        return tuple([t or "" for t in split.data()[lang]] for lang in langs)
    raise DataError(f"{owner}: {split} has neither a '{field}' column (dicts keyed by language) nor "
                    f"the columns '{langs[0]}' and '{langs[1]}' (columns: {', '.join(columns)}); set "
                    f"data.translation_field, or data.src_lang and data.tgt_lang to its columns")
